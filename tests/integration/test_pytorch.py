"""An unmodified PyTorch DDP script (examples/pytorch/ddp_train.py: gloo, env:// init, no tide code) under
tide with Debian's python3-torch: 2 ranks on one node and 4 ranks on 2 nodes succeed with every rank's
parameters equal; a rank that fails, at start or killed mid-training, fails the job with its rank and exit
code and leaves nothing running. The SDK example (ddp_train_sdk.py) under tide: it reports every step, a
cancel (stop_after_step) stops its ranks at the same step with a checkpoint and exit 0, and a second job
resumes from that checkpoint to the plain script's parameters; outside tide it runs too (every SDK call a
no-op). The work-stealing example (ddp_steal.py) on a node with one worker slowed to 50%: micro-batches are
stolen and the parameters are bitwise those of one plain process. The checkpoint_now path is not tested here
yet (the scheduler side is being built).

Each process spends ~2.4 s importing torch and the machine may have 2 cores, so the jobs are short."""

import hashlib
import importlib.util
import math
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for, pid_alive  # noqa: E402

PYTHON = "/usr/bin/python3"
PLAIN = "examples/pytorch/ddp_train.py"  # relative to the workdir, as a user would type it
SDK = "examples/pytorch/ddp_train_sdk.py"
STEAL = "examples/pytorch/ddp_steal.py"
LINE = re.compile(r"^\[rank (\d+)\] (.*)$")


def rank_lines(c, jid):
    """{rank: [lines]} from `tidectl logs JOB`."""
    out = {}
    for line in c.tidectl("logs", jid).stdout.splitlines():
        m = LINE.match(line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def children(pid):
    """Pids whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1] == str(pid):
                out.append(int(d))
        except (OSError, IndexError):
            pass
    return out


def run_job(c, name, workers, *argv, script=PLAIN, state="JOB_STATE_SUCCEEDED"):
    jid = c.tidectl("submit", "--name", name, "--workers", str(workers), "--workdir", tidetest.SRC, "--",
                    PYTHON, script, *argv).stdout.strip()
    job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"], 90)
    assert job["state"] == state, (job, c.tidectl("logs", jid, check=False).stdout)
    return jid, job


def check_trained(c, jid, workers):
    """Every rank printed the same params-sha256, rank 0 a finite final-loss; returns (hash, loss, lines)."""
    lines = rank_lines(c, jid)
    assert sorted(lines) == list(range(workers)), lines
    hashes = {r: [x.split()[1] for x in ls if x.startswith("params-sha256 ")] for r, ls in lines.items()}
    assert all(len(h) == 1 for h in hashes.values()), hashes
    assert len({h[0] for h in hashes.values()}) == 1, f"ranks disagree: {hashes}"
    losses = [float(x.split()[1]) for x in lines[0] if x.startswith("final-loss ")]
    assert len(losses) == 1 and math.isfinite(losses[0]) and 0 < losses[0] < 1.0, lines[0]
    assert any(x.startswith(f"world {workers} master 127.0.0.1:") for x in lines[0]), lines[0]
    return hashes[0][0], losses[0], lines


def main():
    if importlib.util.find_spec("torch") is None:
        raise SystemExit(f"FAIL: {PYTHON} cannot import torch: install Debian's python3-torch "
                         "(this test needs a real PyTorch and is not skipped without one)")
    with tidetest.Cluster("pytorch") as c:
        c.start_scheduler()
        for node in ("node1", "node2"):
            for gpu in (0, 1):
                c.start_worker(node, gpu)
        c.wait_workers(4)

        # 1. Two ranks: one node, both GPUs.
        jid, job = run_job(c, "ddp2", 2)
        assert len({w.split("/")[0] for w in job["workerIds"]}) == 1, job["workerIds"]
        h2, loss2, lines = check_trained(c, jid, 2)
        assert not any("tide_trainer" in x for ls in lines.values() for x in ls), lines
        print(f"ok   2-rank DDP job succeeded: final-loss {loss2}, params {h2[:16]}... on both ranks")

        # 2. Four ranks on two nodes (gloo between the nodes' ranks through MASTER_ADDR:MASTER_PORT).
        jid, job = run_job(c, "ddp4", 4)
        assert {w.split("/")[0] for w in job["workerIds"]} == {"node1", "node2"}, job["workerIds"]
        h4, loss4, _ = check_trained(c, jid, 4)
        assert h4 != h2, "4 ranks see twice the data per step: the result must differ from 2 ranks'"
        print(f"ok   4-rank DDP job on 2 nodes succeeded: final-loss {loss4}, params {h4[:16]}... on all ranks")

        # 3. Rank 1 fails (the unmodified script rejects --steps -1 with exit 2, before importing torch);
        #    the other ranks, still starting or waiting in init_process_group, are stopped.
        fail = f'if [ "$RANK" = 1 ]; then set -- --steps -1; fi; exec {PYTHON} {PLAIN} "$@"'
        jid = c.tidectl("submit", "--name", "ddp-fail", "--workers", "2", "--workdir", tidetest.SRC, "--",
                        "sh", "-c", fail).stdout.strip()
        job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"], 90)
        assert job["state"] == "JOB_STATE_FAILED" and job.get("failedRank") == 1 and job.get("exitCode") == 2, job
        assert "rank 1" in job["message"] and "code 2" in job["message"], job
        assert "--steps must be >= 0" in c.tidectl("logs", jid, "--rank", "1").stdout
        c.wait_workers(4)
        print(f"ok   a failing rank fails the DDP job: {job['message']}")

        # 4. A rank killed in the middle of training: its peer, blocked in (or about to enter) an
        #    all_reduce, does not hold the job: it fails at once and every rank is gone.
        jid = c.tidectl("submit", "--name", "ddp-kill", "--workers", "2", "--workdir", tidetest.SRC, "--",
                        PYTHON, PLAIN, "--steps", "100000", "--step-sleep", "0.05").stdout.strip()
        wait_for(lambda: "step 10/" in c.tidectl("logs", jid, "--rank", "0").stdout, 60, "step 10 of rank 0")
        helpers = [r["pid"] for r in c.job(jid)["ranks"]]
        victim = wait_for(lambda: children(helpers[1]), 10, "rank 1's python under its exec helper")[0]
        os.kill(victim, signal.SIGKILL)
        job = c.wait_job(jid, ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"], 30)
        assert job["state"] == "JOB_STATE_FAILED", job
        # rank 1's worker reports the SIGKILL at once; rank 0 may also die first of gloo's connection error
        assert (job["failedRank"], job["exitCode"]) == (1, 137) or (job["failedRank"] == 0 and job["exitCode"]), job
        for pid in helpers:
            wait_for(lambda: not pid_alive(pid), 20, f"rank helper {pid} to be gone")
        c.wait_workers(4)
        print(f"ok   a rank killed mid-training fails the job at once: {job['message']}")

        # 5. The SDK example under tide: connected to its worker and reporting every step with its FLOPs.
        #    Cancel sends stop_after_step: both ranks agree on the step, rank 0 saves a checkpoint, both
        #    exit 0. A second job resumes from it and ends with the uninterrupted run's parameters.
        ck = os.path.join(c.tmp, "ck")
        jid = c.tidectl("submit", "--name", "ddp-sdk-stop", "--workers", "2", "--workdir", tidetest.SRC, "--",
                        PYTHON, SDK, "--steps", "100000", "--step-sleep", "0.05", "--checkpoint-dir", ck).stdout.strip()
        wait_for(lambda: "step 20/" in c.tidectl("logs", jid, "--rank", "0").stdout, 60, "step 20 of rank 0")
        params = 32 * 64 + 64 + 64 * 8 + 8  # the example's two Linear layers
        ranks = wait_for(lambda: (lambda rs: rs if all(int(r.get("progress", {}).get("step", -1)) >= 19 for r in rs)
                                  else None)(c.job(jid)["ranks"]), 20, "both ranks to report step 19")
        for r in ranks:
            p = r["progress"]
            assert p.get("sdk") and p.get("stepFlops") == 6 * params * 32 and int(p["samples"]) == 32, r
        c.tidectl("cancel", jid)
        job = wait_for(lambda: (lambda j: j if all(r.get("phase") == "RANK_PHASE_EXITED" for r in j["ranks"])
                                else None)(c.job(jid)), 30, "the cancelled SDK ranks to exit")
        assert job["state"] == "JOB_STATE_CANCELLED", job
        assert all(r.get("exitCode", 0) == 0 and not r.get("signal") for r in job["ranks"]), job["ranks"]
        lines = rank_lines(c, jid)
        stops = [int(x.split()[3]) for x in lines[0] if x.startswith("stopping after step ")]
        saved = [x.split() for x in lines[0] if x.startswith("checkpoint ")]
        assert len(stops) == 1 and len(saved) == 1 and int(saved[0][3]) == stops[0], lines[0]
        path, sha = saved[0][1], saved[0][7]
        assert os.path.dirname(path) == ck and hashlib.sha256(open(path, "rb").read()).hexdigest() == sha, saved
        assert any(x.endswith("tide on") for x in lines[0]), lines[0]
        assert not any("tide_trainer:" in x for ls in lines.values() for x in ls), lines
        print(f"ok   the SDK example reports its steps; cancel stops both ranks after step {stops[0]} "
              "with a checkpoint, exit 0")

        jid, job = run_job(c, "ddp-sdk-resume", 2, "--checkpoint-dir", ck, script=SDK)
        hs, losss, lines = check_trained(c, jid, 2)
        assert f"resumed from {path}: starting at step {stops[0] + 1}" in lines[0], lines[0]
        assert hs == h2 and losss == loss2, "a resumed run must end as the uninterrupted one: " + repr((hs, h2))
        print("ok   a second SDK job resumes from that checkpoint and ends with the plain 2-rank run's parameters")

        # 6. The SDK example outside tide: one process, no TIDE_* and no torchrun variables.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TIDE_", "TORCHELASTIC_")) and k not in ("RANK", "WORLD_SIZE")}
        r = subprocess.run([PYTHON, SDK, "--steps", "5", "--checkpoint-dir", os.path.join(c.tmp, "ck-local")],
                           cwd=tidetest.SRC, env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        assert "tide off" in r.stdout and "final-loss " in r.stdout and "params-sha256 " in r.stdout, r.stdout
        assert "tide_trainer" not in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(c.tmp, "ck-local")), "no checkpoint is written without tide"
        print("ok   the SDK example runs outside tide (SDK calls are no-ops)")

        # 7. Work stealing in a PyTorch loop (examples/pytorch/ddp_steal.py, docs/work-stealing.md): 2 ranks on a
        #    node whose second worker runs at 50% (the worker's `slow` perturbation). Its micro-batches come from
        #    tide's task iterator: the fast rank takes the slow rank's tail, and the parameters are bitwise those
        #    of one plain process (the example sums gradients in fixed point).
        steal_flags = ["--steps", "20", "--micro-batches", "16", "--simulated-compute", "5", "--log-every", "20"]
        r = subprocess.run([PYTHON, STEAL, *steal_flags], cwd=tidetest.SRC, env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0 and "tide off" in r.stdout, (r.stdout, r.stderr)
        plain = re.search(r"params-sha256 ([0-9a-f]{64})", r.stdout).group(1)
        slow = os.path.join(c.tmp, "slow.txt")
        with open(slow, "w") as f:
            f.write("0 slow 50\n")
        c.start_worker("node3", 0)
        c.start_worker("node3", 1, "--perturb", slow)
        c.wait_workers(6)
        c.tidectl("cordon", "node1/gpu0", "node1/gpu1", "node2/gpu0", "node2/gpu1")
        jid, job = run_job(c, "ddp-steal", 2, *steal_flags, script=STEAL)
        assert sorted(job["workerIds"]) == ["node3/gpu0", "node3/gpu1"], job["workerIds"]
        lines = rank_lines(c, jid)
        hashes = {rk: [x.split()[1] for x in ls if x.startswith("params-sha256 ")] for rk, ls in lines.items()}
        assert hashes == {0: [plain], 1: [plain]}, (hashes, plain, lines)
        assert not any("task accounting off" in x for ls in lines.values() for x in ls), lines
        assert any(x.endswith("stealing on") for x in lines[0]), lines[0]
        assert int(job.get("tasksStolen", 0)) > 0 and int(job.get("tasksCommitted", 0)) == 20 * 16, job
        c.tidectl("uncordon", "node1/gpu0", "node1/gpu1", "node2/gpu0", "node2/gpu1")
        print(f"ok   a PyTorch loop on tide's task iterator with one rank at 50%: {job['tasksStolen']} micro-batches "
              "stolen, parameters bitwise those of one plain process")


if __name__ == "__main__":
    main()
