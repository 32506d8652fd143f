"""Checkpoint tiers end to end (docs/worker.md and docs/trainer-api.md, "Checkpoint tiers") on a real scheduler,
two real workers and mpirun on loopback: tide-mlp on MPI, 2 ranks, --tiered-checkpoints. Rank 0's checkpoints
appear in its worker's hot tier and in the (shared) warm tier, each with a manifest, and old steps are pruned
(--ckpt-keep-hot 2, --ckpt-keep-warm 3). Then rank 1 is frozen (SIGSTOP), the newest hot copy gets a flipped
byte, and the hang detector restarts the job: the new generation restores that step from warm (naming the
corrupt hot copy as skipped when rank 0 is back on the same worker) and ends bitwise equal to an uninterrupted
run. The same with --async-checkpoints (rank 0 saves in the background) and rank 0 killed: the new generation
restores a reported step and ends bitwise equal too. Last, a job's hot copies (HOT/JOB, HOT/mirror/JOB) are gone from
every worker once it SUCCEEDED (ForgetCheckpoints), while warm keeps its copies. Run with /usr/bin/python3; TIDE_BUILD_DIR names the build."""

import glob
import json
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402
from test_hang import rank_pid  # noqa: E402

MLP = os.path.join(tidetest.BIN, "tide-mlp")
STEPS = 700
MLP_ARGS = ["--steps", str(STEPS), "--width", "64", "--depth", "2", "--batch", "64", "--micro-batches", "8",
            "--log-every", "0"]


def steps_in(tierdir, jid, rank=0):
    """{step: rank dir} of the copies of `rank` in tierdir/jid that have a manifest."""
    out = {}
    d = os.path.join(tierdir, jid)
    if not os.path.isdir(d):
        return out
    for name in os.listdir(d):
        m = re.fullmatch(r"step-(\d+)", name)
        rd = os.path.join(d, name, f"rank-{rank}")
        if m and os.path.exists(os.path.join(rd, "tide-manifest.json")):
            out[int(m.group(1))] = rd
    return out


def step_dirs(tierdir, jid):
    d = os.path.join(tierdir, jid)
    return [n for n in os.listdir(d) if n.startswith("step-")] if os.path.isdir(d) else []


def main():
    with tidetest.Cluster("tiers") as c:
        c.start_scheduler("--hang-timeout", "3s", "--stop-grace-s", "2")
        warm = os.path.join(c.tmp, "warm")
        hots = [os.path.join(c.tmp, f"hot{g}") for g in (0, 1)]
        for gpu in (0, 1):
            c.start_worker("node1", gpu, "--ckpt-hot", hots[gpu], "--ckpt-warm", warm, "--ckpt-keep-hot", "2",
                           "--ckpt-keep-warm", "3")
        c.wait_workers(2)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIDE_") and k != "RANK"}
        ref = subprocess.Popen([MLP, "--quiet"] + MLP_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)
        tidetest._live.append(ref)

        def test_tiers_and_corrupt_hot():
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "2", "--", MLP,
                          "--tiered-checkpoints", "--checkpoint-every", "50", "--simulated-compute", "3", *MLP_ARGS)
            jid = json.loads(r.stdout)["id"]

            def past(step):
                j = c.job(jid)
                ranks = j.get("ranks", [])
                ok = j.get("state") == "JOB_STATE_RUNNING" and len(ranks) == 2 and all(
                    int(x.get("progress", {}).get("step", -1)) >= step for x in ranks)
                return j if ok else None
            wait_for(lambda: past(260), 120, f"job {jid} past step 260")
            pid = wait_for(lambda: rank_pid(jid, 1, 1), 10, "rank 1's process")
            os.kill(pid, signal.SIGSTOP)

            # No new checkpoint can come now; wait until the newest hot copy of rank 0 is in warm too.
            def settled():
                hot = {}
                for h in hots:
                    hot.update({s: d for s, d in steps_in(h, jid).items()})
                w = steps_in(warm, jid)
                if hot and max(hot) in w and len(step_dirs(warm, jid)) <= 3:
                    return hot, w
                return None
            hot, w = wait_for(settled, 30, "the newest hot checkpoint copied to warm")
            newest = max(hot)
            assert newest >= 199, hot
            # pruning: at most 2 steps in each hot tier, 3 in warm
            for h in hots:
                assert len(step_dirs(h, jid)) <= 2, (h, step_dirs(h, jid))
            assert sorted(w) == sorted(w)[-3:] and len(w) == 3, w
            files = [n for n in os.listdir(hot[newest]) if n.startswith("mlp-")]
            assert len(files) == 1, os.listdir(hot[newest])
            manifest = json.load(open(os.path.join(hot[newest], "tide-manifest.json")))
            assert str(manifest.get("step")) == str(newest), manifest
            # flip a byte of the newest hot copy
            victim = os.path.join(hot[newest], files[0])
            with open(victim, "r+b") as f:
                f.seek(200)
                b = f.read(1)
                f.seek(200)
                f.write(bytes([b[0] ^ 0x01]))

            job = wait_for(lambda: (lambda j: j if int(j.get("generation", 0)) >= 2 else None)(c.job(jid)), 90,
                           "a new generation after the hang")
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=240)
            log = c.tidectl("logs", jid, "--rank", "0").stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, log[-3000:])
            m = re.findall(r"^tide-mlp: restoring step (\d+) from the (\w+) tier$", log, re.M)
            assert m and int(m[-1][0]) == newest and m[-1][1] == "warm", (m, newest, log[-3000:])
            skipped = re.findall(rf"^tide-mlp: skipped step {newest} in hot: (.*)$", log, re.M)
            if skipped:
                assert "sha256" in skipped[-1] or "size" in skipped[-1], skipped
            got = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            out, err = ref.communicate(timeout=120)
            tidetest._live.remove(ref)
            assert ref.returncode == 0, err
            assert got and got[-1] == re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M)[-1], (got, out)
            print(f"     newest step {newest}: hot copy corrupted, restored from warm "
                  f"{'(the corrupt hot copy named as skipped)' if skipped else '(rank 0 moved: no hot copy there)'}"
                  f"; warm kept {sorted(w)}")
            c.wait_workers(2)

        def test_async_checkpoints_rank_killed():
            # --async-checkpoints: rank 0 saves in the background while training goes on. SIGKILL of rank 0 (the
            # saver, maybe with a save in flight) mid-run; --restart on-failure starts a new generation, which
            # restores the newest reported step and ends bitwise equal to an uninterrupted run.
            ref2 = subprocess.Popen([MLP, "--quiet"] + MLP_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=env, start_new_session=True)
            tidetest._live.append(ref2)
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "2", "--restart", "on-failure",
                          "--", MLP, "--tiered-checkpoints", "--async-checkpoints", "--checkpoint-every", "50",
                          "--simulated-compute", "3", *MLP_ARGS)
            jid = json.loads(r.stdout)["id"]

            def past(step):
                j = c.job(jid)
                ranks = j.get("ranks", [])
                ok = j.get("state") == "JOB_STATE_RUNNING" and len(ranks) == 2 and all(
                    int(x.get("progress", {}).get("step", -1)) >= step for x in ranks)
                return j if ok else None
            wait_for(lambda: past(260), 120, f"job {jid} past step 260")
            pid = wait_for(lambda: rank_pid(jid, 1, 0), 10, "rank 0's process")
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: (lambda j: j if int(j.get("generation", 0)) >= 2 else None)(c.job(jid)), 90,
                     "a new generation after the kill")
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=240)
            log = c.tidectl("logs", jid, "--rank", "0").stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, log[-3000:])
            m = re.findall(r"^tide-mlp: restoring step (\d+) from the (\w+) tier$", log, re.M)
            assert m and int(m[-1][0]) >= 199 and (int(m[-1][0]) + 1) % 50 == 0, (m, log[-3000:])
            # the new generation reported every background save, in order, the final one included
            saved = [int(x) for x in re.findall(r"^tide-mlp: checkpoint \S*/mlp-(\d+)\.ckpt \(\d+ bytes\)$", log,
                                                 re.M)]
            assert saved == list(range(int(m[-1][0]) + 51, STEPS + 1, 50)), (saved, log[-3000:])
            stall = re.findall(r"^tide-mlp: checkpoints: (\d+) saved, training stalled ([0-9.]+) s of ([0-9.]+) s "
                               r"\(([0-9.]+) %\)$", log, re.M)
            assert stall and int(stall[-1][0]) >= 1, (stall, log[-3000:])
            got = re.findall(r"^params-sha256 ([0-9a-f]{64})$", log, re.M)
            out, err = ref2.communicate(timeout=120)
            tidetest._live.remove(ref2)
            assert ref2.returncode == 0, err
            assert got and got[-1] == re.findall(r"^params-sha256 ([0-9a-f]{64})$", out, re.M)[-1], (got, out)
            print(f"     rank 0 killed after step 260: restored step {m[-1][0]} from {m[-1][1]}, "
                  f"{stall[-1][0]} saves after the restart, stalled {stall[-1][3]} %")
            c.wait_workers(2)

        def test_hot_copies_forgotten_at_the_end():
            # Hot-tier retention (docs/fault-tolerance.md, "Checkpoint tiers"): while the job runs its hot copies
            # are there; once it SUCCEEDED, ForgetCheckpoints removes HOT/JOB and HOT/mirror/JOB on every worker.
            r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "2", "--", MLP,
                          "--tiered-checkpoints", "--checkpoint-every", "50", "--quiet", "--steps", "200",
                          *MLP_ARGS[2:])
            jid = json.loads(r.stdout)["id"]

            def hot_dirs():
                return [d for h in hots for d in (os.path.join(h, jid), os.path.join(h, "mirror", jid))
                        if os.path.isdir(d)]
            wait_for(lambda: any(steps_in(h, jid) for h in hots), 120, f"a hot checkpoint of job {jid}")
            job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"], timeout=180)
            assert job["state"] == "JOB_STATE_SUCCEEDED", job
            wait_for(lambda: not hot_dirs(), 30, f"job {jid}'s hot copies removed: {hot_dirs()}")
            # The earlier cases' jobs ended too: no job directory is left in any hot tier.
            left = [(h, n) for h in hots for n in (os.listdir(h) if os.path.isdir(h) else []) if n != "mirror"]
            assert not left, left
            line = rf"job {jid} ended: removed its hot checkpoints \((\d+) steps"
            assert any(re.search(line, open(f).read()) for f in glob.glob(os.path.join(c.tmp, "worker-*.log"))), \
                "no 'removed its hot checkpoints' line in the worker logs"
            assert steps_in(warm, jid), "warm keeps its own retention"
            print(f"     job {jid}: hot copies removed on every worker once it SUCCEEDED; warm kept")

        tidetest.run([test_tiers_and_corrupt_hot, test_async_checkpoints_rank_killed,
                      test_hot_copies_forgotten_at_the_end])


if __name__ == "__main__":
    main()
