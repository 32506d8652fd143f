"""A stock gRPC client (Debian's python3-grpcio) drives tide-scheduler from the .proto files alone:
SubmitJob, GetJob, ListJobs (paged), CancelJob, Health/Check and a followed WatchEvents stream."""

import os
import queue
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
from tide.v1 import types_pb2 as t  # noqa: E402
health = tidetest.load_module("health_pb2", os.path.join(GEN, "grpc/health/v1/health_pb2.py"))


def main():
    with tidetest.Cluster("grpcio") as c:
        c.start_scheduler()
        ch = grpc.insecure_channel(c.addr)
        md = [("authorization", f"Bearer {c.token}")]
        jobs = jsg.JobServiceStub(ch)
        cluster = csg.ClusterServiceStub(ch)

        # Health needs no token.
        check = ch.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=health.HealthCheckRequest.SerializeToString,
                               response_deserializer=health.HealthCheckResponse.FromString)
        assert check(health.HealthCheckRequest(), timeout=10).status == health.HealthCheckResponse.SERVING
        assert check(health.HealthCheckRequest(service="tide.v1.JobService"), timeout=10).status == \
            health.HealthCheckResponse.SERVING
        try:
            check(health.HealthCheckRequest(service="nope"), timeout=10)
            raise AssertionError("unknown service must fail")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND, e

        # Follow events from the start in a background thread.
        events = queue.Queue()
        stream = jobs.WatchEvents(js.WatchEventsRequest(follow=True), metadata=md)

        def follow():
            try:
                for ev in stream:
                    events.put(ev)
            except grpc.RpcError as e:
                events.put(e)
        th = threading.Thread(target=follow, daemon=True)
        th.start()

        spec = t.JobSpec(name="py", command=["/bin/echo", "hi"], min_workers=1, max_workers=2,
                         priority=t.PRIORITY_HIGH, env={"A": "1"}, workdir="/tmp", time_limit_seconds=60)
        j = jobs.SubmitJob(js.SubmitJobRequest(spec=spec), metadata=md, timeout=10)
        assert j.id and j.state == t.JOB_STATE_PENDING, j
        assert j.spec.env["A"] == "1" and j.spec.priority == t.PRIORITY_HIGH, j
        got = jobs.GetJob(js.GetJobRequest(id=j.id), metadata=md, timeout=10)
        assert got.id == j.id and got.spec.command == ["/bin/echo", "hi"] and got.submit_time_ms > 0, got
        # The followed stream sees the submission.
        ev = events.get(timeout=10)
        while not (isinstance(ev, t.Event) and ev.type == "job.submitted" and ev.job_id == j.id):
            assert not isinstance(ev, Exception), ev
            ev = events.get(timeout=10)

        # Paging: 5 more jobs, pages of 2.
        ids = [j.id] + [jobs.SubmitJob(js.SubmitJobRequest(spec=spec), metadata=md, timeout=10).id for _ in range(5)]
        seen, token = [], ""
        while True:
            page = jobs.ListJobs(js.ListJobsRequest(page_size=2, page_token=token), metadata=md, timeout=10)
            assert len(page.jobs) <= 2
            seen += [x.id for x in page.jobs]
            token = page.next_page_token
            if not token:
                break
        assert seen == ids, (seen, ids)
        pend = jobs.ListJobs(js.ListJobsRequest(states=[t.JOB_STATE_PENDING]), metadata=md, timeout=10)
        assert len(pend.jobs) == 6

        cancelled = jobs.CancelJob(js.CancelJobRequest(id=ids[1]), metadata=md, timeout=10)
        assert cancelled.state == t.JOB_STATE_CANCELLED, cancelled
        st = cluster.GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md, timeout=10)
        assert st.jobs_pending == 5 and st.jobs_cancelled == 1 and st.store == "sqlite", st
        assert len(cluster.ListWorkers(cs.ListWorkersRequest(), metadata=md, timeout=10).workers) == 0

        # A non-follow watch replays what is kept and ends.
        kept = list(jobs.WatchEvents(js.WatchEventsRequest(job_id=ids[1]), metadata=md, timeout=10))
        assert [e.type for e in kept] == ["job.submitted", "job.cancelled"], kept
        assert all(a.seq < b.seq for a, b in zip(kept, kept[1:]))
        stream.cancel()
        th.join(timeout=10)
        ch.close()
        print("ok   stock grpcio client: SubmitJob, GetJob, ListJobs, CancelJob, Health, WatchEvents")

        # /metrics on the same port, no token, valid for Prometheus' own checker.
        import shutil
        import subprocess
        import urllib.request
        body = urllib.request.urlopen(f"http://{c.addr}/metrics", timeout=10).read()
        assert b'tide_jobs{state="pending"} 5' in body, body
        assert b'tide_rpc_requests_total{method="/tide.v1.JobService/SubmitJob",code="OK"} 6' in body, body
        assert c.token.encode() not in body and b"/bin/echo" not in body
        assert urllib.request.urlopen(f"http://{c.addr}/healthz", timeout=10).read() == b"ok\n"
        promtool = shutil.which("promtool")
        assert promtool, "promtool (Debian package prometheus) is installed by scripts/deps.sh"
        r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True)
        assert r.returncode == 0, r.stdout + r.stderr
        print("ok   /metrics passes promtool check metrics; /healthz answers")

        # A graceful stop exits 0 (under ASan this also means no leak was found).
        c.kill_scheduler(tidetest.signal.SIGTERM)
        assert c.sched.returncode == 0, f"scheduler exited {c.sched.returncode}: {c.log('scheduler')}"
        print("ok   SIGTERM: clean exit")


if __name__ == "__main__":
    main()
