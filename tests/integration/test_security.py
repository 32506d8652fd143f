"""Identities, roles, ownership, quotas, rate limits and the audit log (docs/security.md), with tidectl and a stock
gRPC client (Debian's python3-grpcio): a user sees and changes only their own jobs; read-only callers read all and
change nothing; a worker token registers a worker and can do nothing else; admin-only calls are refused to others;
expired, revoked and unknown tokens are refused with UNAUTHENTICATED; classes, pools, GPU and queue limits are
enforced at submission with the limit named; a rate limit answers RESOURCE_EXHAUSTED; the users file is re-read
when it changes (a broken one keeps the identities in force); every changing call and every refusal is in the
audit log. Nothing refused changes anything."""

import contextlib
import hashlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402
import grpc  # noqa: E402

GEN = tempfile.mkdtemp(prefix="tide-stubs-")
tidetest.gen_stubs(GEN)
from tide.v1 import job_service_pb2 as js, job_service_pb2_grpc as jsg  # noqa: E402
from tide.v1 import cluster_service_pb2 as cs, cluster_service_pb2_grpc as csg  # noqa: E402
from tide.v1 import types_pb2 as t  # noqa: E402


def digest(token):
    return hashlib.sha256(token.encode()).hexdigest()


def users_file(path, extra=()):
    users = [
        {"name": "alice", "role": "user", "tokens": [{"sha256": digest("alice-token")}],
         "priority_classes": ["LOW", "NORMAL"], "max_gpus": 4, "max_queued_jobs": 2},
        {"name": "bob", "role": "user", "tokens": [{"sha256": digest("bob-token")}]},
        {"name": "pat", "role": "user", "tokens": [{"sha256": digest("pat-token")}],
         "pools": [{"name": "research", "max_gpus": 1}]},
        {"name": "ro", "role": "read-only", "tokens": [{"sha256": digest("ro-token")}]},
        {"name": "node3", "role": "worker", "tokens": [{"sha256": digest("worker-token")}]},
        {"name": "node9", "role": "worker", "tokens": [{"sha256": digest("worker9-token")}]},
        {"name": "carol", "role": "user",
         "tokens": [{"sha256": digest("carol-token"), "expires": "2020-01-01T00:00:00Z"}]},
        {"name": "dave", "role": "user", "tokens": [{"sha256": digest("dave-token"), "revoked": True}]},
        {"name": "eve", "role": "user", "tokens": [{"sha256": digest("eve-token")}], "rate_limit": 1},
        *extra,
    ]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"users": users}, f)
    os.replace(tmp, path)


def main():
    with tidetest.Cluster("security") as c:
        users = os.path.join(c.tmp, "users.json")
        users_file(users)
        # finished jobs are pruned 3 s after they end: their GPU time must stay in the usage report
        c.start_scheduler("--users", users, "--pool", "research", "--retention-s", "3")
        c.start_worker("node1", 0)
        c.start_worker("node1", 1)
        c.wait_workers(2)
        ch = grpc.insecure_channel(c.addr)
        jobs = jsg.JobServiceStub(ch)
        cluster = csg.ClusterServiceStub(ch)
        admin = c.token

        def md(token):
            return [("authorization", f"Bearer {token}")]

        def refused(fn, req, token, code, *needles):
            try:
                fn(req, metadata=md(token), timeout=10)
            except grpc.RpcError as e:
                assert e.code() == code, (e.code(), e.details())
                for n in needles:
                    assert n in e.details(), (n, e.details())
                return e.details()
            raise AssertionError(f"{fn} with {token} was not refused")

        def submit(token, *argv, workers=1, **kw):
            spec = t.JobSpec(command=list(argv) or ["sleep", "600"], min_workers=workers, max_workers=workers, **kw)
            return jobs.SubmitJob(js.SubmitJobRequest(spec=spec), metadata=md(token), timeout=10)

        @contextlib.contextmanager
        def as_token(token):
            saved, c.token = c.token, token
            try:
                yield
            finally:
                c.token = saved

        def test_ownership_and_roles():
            a = submit("alice-token", workers=3)  # 3 > 2 workers: stays queued
            assert a.owner == "alice", a
            b = submit("bob-token")
            assert b.owner == "bob"
            # bob cannot see, cancel, scale, checkpoint or read the logs of alice's job
            refused(jobs.GetJob, js.GetJobRequest(id=a.id), "bob-token", grpc.StatusCode.PERMISSION_DENIED,
                    f"job {a.id} belongs to alice")
            refused(jobs.CancelJob, js.CancelJobRequest(id=a.id), "bob-token", grpc.StatusCode.PERMISSION_DENIED,
                    "may only cancel their own jobs")
            refused(jobs.ScaleJob, js.ScaleJobRequest(id=a.id, workers=3), "bob-token",
                    grpc.StatusCode.PERMISSION_DENIED, "belongs to alice")
            refused(jobs.CheckpointJob, js.CheckpointJobRequest(id=a.id), "bob-token",
                    grpc.StatusCode.PERMISSION_DENIED, "belongs to alice")
            with as_token("bob-token"):
                r = c.tidectl("logs", a.id, check=False)
                assert r.returncode != 0 and "belongs to alice" in r.stderr, (r.returncode, r.stderr)
                mine = [j["id"] for j in c.tidectl_json("jobs").get("jobs", [])]
                assert b.id in mine and a.id not in mine, mine
            # ... and the refusals changed nothing
            assert jobs.GetJob(js.GetJobRequest(id=a.id), metadata=md("alice-token"), timeout=10).state == \
                t.JOB_STATE_PENDING
            # read-only: reads everything, changes nothing
            seen = [j.id for j in jobs.ListJobs(js.ListJobsRequest(), metadata=md("ro-token"), timeout=10).jobs]
            assert a.id in seen and b.id in seen, seen
            assert jobs.GetJob(js.GetJobRequest(id=a.id), metadata=md("ro-token"), timeout=10).owner == "alice"
            refused(jobs.CancelJob, js.CancelJobRequest(id=a.id), "ro-token", grpc.StatusCode.PERMISSION_DENIED,
                    "ro (read-only) may not call it")
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=1)), "ro-token",
                    grpc.StatusCode.PERMISSION_DENIED, "read-only")
            # admin-only calls
            for tok in ("alice-token", "ro-token"):
                refused(cluster.CordonWorker, cs.WorkerRef(id="node1/gpu0"), tok, grpc.StatusCode.PERMISSION_DENIED,
                        "admin only")
                refused(cluster.DrainWorker, cs.DrainWorkerRequest(id="node1/gpu0"), tok,
                        grpc.StatusCode.PERMISSION_DENIED, "admin only")
            assert not any(w.cordoned for w in cluster.ListWorkers(cs.ListWorkersRequest(), metadata=md(admin),
                                                                   timeout=10).workers)
            # a user's event stream carries only their own jobs' events
            evs = list(jobs.WatchEvents(js.WatchEventsRequest(), metadata=md("bob-token"), timeout=10))
            assert any(e.job_id == b.id for e in evs) and not any(e.job_id == a.id for e in evs), evs
            # the scheduler's own token is the admin: it cancels anyone's job
            assert jobs.CancelJob(js.CancelJobRequest(id=a.id), metadata=md(admin), timeout=10).state == \
                t.JOB_STATE_CANCELLED
            jobs.CancelJob(js.CancelJobRequest(id=b.id), metadata=md("bob-token"), timeout=10)

        def test_worker_token():
            refused(cluster.GetClusterStatus, cs.GetClusterStatusRequest(), "worker-token",
                    grpc.StatusCode.PERMISSION_DENIED, "node3 (worker) may not call it: not for workers")
            with as_token("worker-token"):
                c.start_worker("node3", 0)
            wait_for(lambda: any(w["id"] == "node3/gpu0" and w.get("state") == "WORKER_STATE_READY"
                                 for w in c.workers_json()), 20, "node3/gpu0 registered with a worker token")
            # another worker identity cannot take over node3/gpu0's id
            with as_token("worker9-token"):
                c.start_worker("node3", 1)  # its own id: fine
            wait_for(lambda: any(w["id"] == "node3/gpu1" for w in c.workers_json()), 20, "node3/gpu1 registered")
            with as_token("worker9-token"):
                c.start_worker("node8", 0, "--id", "node3/gpu0")  # node3's worker id: refused
            wait_for(lambda: "was registered by node3; node9 may not take it over" in
                     open(os.path.join(c.tmp, "worker-node8-gpu0.log")).read(), 20, "the takeover refused")
            assert [w["node"] for w in c.workers_json() if w["id"] == "node3/gpu0"] == ["node3"]
            # a user's token cannot register a worker
            with as_token("bob-token"):
                c.start_worker("node4", 0)
            wait_for(lambda: "may not call it: workers only" in open(os.path.join(c.tmp, "worker-node4-gpu0.log")).read(),
                     20, "node4's worker refused")
            assert not any(w["id"] == "node4/gpu0" for w in c.workers_json())

        def test_bad_tokens():
            req = cs.GetClusterStatusRequest()
            refused(cluster.GetClusterStatus, req, "carol-token", grpc.StatusCode.UNAUTHENTICATED,
                    "the token of carol expired at 2020-01-01T00:00:00Z")
            refused(cluster.GetClusterStatus, req, "dave-token", grpc.StatusCode.UNAUTHENTICATED,
                    "the token of dave was revoked")
            refused(cluster.GetClusterStatus, req, "nonsense", grpc.StatusCode.UNAUTHENTICATED, "invalid bearer token")
            try:
                cluster.GetClusterStatus(req, timeout=10)
                raise AssertionError("no token must be refused")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAUTHENTICATED and "missing bearer token" in e.details()
            with as_token("dave-token"):
                r = c.tidectl("status", check=False)
                assert r.returncode != 0 and "revoked" in r.stderr, (r.returncode, r.stderr)

        def test_quotas():
            before = len(jobs.ListJobs(js.ListJobsRequest(), metadata=md(admin), timeout=10).jobs)
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=1,
                                                                       priority=t.PRIORITY_HIGH)),
                    "alice-token", grpc.StatusCode.PERMISSION_DENIED, "spec.priority", "may not submit HIGH",
                    "LOW, NORMAL")
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=5)),
                    "alice-token", grpc.StatusCode.RESOURCE_EXHAUSTED, "limit is 4 (max_gpus)")
            q1 = submit("alice-token", workers=3)  # queued (2 workers), holds 3 of her 4
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=2)),
                    "alice-token", grpc.StatusCode.RESOURCE_EXHAUSTED, "may hold 3 GPUs", "max_gpus")
            # a burst may lend a job more workers: they count (3 held + 1 asked + 1 lent at 50% > 4)
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=1,
                                                                       burst_percent=50)),
                    "alice-token", grpc.StatusCode.RESOURCE_EXHAUSTED, "this one 2", "max_gpus")
            q2 = submit("alice-token", workers=1, priority=t.PRIORITY_LOW)
            # pools: pat may only use research, where her own limit is 1 GPU
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=1)),
                    "pat-token", grpc.StatusCode.PERMISSION_DENIED, "spec.pool", "only to pool research")
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=2,
                                                                       pool="research")),
                    "pat-token", grpc.StatusCode.RESOURCE_EXHAUSTED, "in pool research", "pools[].max_gpus")
            p = submit("pat-token", pool="research")
            assert p.spec.pool == "research"
            # the CLI names the limit and exits 1
            with as_token("alice-token"):
                r = c.tidectl("submit", "--priority", "critical", "--", "true", check=False)
                assert r.returncode == 1 and "may not submit CRITICAL" in r.stderr, (r.returncode, r.stderr)
            after = len(jobs.ListJobs(js.ListJobsRequest(), metadata=md(admin), timeout=10).jobs)
            assert after == before + 3, (before, after)  # only the three accepted ones
            for j in (q1, q2, p):
                jobs.CancelJob(js.CancelJobRequest(id=j.id), metadata=md(admin), timeout=10)

        def test_queued_limit():
            # a job of the admin holds every worker, so alice's 1-GPU jobs queue; she may have 2 queued
            n = len(c.workers_json())  # node1/gpu0, node1/gpu1, node3/gpu0, node3/gpu1 (some may be stopping ranks)
            assert n == 4, c.workers_json()
            hog = submit(admin, workers=n)
            c.wait_job(hog.id, "JOB_STATE_RUNNING")
            q = [submit("alice-token"), submit("alice-token")]
            assert all(jobs.GetJob(js.GetJobRequest(id=j.id), metadata=md(admin), timeout=10).state ==
                       t.JOB_STATE_PENDING for j in q)
            refused(jobs.SubmitJob, js.SubmitJobRequest(spec=t.JobSpec(command=["true"], min_workers=1)),
                    "alice-token", grpc.StatusCode.RESOURCE_EXHAUSTED, "2 jobs queued", "max_queued_jobs")
            for j in q + [hog]:
                jobs.CancelJob(js.CancelJobRequest(id=j.id), metadata=md(admin), timeout=10)

        def test_rate_limit():
            codes = []
            for _ in range(10):  # eve: 1 call/s, bursts of 2
                try:
                    cluster.GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md("eve-token"), timeout=10)
                    codes.append("OK")
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "rate limit of eve" in e.details(), \
                        e.details()
                    codes.append("LIMITED")
            assert codes[:2] == ["OK", "OK"] and "LIMITED" in codes, codes
            # other identities are not slowed by eve's limit
            cluster.GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md("bob-token"), timeout=10)

        def test_reload():
            refused(cluster.GetClusterStatus, cs.GetClusterStatusRequest(), "frank-token",
                    grpc.StatusCode.UNAUTHENTICATED, "invalid bearer token")
            users_file(users, [{"name": "frank", "role": "read-only", "tokens": [{"sha256": digest("frank-token")}]}])

            def frank_ok():
                try:
                    cluster.GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md("frank-token"), timeout=10)
                    return True
                except grpc.RpcError:
                    return False
            wait_for(frank_ok, 20, "frank's token after the users file changed")
            # a broken file is reported and the identities in force stay
            with open(users, "w") as f:
                f.write('{"users": [{"name": "x", "role": "boss", "tokens": []}]}')
            wait_for(lambda: "users[0] (x).role" in c.log("scheduler"), 20, "the broken users file reported")
            assert frank_ok()
            jobs.ListJobs(js.ListJobsRequest(), metadata=md("bob-token"), timeout=10)
            # frank follows the events; removing him ends that stream too, not only his next calls
            stream = jobs.WatchEvents(js.WatchEventsRequest(follow=True), metadata=md("frank-token"), timeout=60)
            ended = []

            def drain():
                try:
                    for _ in stream:
                        pass
                except grpc.RpcError as e:
                    ended.append(e)
            import threading
            th = threading.Thread(target=drain, daemon=True)
            th.start()
            users_file(users)  # SIGHUP re-reads at once
            c.sched.send_signal(1)
            wait_for(lambda: not frank_ok(), 20, "frank gone after SIGHUP")
            th.join(20)
            assert ended and ended[0].code() == grpc.StatusCode.UNAUTHENTICATED and \
                "frank is no longer an identity" in ended[0].details(), ended

        def test_audit_log():
            path = os.path.join(c.data, "audit.log")
            entries = [json.loads(l) for l in open(path)]
            base = {"time", "user", "role", "peer", "method", "target", "code", "message"}
            for e in entries:
                # known identities' entries are numbered; unknown tokens' are not (and rate-limited)
                assert set(e) - {"suppressed_before"} == (base | {"seq"} if e["user"] else base), e
                assert e["time"].endswith("Z") and e["peer"].startswith("127.0.0.1:"), e

            def has(**kw):
                return any(all(e.get(k) == v for k, v in kw.items()) for e in entries)
            assert has(user="alice", role="user", method="SubmitJob", code="OK"), entries
            assert has(user="bob", method="CancelJob", code="PERMISSION_DENIED"), entries
            assert has(user="admin", role="admin", method="CancelJob", code="OK"), entries
            assert has(user="alice", method="CordonWorker", code="PERMISSION_DENIED", target=""), entries
            assert has(user="dave", method="GetClusterStatus", code="UNAUTHENTICATED",
                       message="GetClusterStatus: the token of dave was revoked"), entries
            assert has(user="", method="GetClusterStatus", code="UNAUTHENTICATED",
                       message="GetClusterStatus: invalid bearer token"), entries
            assert has(user="eve", method="GetClusterStatus", code="RESOURCE_EXHAUSTED"), entries
            assert has(user="alice", method="SubmitJob", code="RESOURCE_EXHAUSTED"), entries
            sub = [e for e in entries if e["method"] == "SubmitJob" and e["code"] == "OK" and e["user"] == "pat"]
            assert sub and sub[0]["target"].startswith("job "), sub
            # reads are not logged unless refused
            assert not has(method="ListJobs", code="OK"), entries

        def test_usage():
            nonlocal cluster
            # every job of this test has ended; once pruned, their GPU time stays counted per owner and pool
            wait_for(lambda: not jobs.ListJobs(js.ListJobsRequest(), metadata=md(admin), timeout=10).jobs, 30,
                     "every finished job pruned")
            rep = cluster.GetUsage(cs.GetUsageRequest(), metadata=md(admin), timeout=10)
            rows = {(r.user, r.pool): r for r in rep.rows}
            assert rows[("bob", "*")].jobs == 1 and rows[("bob", "*")].gpu_seconds > 0, rep
            assert rows[("alice", "*")].jobs == 5, rep  # 1 (roles) + 2 (quotas) + 2 (queued limit)
            assert rows[("pat", "research")].jobs == 1, rep
            assert rows[("admin", "*")].jobs == 1 and rows[("admin", "*")].gpu_seconds > 0, rep
            assert abs(rep.total_gpu_seconds - sum(r.gpu_seconds for r in rep.rows)) < 1e-6
            # a user sees their own rows only
            mine = cluster.GetUsage(cs.GetUsageRequest(), metadata=md("bob-token"), timeout=10)
            assert [r.user for r in mine.rows] == ["bob"], mine
            refused(cluster.GetUsage, cs.GetUsageRequest(user="alice"), "bob-token",
                    grpc.StatusCode.PERMISSION_DENIED, "own usage")
            # ... and it survives a restart (pruned totals are in the store)
            c.kill_scheduler()
            c.start_scheduler("--users", users, "--pool", "research", "--retention-s", "3")
            cluster = csg.ClusterServiceStub(grpc.insecure_channel(c.addr))

            def usage_again():
                try:
                    return cluster.GetUsage(cs.GetUsageRequest(), metadata=md(admin), timeout=10)
                except grpc.RpcError as e:  # grpcio's first call may still ride the killed scheduler's socket
                    assert e.code() == grpc.StatusCode.UNAVAILABLE, e
                    return None
            again = wait_for(usage_again, 20, "GetUsage from the restarted scheduler")
            assert [(r.user, r.pool, r.jobs, round(r.gpu_seconds, 6)) for r in again.rows] == \
                [(r.user, r.pool, r.jobs, round(r.gpu_seconds, 6)) for r in rep.rows], (rep, again)

        def test_audit_api():
            # admins and read-only callers list the entries; the changing calls' survive the restart above
            got = cluster.ListAudit(cs.ListAuditRequest(limit=1000), metadata=md("ro-token"), timeout=10).entries
            assert any(e.user == "alice" and e.method == "SubmitJob" and e.code == "OK" for e in got), got
            assert any(e.user == "bob" and e.method == "CancelJob" and e.code == "PERMISSION_DENIED" and
                       e.target.startswith("job ") for e in got), got
            seqs = [e.seq for e in got]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
            bobs = cluster.ListAudit(cs.ListAuditRequest(user="bob"), metadata=md(admin), timeout=10).entries
            assert bobs and all(e.user == "bob" for e in bobs), bobs
            after = cluster.ListAudit(cs.ListAuditRequest(after_seq=seqs[-2]), metadata=md(admin), timeout=10).entries
            assert [e.seq for e in after][:1] == [seqs[-1]], (after, seqs)
            refused(cluster.ListAudit, cs.ListAuditRequest(), "alice-token", grpc.StatusCode.PERMISSION_DENIED,
                    "admin and read-only roles only")

        def test_cli():
            with as_token("bob-token"):
                out = c.tidectl("usage")
                assert "bob" in out.stdout and "alice" not in out.stdout, out.stdout
                r = c.tidectl("audit", check=False)
                assert r.returncode == 1 and "admin and read-only roles only" in r.stderr, (r.returncode, r.stderr)
            with as_token("ro-token"):
                out = c.tidectl("audit", "--user", "alice").stdout
                assert "SubmitJob" in out and "bob" not in out, out
                rows = c.tidectl_json("usage")
                assert {r["user"] for r in rows["rows"]} == {"admin", "alice", "bob", "pat"}, rows

        tidetest.run([test_ownership_and_roles, test_worker_token, test_bad_tokens, test_quotas, test_queued_limit,
                      test_rate_limit, test_reload, test_audit_log, test_usage, test_audit_api, test_cli])


if __name__ == "__main__":
    main()
