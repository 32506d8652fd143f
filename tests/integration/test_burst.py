"""Phase-aware burst end to end (docs/elastic.md, "Burst") on a real scheduler, real workers and mpirun on loopback.

1. Bad input: `tidectl submit --burst` with 0, 101, a word or a negative (CLI error, exit 2, nothing submitted); a stock gRPC
   client (python3-grpcio) submitting burst_percent 150, or a burst_command without burst_percent, gets
   INVALID_ARGUMENT naming the field; nothing is queued.
2. tide-mlp on MPI, 2 ranks, `--burst 50`, on 3 workers: in its evaluation phases (held-out shards published as
   detached tasks, rank 0 reporting a high-load phase) tide lends it the third worker (job.burst_lent,
   job.burst_started), which runs tide-mlp as a burst process and evaluates shards; after each phase it is taken back
   (job.burst_reclaimed) and is free again. Every (step, shard) of every phase is in eval.log exactly once with the
   loss a plain run computes, some of them by the lent worker; the parameters are bitwise a plain run's; /metrics
   counts the lendings and ends with none lent.
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

MLP = os.path.join(tidetest.BIN, "tide-mlp")
STEPS, EVERY, SHARDS = 200, 50, 64
# 100 ms of running time per shard, one shard per rank per step: a phase holds the 2 ranks for ~32 steps (a few
# seconds), long enough for the controller (it learns from the first phase, then lends when the predicted rest is
# over twice the lending cost); 4 ms per micro-batch keeps the normal phases short. Neither changes the losses or
# the parameters.
MLP_ARGS = ["--steps", str(STEPS), "--width", "16", "--depth", "2", "--batch", "32", "--micro-batches", "8",
            "--log-every", "0", "--checkpoint-keep", "100", "--eval-every", str(EVERY), "--eval-tasks", str(SHARDS),
            "--eval-per-step", "1"]
TIMED = ["--eval-compute", "100", "--simulated-compute", "4"]
EVAL = re.compile(r"^eval step (\d+) shard (\d+) loss (\S+) by (rank|burst) (\d+)$")


def metric(c, name):
    body = urllib.request.urlopen(f"http://{c.addr}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    assert m, (name, body[-2000:])
    return float(m.group(1))


def eval_log(path):
    """{(step, shard): [(loss, by)]} of an eval.log."""
    out = {}
    with open(path) as f:
        for line in f.read().splitlines():
            m = EVAL.match(line)
            assert m, line
            out.setdefault((int(m[1]), int(m[2])), []).append((m[3], f"{m[4]} {m[5]}"))
    return out


def main():
    with tidetest.Cluster("burst") as c:
        c.start_scheduler("--burst-enter", "100ms", "--burst-exit", "500ms", "--burst-dwell", "1s", "--reserve", "0")
        for gpu in (0, 1, 2):
            c.start_worker("node1", gpu)
        c.wait_workers(3)

        # The reference: the same trainer outside tide (one process), without the timing flags.
        ref_dir = os.path.join(c.tmp, "ref")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_") and k != "RANK"}
        ref = subprocess.Popen([MLP, "--quiet", "--checkpoint-dir", ref_dir] + MLP_ARGS, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        tidetest._live.append(ref)

        def test_bad_input():
            before = c.tidectl_json("jobs", "-A")
            for args in (["--burst", "0"], ["--burst", "101"], ["--burst=x"], ["--burst=-5"], ["--burst=20%%"]):
                r = c.tidectl("submit", *args, "--", "true", check=False)
                assert r.returncode == 2 and "bad --burst" in r.stderr, (args, r.returncode, r.stderr)
            import grpc
            gen = tempfile.mkdtemp(prefix="tide-stubs-")
            tidetest.gen_stubs(gen)
            from tide.v1 import job_service_pb2 as js, job_service_pb2_grpc as jsg, types_pb2 as t
            stub = jsg.JobServiceStub(grpc.insecure_channel(c.addr))
            md = [("authorization", f"Bearer {c.token}")]
            for spec, text in ((t.JobSpec(command=["true"], min_workers=1, burst_percent=150), "burst_percent"),
                               (t.JobSpec(command=["true"], min_workers=1, burst_percent=-1), "burst_percent"),
                               (t.JobSpec(command=["true"], min_workers=1, burst_command=["true"]), "burst_command")):
                try:
                    stub.SubmitJob(js.SubmitJobRequest(spec=spec), metadata=md, timeout=10)
                    raise AssertionError(f"SubmitJob({spec}) must fail")
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.details(), (e.code(), e.details())
            assert c.tidectl_json("jobs", "-A") == before

        def test_mlp_lent_in_eval_phases():
            ck = os.path.join(c.tmp, "ckpt")
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "2", "--burst", "50", "--", MLP,
                          "--checkpoint-dir", ck, *MLP_ARGS, *TIMED)
            jid = json.loads(r.stdout)["id"]
            seen = {"lent": 0, "high": False, "line": ""}

            def watch():
                j = c.job(jid)
                if int(j.get("lentWorkers", 0)) > 0 and not seen["line"]:
                    seen["lent"] = int(j["lentWorkers"])
                    seen["line"] = c.tidectl("job", jid).stdout
                seen["high"] = seen["high"] or bool(j.get("highLoad"))
                return j if j.get("state") in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") else None
            job = wait_for(watch, 240, f"job {jid} to end", interval=0.1)
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, c.tidectl("logs", jid, check=False).stdout[-3000:])
            assert int(job["generation"]) == 1 and len(job["ranks"]) == 2, job  # lent workers never resize it
            assert seen["high"], "rank 0 never reported a high-load phase"
            assert seen["lent"] == 1, seen  # 50 % of 2 ranks
            assert re.search(r"Burst:\s+50%, high-load phase, 1 worker lent", seen["line"]), seen["line"]
            ev = c.tidectl("events", "--job", jid).stdout
            lent = ev.count("job.burst_lent")
            assert lent >= 1 and "job.burst_started" in ev, ev[-3000:]
            assert ev.count("job.burst_reclaimed") >= lent, ev[-3000:]
            assert "job.burst_exited" not in ev and "job.burst_lost" not in ev, ev[-3000:]
            assert int(job.get("bursts", 0)) == lent, job

            # Every shard of every phase exactly once, with the loss a plain run computes; some by the lent worker.
            got, want = eval_log(os.path.join(ck, "eval.log")), None
            out, err = ref.communicate(timeout=120)
            tidetest._live.remove(ref)
            assert ref.returncode == 0, err
            want = eval_log(os.path.join(ref_dir, "eval.log"))
            keys = {(s, i) for s in range(EVERY, STEPS + 1, EVERY) for i in range(SHARDS)}
            assert set(want) == keys and set(got) == keys, (sorted(keys - set(got))[:10], sorted(set(got) - keys)[:10])
            dups = {k: v for k, v in got.items() if len(v) != 1}
            assert not dups, list(dups.items())[:5]
            assert all(got[k][0][0] == want[k][0][0] for k in keys), [k for k in keys if got[k][0][0] != want[k][0][0]]
            by_burst = sum(1 for v in got.values() if v[0][1].startswith("burst"))
            assert by_burst > 0, "the lent worker evaluated no shard"
            # The parameters are a plain run's, bitwise.
            log = c.tidectl("logs", jid, "--rank", "0").stdout
            sha = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            assert sha and sha == re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M), (sha, out)
            # Back in the reserve: all three workers free, nothing lent, the lendings counted.
            c.wait_workers(3)
            assert metric(c, "tide_burst_workers") == 0
            assert metric(c, "tide_bursts_total") == lent and metric(c, "tide_burst_lent_total") == lent
            assert metric(c, "tide_burst_reclaims_total") == lent and metric(c, "tide_burst_worker_seconds_total") > 0
            print(f"     {lent} lending(s) over {STEPS // EVERY} phases; {by_burst} of {len(keys)} shards evaluated "
                  f"by the lent worker")

        tidetest.run([test_bad_input, test_mlp_lent_in_eval_phases])


if __name__ == "__main__":
    main()
