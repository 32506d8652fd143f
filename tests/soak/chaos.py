"""Chaos soak for the real binaries (not part of make test; run with `make soak` or by hand):
random jobs, random cancels, kill -9 of workers (restarted later) and of the scheduler (restarted on the
same data dir), for DURATION seconds. Then the chaos stops and every job must end, every worker must be
READY, and no rank process may be left over.
    /usr/bin/python3 tests/soak/chaos.py [DURATION_S] [SEED]      (TIDE_BUILD_DIR=build)"""

import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../integration"))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

MARK = "tide-chaos-rank"


def rank_procs():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if MARK.encode() in open(f"/proc/{pid}/cmdline", "rb").read():
                    out.append(int(pid))
            except OSError:
                pass
    return out


def main():
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 120
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else int(time.time())
    rnd = random.Random(seed)
    print(f"chaos: {duration:.0f}s, seed {seed}", flush=True)
    nodes = [("node1", 0), ("node1", 1), ("node2", 0), ("node2", 1), ("node3", 0), ("node3", 1)]
    with tidetest.Cluster("chaos") as c:
        c.start_scheduler("--reconnect-deadline-s", "5", "--stop-grace-s", "1")
        for n, g in nodes:
            c.start_worker(n, g)
        c.wait_workers(len(nodes))
        end = time.monotonic() + duration
        jobs, kills, restarts = 0, 0, 0
        dead = set()
        while time.monotonic() < end:
            what = rnd.random()
            try:
                if what < 0.45:
                    # Keep a backlog the 6 GPUs can drain, not an avalanche.
                    wait_for(lambda: len(c.tidectl_json("jobs", "--state", "pending,running").get("jobs", [])) < 12,
                             120, "the backlog to drain below 12 jobs", interval=0.1)
                    k = rnd.randint(1, 4)
                    secs = rnd.choice([0.2, 0.5, 1, 2, 4])
                    code = 1 if rnd.random() < 0.1 else 0
                    c.tidectl("submit", "--workers", str(k), "--", "bash", "-c",
                              f"(exec -a {MARK} sleep {secs}); exit {code}", timeout=30)
                    jobs += 1
                elif what < 0.55:
                    listed = c.tidectl_json("jobs").get("jobs", [])
                    live = [j["id"] for j in listed if j["state"] in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING")]
                    if live:
                        c.tidectl("cancel", rnd.choice(live), check=False, timeout=30)
                elif what < 0.65:
                    n, g = rnd.choice(nodes)
                    wid = f"{n}/gpu{g}"
                    if wid not in dead:
                        c.workers[wid].send_signal(signal.SIGKILL)
                        c.workers[wid].wait(timeout=10)
                        dead.add(wid)
                        kills += 1
                elif what < 0.75 and dead:
                    wid = rnd.choice(sorted(dead))
                    n, g = wid.split("/gpu")
                    c.start_worker(n, int(g))
                    dead.discard(wid)
                elif what < 0.78:
                    c.kill_scheduler(signal.SIGKILL)
                    c.start_scheduler("--reconnect-deadline-s", "5", "--stop-grace-s", "1")
                    restarts += 1
                else:
                    time.sleep(rnd.random() * 0.5)
            except (AssertionError, subprocess.TimeoutExpired) as e:
                # tidectl may race a scheduler restart; the end state is what is checked
                print(f"chaos: (ignored) {str(e).splitlines()[0][:160]}", flush=True)
            if c.sched.poll() is not None:
                raise AssertionError(f"the scheduler exited on its own ({c.sched.returncode}): "
                                     f"{c.log('scheduler')}")
        print(f"chaos: {jobs} jobs submitted, {kills} worker kills, {restarts} scheduler restarts; settling",
              flush=True)
        for wid in sorted(dead):
            n, g = wid.split("/gpu")
            c.start_worker(n, int(g))

        def settled():
            listed = c.tidectl_json("jobs").get("jobs", [])
            active = [j for j in listed if j["state"] in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING")]
            ready = [w for w in c.workers_json() if w["state"] == "WORKER_STATE_READY"]
            return not active and len(ready) == len(nodes) and listed
        try:
            listed = wait_for(settled, 300, "every job to end and every worker to be READY", interval=1)
        except AssertionError:
            for j in c.tidectl_json("jobs").get("jobs", []):
                if j["state"] in ("JOB_STATE_PENDING", "JOB_STATE_RUNNING"):
                    print("stuck job:", j["id"], j["state"], j.get("message"), j.get("ranks"), flush=True)
            for w in c.workers_json():
                print("worker:", w["id"], w["state"], w.get("jobId"), w.get("rank"), flush=True)
            raise
        states = {}
        for j in listed:
            states[j["state"]] = states.get(j["state"], 0) + 1
        wait_for(lambda: not rank_procs(), 30, "no rank process left over")
        print(f"chaos: settled: {states}", flush=True)
        print("ok   chaos soak")


if __name__ == "__main__":
    main()
