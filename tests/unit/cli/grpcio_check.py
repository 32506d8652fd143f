#!/usr/bin/python3
"""tidectl against a stock gRPC server (Debian's python3-grpcio) on 127.0.0.1, port chosen by the kernel.

The server implements JobService and ClusterService from the .proto files with canned answers; the check
runs the real tidectl binary (real transport, real HTTP/2) through each command and compares stdout,
stderr and exit codes. It also checks the bearer token arrives. Exits non-zero on the first mismatch.
Usage: grpcio_check.py TIDECTL PROTO_ROOT
"""
import importlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc
from grpc_tools import protoc

TOKEN = "tok-123"


def load(proto_root, gen):
    for p in ("tide/v1/types.proto", "tide/v1/job_service.proto", "tide/v1/cluster_service.proto"):
        if protoc.main(["protoc", "-I" + proto_root, "--python_out=" + gen, p]) != 0:
            sys.exit("protoc failed on " + p)
    sys.path.insert(0, gen)
    t = importlib.import_module("tide.v1.types_pb2")
    j = importlib.import_module("tide.v1.job_service_pb2")
    c = importlib.import_module("tide.v1.cluster_service_pb2")
    return t, j, c


class Scheduler:
    def __init__(self, t, j, c):
        self.t, self.j, self.c = t, j, c
        self.lock = threading.Lock()
        self.gets = 0
        self.tokens = set()
        self.submitted = None
        self.ckpt_polls = None  # GetJob reads since CheckpointJob; None: no request in flight
        self.ckpt_deadline = None
        self.scale_polls = None  # GetJob reads since ScaleJob; None: no resize in flight

    def auth(self, ctx):
        md = dict(ctx.invocation_metadata())
        self.tokens.add(md.get("authorization", ""))

    def job(self, state, gen=0, message=""):
        t = self.t
        j = t.Job(id="1", state=state, generation=gen, message=message, submit_time_ms=int(time.time() * 1000) - 5000,
                  failed_rank=-1, owner="alice")
        j.spec.name = "train"
        j.spec.command.extend(["python3", "train.py"])
        j.spec.min_workers = 2
        if gen:
            j.worker_ids.extend(["n1/gpu0", "n1/gpu1"])
        return j

    def SubmitJob(self, req, ctx):
        self.auth(ctx)
        self.submitted = req.spec
        return self.job(self.t.JOB_STATE_PENDING, message="queued")

    def GetJob(self, req, ctx):
        self.auth(ctx)
        if req.id != "1":
            ctx.abort(grpc.StatusCode.NOT_FOUND, "job %s not found" % req.id)
        with self.lock:
            if self.ckpt_polls is not None:
                # A checkpoint request: in flight for two reads, then answered.
                self.ckpt_polls += 1
                j = self.job(self.t.JOB_STATE_RUNNING, 1)
                if self.ckpt_polls < 3:
                    j.checkpoint_request = 77
                    j.checkpoint_deadline_ms = self.ckpt_deadline
                else:
                    self.ckpt_polls = None
                    c = j.last_checkpoint
                    c.step, c.generation, c.path, c.bytes, c.ranks, c.request_id = 5, 1, "/ckpt/5", 4096, 2, 77
                return j
            if self.scale_polls is not None:
                # A resize 2 -> 4: stopping for one read, then done in generation 2.
                self.scale_polls += 1
                j = self.job(self.t.JOB_STATE_RUNNING, 1)
                j.target_workers = 4
                if self.scale_polls < 2:
                    self.resize(j, self.t.RESIZE_STATE_STOPPING)
                else:
                    self.scale_polls = None
                    j.generation = 2
                    j.worker_ids.extend(["n2/gpu0", "n2/gpu1"])
                    j.resizes = 1
                    r = j.last_resize
                    r.state, r.reason, r.from_workers, r.to_workers, r.workers = \
                        self.t.RESIZE_STATE_DONE, self.t.RESIZE_REASON_REQUESTED, 2, 4, 4
                    r.from_generation, r.to_generation = 1, 2
                    r.total_seconds, r.checkpoint_seconds, r.stop_seconds, r.start_seconds = 1.5, 0.25, 0.5, 0.75
                return j
            self.gets += 1
            n = self.gets
        t = self.t
        if n == 1:
            return self.job(t.JOB_STATE_RUNNING, 1)
        return self.job(t.JOB_STATE_SUCCEEDED, 1)

    def ListJobs(self, req, ctx):
        self.auth(ctx)
        resp = self.j.ListJobsResponse()
        if req.page_token == "":
            resp.jobs.append(self.job(self.t.JOB_STATE_RUNNING, 1))
            resp.next_page_token = "page2"
        else:
            j = self.job(self.t.JOB_STATE_FAILED, 1, "rank 1 exited with code 3")
            j.id = "2"
            resp.jobs.append(j)
        return resp

    def CancelJob(self, req, ctx):
        self.auth(ctx)
        return self.job(self.t.JOB_STATE_CANCELLED, 1, "cancelled by user")

    def CheckpointJob(self, req, ctx):
        self.auth(ctx)
        if req.id != "1":
            ctx.abort(grpc.StatusCode.NOT_FOUND, "job %s not found" % req.id)
        j = self.job(self.t.JOB_STATE_RUNNING, 1)
        with self.lock:
            self.ckpt_polls = 0
            self.ckpt_deadline = int(time.time() * 1000) + (req.deadline_ms or 60000)
            j.checkpoint_request = 77
            j.checkpoint_deadline_ms = self.ckpt_deadline
        return j

    def resize(self, j, state):
        r = j.resize
        r.state, r.reason, r.from_workers, r.to_workers, r.from_generation = \
            state, self.t.RESIZE_REASON_REQUESTED, 2, 4, 1
        r.detail = "requested by ScaleJob"
        r.decided_ms = int(time.time() * 1000)

    def ScaleJob(self, req, ctx):
        self.auth(ctx)
        if req.id != "1":
            ctx.abort(grpc.StatusCode.NOT_FOUND, "job %s not found" % req.id)
        if req.workers != 4:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "workers %d is outside [2, 4]" % req.workers)
        j = self.job(self.t.JOB_STATE_RUNNING, 1)
        j.target_workers = 4
        self.resize(j, self.t.RESIZE_STATE_CHECKPOINTING)
        with self.lock:
            self.scale_polls = 0
        return j

    def GetJobLogs(self, req, ctx):
        self.auth(ctx)
        yield self.j.LogChunk(rank=0, data=b"hello from 0\npart")
        yield self.j.LogChunk(rank=1, data=b"hello from 1\n")
        yield self.j.LogChunk(rank=0, data=b"ial\n")

    def WatchEvents(self, req, ctx):
        self.auth(ctx)
        t = self.t
        for seq, typ in ((1, "job.submitted"), (2, "job.started"), (3, "job.succeeded")):
            if seq <= req.since_seq:
                continue
            yield t.Event(seq=seq, time_ms=1714564800000 + seq * 1000, type=typ, job_id="1", message="m%d" % seq)
        if req.follow:
            # Keep the stream open until the client goes away (submit --wait cancels it).
            gone = threading.Event()
            ctx.add_callback(gone.set)
            if ctx.is_active():
                gone.wait()

    def ListWorkers(self, req, ctx):
        self.auth(ctx)
        resp = self.c.ListWorkersResponse()
        w = resp.workers.add(id="n1/gpu0", node="n1", gpu_index=0, device="sim:h100",
                             state=self.t.WORKER_STATE_READY, rank=-1,
                             last_heartbeat_ms=int(time.time() * 1000))
        w.telemetry.gpu_util = 0.5
        w.telemetry.temperature_c = 40
        return resp

    def GetClusterStatus(self, req, ctx):
        self.auth(ctx)
        return self.c.ClusterStatus(version="9.9.9", uptime_ms=3600000, leader_epoch=2, workers_total=1,
                                    workers_ready=1, jobs_running=1, store="sqlite")

    def CordonWorker(self, req, ctx):
        self.auth(ctx)
        return self.t.Worker(id=req.id, cordoned=True)

    def GetUsage(self, req, ctx):
        self.auth(ctx)
        r = self.c.UsageReport(total_gpu_seconds=9000.0)
        r.rows.add(user=req.user or "alice", pool="*", gpu_seconds=9000.0, jobs=2, running_jobs=1, gpus_in_use=2)
        return r

    def ListAudit(self, req, ctx):
        self.auth(ctx)
        if req.user == "mallory":
            ctx.abort(grpc.StatusCode.PERMISSION_DENIED, "role user may not read the audit log")
        resp = self.c.ListAuditResponse()
        resp.entries.add(seq=req.after_seq + 1, time_ms=1714564800000, user="alice", role="user", method="CancelJob",
                         target="job 1", code="OK")
        return resp


def serve(s):
    t, j, c = s.t, s.j, s.c
    u = grpc.unary_unary_rpc_method_handler
    st = grpc.unary_stream_rpc_method_handler
    job_methods = {
        "SubmitJob": u(s.SubmitJob, j.SubmitJobRequest.FromString, t.Job.SerializeToString),
        "GetJob": u(s.GetJob, j.GetJobRequest.FromString, t.Job.SerializeToString),
        "ListJobs": u(s.ListJobs, j.ListJobsRequest.FromString, j.ListJobsResponse.SerializeToString),
        "CancelJob": u(s.CancelJob, j.CancelJobRequest.FromString, t.Job.SerializeToString),
        "CheckpointJob": u(s.CheckpointJob, j.CheckpointJobRequest.FromString, t.Job.SerializeToString),
        "ScaleJob": u(s.ScaleJob, j.ScaleJobRequest.FromString, t.Job.SerializeToString),
        "GetJobLogs": st(s.GetJobLogs, j.GetJobLogsRequest.FromString, j.LogChunk.SerializeToString),
        "WatchEvents": st(s.WatchEvents, j.WatchEventsRequest.FromString, t.Event.SerializeToString),
    }
    cluster_methods = {
        "ListWorkers": u(s.ListWorkers, c.ListWorkersRequest.FromString, c.ListWorkersResponse.SerializeToString),
        "GetClusterStatus": u(s.GetClusterStatus, c.GetClusterStatusRequest.FromString,
                              c.ClusterStatus.SerializeToString),
        "CordonWorker": u(s.CordonWorker, c.WorkerRef.FromString, t.Worker.SerializeToString),
        "GetUsage": u(s.GetUsage, c.GetUsageRequest.FromString, c.UsageReport.SerializeToString),
        "ListAudit": u(s.ListAudit, c.ListAuditRequest.FromString, c.ListAuditResponse.SerializeToString),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("tide.v1.JobService", job_methods),
                                     grpc.method_handlers_generic_handler("tide.v1.ClusterService", cluster_methods)))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


failures = 0


def check(tidectl, port, args, want_rc, want_out=None, want_err=None, contains=()):
    global failures
    env = dict(os.environ, TIDE_SCHEDULER="127.0.0.1:%d" % port, TIDE_TOKEN=TOKEN, TZ="UTC")
    p = subprocess.run([tidectl] + args, capture_output=True, env=env, timeout=60)
    out, err = p.stdout.decode(), p.stderr.decode()
    ok = p.returncode == want_rc and (want_out is None or out == want_out) and \
        (want_err is None or err == want_err) and all(c in out for c in contains)
    if not ok:
        failures += 1
        print("FAIL tidectl %s\n  rc=%d (want %d)\n  stdout=%r\n  stderr=%r" % (" ".join(args), p.returncode,
                                                                                want_rc, out, err))
    else:
        print("ok   tidectl %s" % " ".join(args))


def main():
    tidectl, proto_root = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as gen:
        s = Scheduler(*load(proto_root, gen))
        server, port = serve(s)
        try:
            check(tidectl, port, ["submit", "-n", "2", "--", "python3", "train.py"], 0, "1\n", "")
            if s.submitted is None or list(s.submitted.command) != ["python3", "train.py"] or \
                    s.submitted.min_workers != 2 or s.submitted.name != "python3":
                global failures
                failures += 1
                print("FAIL submitted spec: %r" % s.submitted)
            check(tidectl, port, ["submit", "--wait", "--", "python3", "train.py"], 0,
                  "job 1: PENDING (queued)\njob 1: RUNNING on n1/gpu0,n1/gpu1 (generation 1)\njob 1: SUCCEEDED\n", "")
            check(tidectl, port, ["jobs"], 0, contains=("ID   NAME    OWNER   STATE", "1    train   alice   RUNNING   2/2",
                                                        "2    train   alice   FAILED    2/2       1     ", "rank 1 exited with code 3\n"))
            check(tidectl, port, ["job", "1"], 0, contains=("ID:           1\n", "State:        SUCCEEDED\n",
                                                             "Owner:        alice\n"))
            check(tidectl, port, ["job", "7"], 1, "", "tidectl: NOT_FOUND: job 7 not found\n")
            check(tidectl, port, ["cancel", "1"], 0, "job 1 cancelled\n", "")
            check(tidectl, port, ["checkpoint", "1", "--deadline", "30s", "--wait"], 0,
                  "job 1: checkpoint requested (request 77, deadline in 30s)\n"
                  "job 1: checkpoint of step 5 complete (2 ranks, 4096 bytes, /ckpt/5)\n", "")
            check(tidectl, port, ["checkpoint", "9"], 1, "", "tidectl: NOT_FOUND: job 9 not found\n")
            check(tidectl, port, ["scale", "1", "--workers", "4", "--wait"], 0,
                  "job 1: scaling 2 -> 4 workers (resizing: checkpointing)\n"
                  "job 1: resized 2 -> 4 workers in 1.50 s (checkpoint 0.25 s, stop 0.50 s, start 0.75 s), "
                  "generation 2\n", "")
            check(tidectl, port, ["scale", "1", "-n", "9"], 1, "", "tidectl: INVALID_ARGUMENT: workers 9 is outside [2, 4]\n")
            check(tidectl, port, ["logs", "1"], 0,
                  "[rank 0] hello from 0\n[rank 1] hello from 1\n[rank 0] partial\n", "")
            check(tidectl, port, ["logs", "1", "--rank", "0"], 0, "hello from 0\nparthello from 1\nial\n", "")
            check(tidectl, port, ["events", "--since", "1"], 0,
                  "2024-05-01 12:00:02  job.started        1      -              m2\n"
                  "2024-05-01 12:00:03  job.succeeded      1      -              m3\n", "")
            check(tidectl, port, ["workers"], 0, contains=("n1/gpu0   n1     0     sim:h100   READY   -     -      no"
                                                           "         50%    40C",))
            check(tidectl, port, ["cordon", "n1/gpu0"], 0, "worker n1/gpu0 cordoned\n", "")
            check(tidectl, port, ["status"], 0, contains=("(tide 9.9.9, up 1h, leader epoch 2, store sqlite)",))
            check(tidectl, port, ["version"], 0, contains=("scheduler 9.9.9 at 127.0.0.1:%d\n" % port,))
            check(tidectl, port, ["usage", "--user", "bob"], 0,
                  "USER    POOL   GPU-HOURS   JOBS   RUNNING   GPUS\n"
                  "bob     *      2.50        2      1         2\n"
                  "TOTAL          2.50        2      1         2\n", "")
            check(tidectl, port, ["audit", "--utc"], 0,
                  "TIME                      USER    ROLE   METHOD      TARGET   RESULT   MESSAGE\n"
                  "2024-05-01 12:00:00 UTC   alice   user   CancelJob   job 1    OK\n", "")
            check(tidectl, port, ["audit", "--user", "mallory"], 1, "",
                  "tidectl: PERMISSION_DENIED: role user may not read the audit log\n")
            check(tidectl, port, ["-o", "json", "status"], 0, contains=('"version": "9.9.9"', '"leaderEpoch": "2"'))
            # Nothing listens on the port once the server is gone.
        finally:
            server.stop(None)
        check(tidectl, port, ["status"], 1, "",
              "tidectl: UNAVAILABLE: cannot reach scheduler at 127.0.0.1:%d: connection refused\n" % port)
        if s.tokens != {"Bearer " + TOKEN}:
            failures += 1
            print("FAIL authorization headers seen: %r" % s.tokens)
    print("%d failures" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
