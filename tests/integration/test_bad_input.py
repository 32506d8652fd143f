"""Bad input gets the right gRPC status with a message naming the problem, changes nothing, and the
scheduler keeps serving: bad specs, unknown ids, cancelling a finished job, malformed protobuf, an
oversize message, a compressed message, garbage bytes, a half-open connection, a wrong or missing token,
and a worker speaking another protocol version."""

import os
import socket
import sys
import tempfile

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


def main():
    with tidetest.Cluster("badinput") as c:
        c.start_scheduler()
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


if __name__ == "__main__":
    main()
