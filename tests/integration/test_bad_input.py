"""Bad input gets the right gRPC status with a message naming the problem, changes nothing, and the
scheduler keeps serving: bad specs (policy fields too: unknown or dedicated pools, topology, memory,
checkpoint settings), unknown ids, cancelling a finished job, malformed protobuf, an oversize message, a
compressed message, garbage bytes, a half-open connection, a wrong or missing token, a worker speaking
another protocol version, and scheduler flags with bad values (one line naming the flag, exit 2)."""

import os
import socket
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
import grpc  # noqa: E402

GEN = tempfile.mkdtemp(prefix="tide-stubs-")
tidetest.gen_stubs(GEN)
from tide.v1 import job_service_pb2 as js, job_service_pb2_grpc as jsg  # noqa: E402
from tide.v1 import cluster_service_pb2 as cs, cluster_service_pb2_grpc as csg  # noqa: E402
from tide.v1 import types_pb2 as t, worker_service_pb2 as ws  # noqa: E402


def expect(fn, code, *needles):
    try:
        r = fn()
    except grpc.RpcError as e:
        assert e.code() == code, f"expected {code}, got {e.code()}: {e.details()}"
        for n in needles:
            assert n in (e.details() or ""), f"{n!r} not in {e.details()!r}"
        return e
    raise AssertionError(f"expected {code}, got a response: {r}")


def bad_flags():
    """Each bad value: exit status 2, one line on stderr that names the flag, and nothing started."""
    sched = os.path.join(tidetest.BIN, "tide-scheduler")
    tmp = tempfile.mkdtemp(prefix="tide-flags-")
    cases = [
        (["--pool", "gpu=urgent"], "--pool: pool gpu: \"urgent\" is not a class"),
        (["--pool", "bad name"], "--pool: pool name \"bad name\""),
        (["--aging", "5x"], "--aging: \"5x\" is not a duration"),
        (["--preempt-grace", "-1s"], "--preempt-grace:"),
        (["--ckpt-durable", ""], "--ckpt-durable: the directory must not be empty"),
        (["--ckpt-mfu-threshold", "1.5"], "--ckpt-mfu-threshold: \"1.5\" is not a fraction from 0 to 1"),
        (["--ckpt-deadline", "0"], "--ckpt-deadline: \"0\" is too short"),
        (["--reserve", "lots"], "--reserve: \"lots\" is not auto or a number of GPUs"),
        (["--failure-rate", "nan"], "--failure-rate: \"nan\" is not a number of failures"),
        (["--replacement-lead-time", "forever"], "--replacement-lead-time: \"forever\" is not a duration"),
        (["--max-restarts", "-2"], "--max-restarts: \"-2\" is not a number from 0 to 1000"),
    ]
    for args, needle in cases:
        data = os.path.join(tmp, "data")
        r = subprocess.run([sched, "--listen", "127.0.0.1:0", "--data-dir", data, *args], capture_output=True,
                           text=True, timeout=20)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert len(lines) == 1 and needle in lines[0], (args, r.stderr)
        assert not os.path.exists(data), f"{args}: the scheduler created its data dir before refusing"
    os.rmdir(tmp)
    print("ok   scheduler flags with bad values")


def main():
    bad_flags()
    with tidetest.Cluster("badinput") as c:
        c.start_scheduler("--pool", "crit=critical", "--pool", "shared")
        ch = grpc.insecure_channel(c.addr, options=[("grpc.max_send_message_length", 16 << 20)])
        md = [("authorization", f"Bearer {c.token}")]
        jobs = jsg.JobServiceStub(ch)
        cluster = csg.ClusterServiceStub(ch)
        ok = jobs.SubmitJob(js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=1)), metadata=md,
                            timeout=10)

        def submit(**kw):
            return lambda: jobs.SubmitJob(js.SubmitJobRequest(spec=t.JobSpec(**kw)), metadata=md, timeout=10)

        expect(submit(command=["x"], min_workers=3, max_workers=2), grpc.StatusCode.INVALID_ARGUMENT,
               "spec.max_workers (2) must be >= min_workers (3)")
        expect(submit(command=["x"], min_workers=0), grpc.StatusCode.INVALID_ARGUMENT, "spec.min_workers must be >= 1")
        expect(submit(command=[], min_workers=1), grpc.StatusCode.INVALID_ARGUMENT, "spec.command must not be empty")
        expect(submit(command=["x"], min_workers=1, priority=9), grpc.StatusCode.INVALID_ARGUMENT, "spec.priority")
        expect(lambda: jobs.SubmitJob(js.SubmitJobRequest(), metadata=md, timeout=10),
               grpc.StatusCode.INVALID_ARGUMENT, "spec is required")
        print("ok   bad specs")

        # Policy fields (docs/policies.md): the field is named, nothing is queued.
        expect(submit(command=["x"], min_workers=1, pool="nope"), grpc.StatusCode.INVALID_ARGUMENT,
               'spec.pool "nope" is unknown', "known: crit, shared")
        expect(submit(command=["x"], min_workers=1, pool="crit", priority=t.PRIORITY_LOW),
               grpc.StatusCode.INVALID_ARGUMENT, "spec.pool crit is dedicated to CRITICAL jobs; this job is LOW")
        expect(submit(command=["x"], min_workers=1, pool="crit"), grpc.StatusCode.INVALID_ARGUMENT,
               "dedicated to CRITICAL jobs; this job is NORMAL")  # UNSPECIFIED is NORMAL
        expect(submit(command=["x"], min_workers=1, pool="p" * 64), grpc.StatusCode.INVALID_ARGUMENT,
               "spec.pool name must be at most 63 characters")
        expect(submit(command=["x"], min_workers=1, topology=7), grpc.StatusCode.INVALID_ARGUMENT,
               "spec.topology 7 is not a Topology")
        expect(submit(command=["x"], min_workers=1, memory_per_rank_bytes=1 << 51), grpc.StatusCode.INVALID_ARGUMENT,
               "spec.memory_per_rank_bytes 2251799813685248 is larger than any GPU")
        expect(submit(command=["x"], min_workers=1, device="d" * 256), grpc.StatusCode.INVALID_ARGUMENT,
               "spec.device must be at most 255 characters")
        for bad in (1.5, -0.1, float("nan"), float("inf")):
            expect(submit(command=["x"], min_workers=1, checkpoint_mfu_threshold=bad),
                   grpc.StatusCode.INVALID_ARGUMENT, "spec.checkpoint_mfu_threshold must be between 0 and 1")
        expect(submit(command=["x"], min_workers=1, checkpoint_deadline_seconds=-1), grpc.StatusCode.INVALID_ARGUMENT,
               "spec.checkpoint_deadline_seconds must be between 0 and")
        print("ok   bad policy fields")

        expect(lambda: jobs.GetJob(js.GetJobRequest(id="999"), metadata=md, timeout=10), grpc.StatusCode.NOT_FOUND,
               "job 999 not found")
        expect(lambda: jobs.GetJob(js.GetJobRequest(id=""), metadata=md, timeout=10),
               grpc.StatusCode.INVALID_ARGUMENT, "id must not be empty")
        expect(lambda: jobs.CancelJob(js.CancelJobRequest(id="999"), metadata=md, timeout=10),
               grpc.StatusCode.NOT_FOUND, "job 999 not found")
        jobs.CancelJob(js.CancelJobRequest(id=ok.id), metadata=md, timeout=10)
        expect(lambda: jobs.CancelJob(js.CancelJobRequest(id=ok.id), metadata=md, timeout=10),
               grpc.StatusCode.FAILED_PRECONDITION, f"job {ok.id} already ended: CANCELLED")
        expect(lambda: cluster.CordonWorker(cs.WorkerRef(id="nope/gpu0"), metadata=md, timeout=10),
               grpc.StatusCode.NOT_FOUND, "worker nope/gpu0 not found")
        expect(lambda: jobs.GetJobLogs(js.GetJobLogsRequest(id="999"), metadata=md, timeout=10).next(),
               grpc.StatusCode.NOT_FOUND, "job 999 not found")
        print("ok   unknown ids and a finished job")

        raw = ch.unary_unary("/tide.v1.JobService/SubmitJob", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
        expect(lambda: raw(b"\xff\xff\xff\xff", metadata=md, timeout=10), grpc.StatusCode.INVALID_ARGUMENT,
               "not a valid tide.v1.SubmitJobRequest")
        expect(lambda: raw(b"\x0a" + b"\x80" * 6 * 1024 * 1024, metadata=md, timeout=20),
               grpc.StatusCode.RESOURCE_EXHAUSTED)
        big = t.JobSpec(command=["x" * 1000] * 5000, min_workers=1)  # 5 MB > the 4 MiB limit
        expect(lambda: jobs.SubmitJob(js.SubmitJobRequest(spec=big), metadata=md, timeout=20),
               grpc.StatusCode.RESOURCE_EXHAUSTED)
        expect(lambda: jobs.GetJob(js.GetJobRequest(id="0" * 5000), metadata=md, timeout=10,  # compressible
                                   compression=grpc.Compression.Gzip), grpc.StatusCode.UNIMPLEMENTED)
        expect(lambda: jobs.GetJob(js.GetJobRequest(id=ok.id), timeout=10), grpc.StatusCode.UNAUTHENTICATED)
        expect(lambda: jobs.GetJob(js.GetJobRequest(id=ok.id), metadata=[("authorization", "Bearer wrong")],
                                   timeout=10), grpc.StatusCode.UNAUTHENTICATED)
        expect(lambda: jobs.SubmitJob(js.SubmitJobRequest(spec=t.JobSpec(command=["x"], min_workers=1)),
                                      metadata=[("authorization", "Bearer wrong")], timeout=10),
               grpc.StatusCode.UNAUTHENTICATED)
        expect(lambda: ch.unary_unary("/tide.v1.JobService/Nope")(b"", metadata=md, timeout=10),
               grpc.StatusCode.UNIMPLEMENTED)
        print("ok   malformed, oversize, compressed, unauthenticated, unimplemented")

        host, port = c.addr.rsplit(":", 1)
        g = socket.create_connection((host, int(port)))
        g.sendall(b"\x00\x01\x02garbage that is neither HTTP/2 nor HTTP/1\r\n\r\n" * 10)
        g.settimeout(10)
        try:
            while g.recv(4096):
                pass
        except (ConnectionResetError, socket.timeout):
            pass
        g.close()
        half = socket.create_connection((host, int(port)))
        half.sendall(b"PRI * HTTP/2.0\r\n")  # a preface that never finishes
        h2bad = socket.create_connection((host, int(port)))
        h2bad.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x04\x99\x00\x00\x00\x00\x01garbage!")
        print("ok   garbage bytes, half-open and malformed HTTP/2 connections")

        # A worker that speaks another protocol version is refused with both versions named.
        connect = ch.stream_stream("/tide.v1.WorkerService/Connect",
                                   request_serializer=ws.WorkerMessage.SerializeToString,
                                   response_deserializer=ws.SchedulerMessage.FromString)
        hello = ws.WorkerMessage(hello=ws.WorkerHello(protocol_version=99, worker_id="x/gpu0", node="x"))
        e = expect(lambda: list(connect(iter([hello]), metadata=md, timeout=10)),
                   grpc.StatusCode.FAILED_PRECONDITION, "worker protocol 99", "speaks 1")
        hb = ws.WorkerMessage(heartbeat=ws.Heartbeat(seq=1))
        expect(lambda: list(connect(iter([hb]), metadata=md, timeout=10)), grpc.StatusCode.FAILED_PRECONDITION,
               "first message must be a hello")
        print("ok   worker protocol mismatch:", e.details())

        # Nothing changed, and the scheduler still serves (also over a fresh connection).
        ch2 = grpc.insecure_channel(c.addr)
        listed = jsg.JobServiceStub(ch2).ListJobs(js.ListJobsRequest(), metadata=md, timeout=10)
        assert [j.id for j in listed.jobs] == [ok.id], listed
        st = csg.ClusterServiceStub(ch2).GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md, timeout=10)
        assert st.workers_total == 0 and st.jobs_cancelled == 1, st
        assert c.sched.poll() is None
        half.close()
        h2bad.close()
        print("ok   nothing changed; the scheduler still serves")

        # A hello from a stream the worker gave up (ordered before the registered one by boot_id and
        # stream_seq) is refused with ABORTED and changes nothing: the newer stream stays registered.
        def hello(boot, seq):
            return ws.WorkerMessage(hello=ws.WorkerHello(protocol_version=1, worker_id="y/gpu0", node="y",
                                                         device="sim:h100", boot_id=boot, stream_seq=seq))
        done = threading.Event()

        def newer():
            yield hello(10, 2)
            done.wait(30)
        live = connect(newer(), metadata=md, timeout=30)
        first = next(live)
        assert first.HasField("welcome"), first
        for boot, seq in ((10, 1), (9, 7)):
            e = expect(lambda: list(connect(iter([hello(boot, seq)]), metadata=md, timeout=10)),
                       grpc.StatusCode.ABORTED, f"hello.boot_id {boot} stream_seq {seq}: older than the "
                       "registered stream (boot_id 10 stream_seq 2) of worker y/gpu0")
        st = csg.ClusterServiceStub(ch2).GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md, timeout=10)
        assert st.workers_total == 1 and st.workers_ready == 1 and st.workers_suspect == 0, st
        done.set()
        live.cancel()
        assert c.sched.poll() is None
        print("ok   a superseded stream's hello:", e.details())


if __name__ == "__main__":
    main()
