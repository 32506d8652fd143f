"""Work stealing (docs/work-stealing.md) with real processes: tide-mlp under mpirun across 4 tide workers on 2
simulated nodes, one worker slowed to 50% by its perturbation script. Its micro-batches come from the task
deques; the other ranks steal the slow rank's tail, the final parameters are bitwise those of a plain
single-process run, the steals show in the job (counters, per-rank table) and its events, and the slow
worker is reported as a straggler. The same job with --no-stealing gives the same parameters and steals
nothing. A trainer that sends bad task messages gets the protocol's errors and the pool stays usable.

Micro-batches cost a fixed simulated time (tide-mlp --simulated-compute), so CPU contention on a 2-core
machine does not pass for a straggler. Step times are printed for information only: timings belong in
bench/ (bench/steal_step_time.sh), never in a test's verdict. Run with /usr/bin/python3."""

import json
import os
import re
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

BIN = tidetest.BIN
MLP = os.path.join(BIN, "tide-mlp")
FLAGS = ["--width", "32", "--depth", "2", "--input", "16", "--output", "2", "--batch", "256",
         "--micro-batches", "32", "--log-every", "0", "--simulated-compute", "4"]
STEPS = "150"
MICRO_BATCHES = int(FLAGS[FLAGS.index("--micro-batches") + 1])


def plain_hash():
    """tide-mlp alone (no mpirun, no tide, no simulated time): the reference result."""
    flags = FLAGS[:-2]
    r = subprocess.run([MLP, "--steps", STEPS, *flags], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return re.search(r"params-sha256 ([0-9a-f]{64})", r.stdout).group(1)


def step_p50(log):
    m = re.search(r"step time p50 ([0-9.]+) ms", log)
    return float(m.group(1)) if m else None


def run_job(c, *extra):
    r = c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "4", *extra, "--", MLP,
                  "--steps", STEPS, *FLAGS)
    jid = json.loads(r.stdout)["id"]
    return jid


def main():
    reference = plain_hash()
    with tidetest.Cluster("steal") as c:
        # Stragglers are judged over a short window here so the test sees one within its run.
        c.start_scheduler("--heartbeat-ms", "200", "--straggler-window", "2s")
        slow = os.path.join(c.tmp, "slow.txt")
        with open(slow, "w") as f:
            f.write("0 slow 50\n")
        c.start_worker("node1", 0)
        c.start_worker("node1", 1)
        c.start_worker("node2", 0)
        c.start_worker("node2", 1, "--perturb", slow)
        c.wait_workers(4)

        def test_steal_absorbs_a_slow_worker():
            jid = run_job(c)
            seen = {}

            def running_with_tasks():
                j = c.job(jid)
                if j.get("state") != "JOB_STATE_RUNNING":
                    return j.get("state") in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED") and j
                ranks = {r["workerId"]: r.get("progress", {}) for r in j.get("ranks", [])}
                # The slow rank (node2/gpu1 runs rank 3) gave tasks away; a fast one took some.
                if int(j.get("tasksStolen", 0)) > 0 and int(ranks.get("node2/gpu1", {}).get("tasksGiven", 0)) > 0 \
                        and any(int(p.get("tasksStolen", 0)) > 0 for w, p in ranks.items() if w != "node2/gpu1"):
                    seen["running"] = j
                    seen["view"] = c.tidectl("job", jid).stdout
                    return j
                return None
            wait_for(running_with_tasks, 120, "steals while the job runs")
            job = c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=180)
            log0 = c.tidectl("logs", jid, "--rank", "0").stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, log0, c.log("scheduler"))
            m = re.search(r"params-sha256 ([0-9a-f]{64})", log0)
            assert m and m.group(1) == reference, (log0, reference)
            assert "task accounting off" not in log0, log0
            # every micro-batch of every step committed exactly once, whoever ran it
            assert int(job.get("tasksStolen", 0)) > 0, job
            assert int(job.get("tasksCommitted", 0)) == int(STEPS) * MICRO_BATCHES, job
            assert "running" in seen, "the job ended before the slow rank's tasks were seen moving"
            assert "Stealing:" in seen["view"] and "TASK-TIME" in seen["view"], seen["view"]
            ev = c.tidectl("events", "--job", jid).stdout
            assert "job.steals" in ev, ev
            print(f"     with stealing: step time p50 {step_p50(log0)} ms, {job['tasksStolen']} tasks stolen")
            return jid

        def test_straggler_reported():
            ev = c.tidectl("events").stdout
            lines = [ln for ln in ev.splitlines() if "worker.straggler" in ln and "node2/gpu1" in ln]
            assert lines, ev
            assert not [ln for ln in ev.splitlines() if "worker.straggler " in ln and "node1/" in ln], ev
            print(f"     {lines[0].strip()[:160]}")

        def test_no_stealing_same_result():
            jid = run_job(c, "--no-stealing")
            job = c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=240)
            log0 = c.tidectl("logs", jid, "--rank", "0").stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, log0)
            m = re.search(r"params-sha256 ([0-9a-f]{64})", log0)
            assert m and m.group(1) == reference, (log0, reference)
            assert int(job.get("tasksStolen", 0)) == 0, job
            assert int(job.get("tasksCommitted", 0)) == int(STEPS) * MICRO_BATCHES, job
            print(f"     without stealing: step time p50 {step_p50(log0)} ms")

        def test_bad_task_messages():
            """A trainer speaking the protocol by hand: each bad message gets its error, nothing changes,
            and the pool still hands out exactly the declared tasks."""
            script = os.path.join(c.tmp, "bad_tasks.py")
            with open(script, "w") as f:
                f.write(textwrap.dedent("""
                    import json, os, socket
                    s = socket.socket(socket.AF_UNIX); s.connect(os.environ["TIDE_AGENT_SOCK"])
                    f = s.makefile("r")
                    def send(m): s.sendall((json.dumps(m) + "\\n").encode())
                    def recv(): return json.loads(f.readline())
                    send({"op": "hello", "v": 1, "job": os.environ["TIDE_JOB_ID"], "rank": 0, "pid": os.getpid(),
                          "generation": int(os.environ["TIDE_GENERATION"])})
                    assert recv()["op"] == "welcome"
                    out = []
                    send({"op": "next_task", "step": 0}); out.append(recv())                  # unknown_step
                    send({"op": "tasks", "step": 0, "ids": [1, 1], "total": 4}); out.append(recv())  # repeat id
                    send({"op": "tasks", "step": 0, "ids": [1, 2, 3], "total": 2}); out.append(recv())  # > total
                    send({"op": "tasks", "step": 0, "ids": [0, 1, 2, 3], "total": 4})
                    send({"op": "tasks", "step": 0, "ids": [0, 1], "total": 4}); out.append(recv())  # conflict
                    got = []
                    send({"op": "next_task", "step": 0}); m = recv(); got.append(m["id"])
                    send({"op": "next_task", "step": 0, "done": 99}); out.append(recv())      # unknown_task
                    send({"op": "next_task", "step": 0, "done": got[-1]}); m = recv(); got.append(m["id"])
                    send({"op": "next_task", "step": 0, "done": got[-2]}); m2 = recv()       # repeat done: no-op
                    while m2["op"] == "task":
                        got.append(m2["id"])
                        send({"op": "next_task", "step": 0, "done": m2["id"]}); m2 = recv()
                    print("ERRORS", json.dumps([(e["op"], e.get("code")) for e in out]))
                    print("GOT", json.dumps(sorted(got)), m2["op"])
                """))
            r = c.tidectl("-o", "json", "submit", "--", "/usr/bin/python3", script)
            jid = json.loads(r.stdout)["id"]
            job = c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=60)
            out = c.tidectl("logs", jid).stdout
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job, out)
            errs = json.loads(re.search(r"^ERRORS (.*)$", out, re.M).group(1))
            assert [e[1] for e in errs] == ["unknown_step", "task_conflict", "task_conflict", "task_conflict",
                                            "unknown_task"], errs
            got = re.search(r"^GOT (.*) (\w+)$", out, re.M)
            assert json.loads(got.group(1)) == [0, 1, 2, 3] and got.group(2) == "no_task", out
            # the worker and the scheduler keep serving
            assert c.workers_json()

        tidetest.run([test_steal_absorbs_a_slow_worker, test_straggler_reported, test_no_stealing_same_result,
                      test_bad_task_messages])


if __name__ == "__main__":
    main()
