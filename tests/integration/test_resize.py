"""Elastic scaling end to end (docs/elastic.md) on a real scheduler and real workers on loopback.

1. Bad input: `tidectl scale` outside [min, max] (INVALID_ARGUMENT naming the bounds), of an ended job
   (FAILED_PRECONDITION), of an unknown one (NOT_FOUND), with --elastic and --workers together; a stock gRPC
   client (python3-grpcio) sees the same status codes. Nothing changes.
2. tide-mlp on MPI, elastic 2..4, started on the only 2 workers: scaled to 4 it is accepted and pending with the
   reason; 2 more workers join and it grows 2 -> 4 (generation 2); scaled to 2 it shrinks 4 -> 2 (generation 3);
   it ends with parameters bitwise equal to an uninterrupted run's. Each resize is an event with its latency.
3. The PyTorch DDP SDK example (unmodified torch, gloo) resized 2 -> 1 by generation: it checkpoints, its ranks
   stop, one rank resumes from that checkpoint's next step with WORLD_SIZE 1 and finishes.
4. Drain (`tidectl drain`, ClusterService.DrainWorker): tide-mlp on MPI, 2 ranks, 4 workers: draining rank 1's worker
   moves the job to a new generation on a spare (reason drain), the worker stays cordoned, and the run ends with the
   parameters of an uninterrupted one; an unknown worker is NOT_FOUND (tidectl and python3-grpcio), an empty id
   INVALID_ARGUMENT.
Run with /usr/bin/python3; TIDE_BUILD_DIR names the build."""

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

BIN = tidetest.BIN
MLP = os.path.join(BIN, "tide-mlp")
PYTHON = "/usr/bin/python3"
SDK = "examples/pytorch/ddp_train_sdk.py"
# Each micro-batch costs at least 3 ms of running time (not part of the trajectory), so 2 ranks take >= 12 ms a
# step and the run outlasts both resizes on any machine; the parameters do not depend on it or on the ranks.
MLP_ARGS = ["--width", "64", "--depth", "2", "--batch", "64", "--micro-batches", "8", "--log-every", "0"]
MLP_STEPS = 2000
RESIZED = re.compile(r"job\.resized.*?(\d+) -> (\d+) workers \((\w+): [^)]*\) in ([\d.]+) s \(checkpoint ([\d.]+) s, "
                     r"stop ([\d.]+) s, start ([\d.]+) s\)")


def submit(c, *args):
    return json.loads(c.tidectl("-o", "json", "submit", *args).stdout)["id"]


def events(c, jid):
    return c.tidectl("events", "--job", jid).stdout


def resized(c, jid):
    """[(from, to, reason, total, checkpoint, stop, start)] of the job's job.resized events."""
    return [(int(m[0]), int(m[1]), m[2], *map(float, m[3:])) for m in RESIZED.findall(events(c, jid))]


def wait_size(c, jid, n, generation, timeout=90):
    """The job runs generation `generation` on n ranks, each of which reported a step."""
    def ok():
        j = c.job(jid)
        ranks = j.get("ranks", [])
        if j.get("state") != "JOB_STATE_RUNNING" or int(j.get("generation", 0)) != generation or len(ranks) != n:
            return None
        return j if all(int(r.get("progress", {}).get("step", -1)) >= 0 for r in ranks) else None
    return wait_for(ok, timeout, f"job {jid}: generation {generation} on {n} ranks reporting steps")


def main():
    with tidetest.Cluster("resize") as c:
        shared = os.path.join(c.tmp, "shared")
        c.start_scheduler("--resize-dwell", "1s", "--resize-grace", "20s")
        for gpu in (0, 1):
            c.start_worker("node1", gpu)
        c.wait_workers(2)

        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_") and k != "RANK"}
        ref = subprocess.Popen([MLP, "--steps", str(MLP_STEPS), "--quiet"] + MLP_ARGS, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        tidetest._live.append(ref)

        def test_bad_input():
            jid = submit(c, "--min", "1", "--max", "2", "--", "sleep", "30")
            c.wait_job(jid, "JOB_STATE_RUNNING")
            before = c.job(jid)
            for args, code, text in (
                    (["--workers", "3"], "INVALID_ARGUMENT", "min_workers 1, max_workers 2"),
                    (["--workers", "0"], None, "--workers"),
                    (["--workers", "two"], None, "--workers"),
                    (["--workers", "1", "--elastic"], None, "--elastic"),
                    ([], None, "--workers")):
                r = c.tidectl("scale", jid, *args, check=False)
                assert r.returncode != 0 and text in r.stderr, (args, r.returncode, r.stdout, r.stderr)
                if code:
                    assert code in r.stderr or r.returncode == 1, r.stderr
            r = c.tidectl("scale", "999999", "--workers", "1", check=False)
            assert r.returncode != 0 and "not found" in r.stderr, r.stderr
            after = c.job(jid)
            assert after.get("targetWorkers", 0) == before.get("targetWorkers", 0) == 0, after
            assert after["generation"] == before["generation"] and "resize" not in after, after

            # A stock gRPC client gets the status codes.
            import grpc
            gen = tempfile.mkdtemp(prefix="tide-stubs-")
            tidetest.gen_stubs(gen)
            from tide.v1 import job_service_pb2 as js, job_service_pb2_grpc as jsg
            stub = jsg.JobServiceStub(grpc.insecure_channel(c.addr))
            md = [("authorization", f"Bearer {c.token}")]
            for req, code, text in ((js.ScaleJobRequest(id=jid, workers=5), grpc.StatusCode.INVALID_ARGUMENT,
                                     "max_workers 2"),
                                    (js.ScaleJobRequest(id=jid, workers=1, elastic=True),
                                     grpc.StatusCode.INVALID_ARGUMENT, "elastic"),
                                    (js.ScaleJobRequest(id="", workers=1), grpc.StatusCode.INVALID_ARGUMENT, "id"),
                                    (js.ScaleJobRequest(id="424242", workers=1), grpc.StatusCode.NOT_FOUND, "424242")):
                try:
                    stub.ScaleJob(req, metadata=md, timeout=10)
                    raise AssertionError(f"ScaleJob({req}) must fail")
                except grpc.RpcError as e:
                    assert e.code() == code and text in e.details(), (req, e.code(), e.details())
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED")
            try:
                stub.ScaleJob(js.ScaleJobRequest(id=jid, workers=1), metadata=md, timeout=10)
                raise AssertionError("scaling an ended job must fail")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.FAILED_PRECONDITION and "CANCELLED" in e.details().upper(), e
            r = c.tidectl("scale", jid, "--workers", "1", check=False)
            assert r.returncode != 0 and "ended" in r.stderr, r.stderr
            c.wait_workers(2)

        def test_mlp_grow_and_shrink_bitwise():
            ckdir = os.path.join(shared, "mlp")
            jid = submit(c, "--launcher", "mpi", "--min", "2", "--max", "4", "--", MLP, "--steps", str(MLP_STEPS),
                         "--checkpoint-dir", ckdir, "--simulated-compute", "3", *MLP_ARGS)
            wait_size(c, jid, 2, 1)
            # Only 2 workers exist: 4 is accepted and pending, with the reason.
            out = c.tidectl("scale", jid, "--workers", "4").stdout
            job = c.job(jid)
            assert int(job.get("targetWorkers", 0)) == 4, job
            rs = job.get("resize", {})
            assert rs.get("state") == "RESIZE_STATE_PENDING" and "needs 2 more GPUs" in rs.get("detail", ""), job
            assert "pending" in out, out
            assert "job.resize_pending" in events(c, jid)
            # Two more workers: it grows once its generation ran the dwell (1 s here).
            for gpu in (0, 1):
                c.start_worker("node2", gpu)
            job = wait_size(c, jid, 4, 2)
            step_grown = min(int(r["progress"]["step"]) for r in job["ranks"])
            assert step_grown < MLP_STEPS - 1, job
            lr = job.get("lastResize", {})
            assert lr.get("state") == "RESIZE_STATE_DONE" and int(lr.get("workers", 0)) == 4, job
            assert int(lr["fromWorkers"]) == 2 and int(lr["toGeneration"]) == 2 and int(job["resizes"]) == 1, lr
            # Shrink, following it to the end.
            out = c.tidectl("scale", jid, "--workers", "2", "--wait").stdout
            assert re.search(r"resized 4 -> 2 workers in [\d.]+ s", out), out
            job = wait_size(c, jid, 2, 3)
            assert int(job["resizes"]) == 2 and int(job["targetWorkers"]) == 2, job
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=240)
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, c.tidectl("logs", jid, check=False).stdout[-3000:])
            rz = resized(c, jid)
            assert [(f, t) for f, t, *_ in rz] == [(2, 4), (4, 2)], events(c, jid)
            for f, t, reason, total, ck, stop, start in rz:
                assert abs(total - (ck + stop + start)) < 0.02, rz
                print(f"     resize {f} -> {t} ({reason}): {total:.2f} s (checkpoint {ck:.2f}, stop {stop:.2f}, "
                      f"start {start:.2f})")
                if stop > 5:  # not a failure (no timing assertions); the evidence for docs/elastic.md's known weak
                    print(f"     slow stop ({stop:.2f} s): the workers' logs follow", file=sys.stderr)
                    for name in sorted(os.listdir(c.tmp)):
                        if name.startswith("worker-") and name.endswith(".log"):
                            print(f"--- {name}\n{c.log(name)}", file=sys.stderr)
            # /metrics counts them by reason, with their latencies summed.
            body = urllib.request.urlopen(f"http://{c.addr}/metrics", timeout=10).read().decode()
            n = {m[0]: float(m[1]) for m in re.findall(r'^tide_resizes_total\{reason="(\w+)"\} (\S+)$', body, re.M)}
            s = {m[0]: float(m[1]) for m in re.findall(r'^tide_resize_seconds_total\{reason="(\w+)"\} (\S+)$', body,
                                                      re.M)}
            want = {}
            for _, _, reason, total, *_ in rz:
                want[reason] = want.get(reason, 0) + 1
            assert all(n.get(k) == v for k, v in want.items()), (n, want)
            assert abs(sum(s.values()) - sum(x[3] for x in rz)) < 0.05, (s, rz)
            # `tidectl logs` shows the last generation: it resumed from generation 2's checkpoint on 2 ranks.
            log = c.tidectl("logs", jid, "--rank", "0").stdout
            resumes = re.findall(r"^tide-mlp: resumed from \S+: (\d+) steps done \(written by generation (\d+)\), "
                                 r"(\d+) ranks now$", log, re.M)
            assert [(g, n) for _, g, n in resumes] == [("2", "2")], (resumes, log[-3000:])
            assert 0 < int(resumes[0][0]) < MLP_STEPS, resumes
            got = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            out, err = ref.communicate(timeout=120)
            tidetest._live.remove(ref)
            assert ref.returncode == 0, err
            want = re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M)
            assert len(got) == 1 and got == want, (got, want, log[-3000:])

        def test_pytorch_resized():
            ck = os.path.join(c.tmp, "ck-ddp")
            jid = submit(c, "--min", "1", "--max", "2", "--workdir", tidetest.SRC, "--", PYTHON, SDK, "--steps",
                         "400", "--step-sleep", "0.02", "--checkpoint-dir", ck)
            wait_for(lambda: "step 20/" in c.tidectl("logs", jid, "--rank", "0").stdout, 90, "step 20 of rank 0")
            job = c.job(jid)
            assert len(job["ranks"]) == 2, job
            c.tidectl("scale", jid, "--workers", "1", "--wait", "--timeout", "90s")
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=120)
            assert job["state"] == "JOB_STATE_SUCCEEDED" and int(job["generation"]) == 2, job
            assert len(job["ranks"]) == 1, job
            log = c.tidectl("logs", jid).stdout
            m = re.search(r"resumed from (\S+): starting at step (\d+)", log)
            assert m and 20 < int(m.group(2)) < 400, log[-3000:]
            assert re.search(r"world 1 master 127\.0\.0\.1:", log), log[-3000:]
            assert "final-loss " in log, log[-3000:]
            rz = resized(c, jid)
            assert [(f, t) for f, t, *_ in rz] == [(2, 1)], events(c, jid)
            print(f"     PyTorch resize 2 -> 1: {rz[0][3]:.2f} s; resumed at step {m.group(2)}")

        def test_drain():
            steps = 600
            ref2 = subprocess.Popen([MLP, "--steps", str(steps), "--quiet"] + MLP_ARGS, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
            tidetest._live.append(ref2)
            import grpc
            gen = tempfile.mkdtemp(prefix="tide-stubs-")
            tidetest.gen_stubs(gen)
            from tide.v1 import cluster_service_pb2 as cs, cluster_service_pb2_grpc as csg
            stub = csg.ClusterServiceStub(grpc.insecure_channel(c.addr))
            md = [("authorization", f"Bearer {c.token}")]
            for req, code in ((cs.DrainWorkerRequest(id="nope/gpu9"), grpc.StatusCode.NOT_FOUND),
                              (cs.DrainWorkerRequest(id=""), grpc.StatusCode.INVALID_ARGUMENT)):
                try:
                    stub.DrainWorker(req, metadata=md, timeout=10)
                    raise AssertionError(f"DrainWorker({req}) must fail")
                except grpc.RpcError as e:
                    assert e.code() == code, (req, e.code(), e.details())
            r = c.tidectl("drain", "nope/gpu9", check=False)
            assert r.returncode == 1 and "NOT_FOUND" in r.stderr and "nope/gpu9" in r.stderr, r.stderr
            assert not any(w.get("cordoned") for w in c.workers_json()), c.workers_json()

            ckdir = os.path.join(shared, "mlp-drain")
            jid = submit(c, "--launcher", "mpi", "--workers", "2", "--", MLP, "--steps", str(steps),
                         "--checkpoint-dir", ckdir, "--simulated-compute", "3", *MLP_ARGS)
            job = wait_size(c, jid, 2, 1)
            victim = job["ranks"][1]["workerId"]
            out = c.tidectl("drain", "--reason", "maintenance", victim).stdout
            assert f"worker {victim} drained: job {jid} moves off it" in out, out
            job = wait_size(c, jid, 2, 2)
            assert victim not in [r["workerId"] for r in job["ranks"]], job
            lr = job.get("lastResize", {})
            assert lr.get("reason") == "RESIZE_REASON_DRAIN" and int(lr.get("workers", 0)) == 2, lr
            w = [w for w in c.workers_json() if w["id"] == victim][0]
            assert w.get("cordoned") and not w.get("jobId"), w
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=240)
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, c.tidectl("logs", jid, check=False).stdout[-3000:])
            ev = events(c, jid)
            assert "worker.drained" in ev and "(drain: worker " + victim + " drained: maintenance)" in ev, ev[-3000:]
            log = c.tidectl("logs", jid, "--rank", "0").stdout
            got = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            out, err = ref2.communicate(timeout=120)
            tidetest._live.remove(ref2)
            assert ref2.returncode == 0, err
            assert got and got == re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M), (got, out)
            rz = [x for x in resized(c, jid) if x[2] == "drain"]
            assert len(rz) == 1, events(c, jid)
            print(f"     drain: {rz[0][3]:.2f} s from the drain to every rank of the new generation running "
                  f"(checkpoint {rz[0][4]:.2f}, stop {rz[0][5]:.2f}, start {rz[0][6]:.2f})")
            c.tidectl("uncordon", victim)

        tidetest.run([test_bad_input, test_mlp_grow_and_shrink_bitwise, test_pytorch_resized, test_drain])


if __name__ == "__main__":
    main()
