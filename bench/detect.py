#!/usr/bin/python3
"""Failure detection and recovery times on this machine (docs/fault-tolerance.md, "Measured"): a real scheduler and
3 real tide workers on loopback. Each round:
  silent    SIGSTOP of a worker process (its heartbeats stop; nothing closes): time to worker.suspect and worker.dead
  killed    SIGKILL of a worker process (its stream closes): time to worker.suspect and worker.dead
  recovery  SIGKILL of the worker of rank 1 of a 2-rank tide-mlp job on MPI (--max-restarts 1000): time to
            worker.dead, to job.requeued and to every rank of the new generation running (job.running)
  crash     SIGKILL of rank 1's process of a 2-rank job (--restart on-failure; the ranks are shells that wait): time
            to job.requeued (the exit reported), to the new generation's launch (job.started: the old rank 0
            stopped, the new ranks placed and told to start) and to every new rank running
Times are from the signal to the event's own timestamp (the scheduler's wall clock, same host).
    bench/detect.py BUILD_DIR [ROUNDS]"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
if len(sys.argv) > 1:
    os.environ["TIDE_BUILD_DIR"] = os.path.abspath(sys.argv[1])
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def events(c):
    return [json.loads(line) for line in c.tidectl("-o", "json", "events").stdout.splitlines() if line.strip()]


def after(c, t0_ms, typ, worker=None, job=None, timeout=30):
    """Seconds from t0_ms to the first event of type typ (for worker / job) stamped at or after it."""
    def find():
        for e in events(c):
            if e.get("type") == typ and int(e.get("timeMs", 0)) >= t0_ms and \
                    (worker is None or e.get("workerId") == worker) and (job is None or e.get("jobId") == job):
                return [(int(e["timeMs"]) - t0_ms) / 1e3]  # a list: 0.0 s is an answer too
        return None
    return wait_for(find, timeout, f"{typ} after {t0_ms}", interval=0.05)[0]


def main():
    mlp = os.path.join(tidetest.BIN, "tide-mlp")
    rows = []
    with tidetest.Cluster("detect") as c:
        c.start_scheduler("--max-restarts", "1000")
        gpu = 0
        for _ in range(3):
            c.start_worker("node1", gpu)
            gpu += 1
        c.wait_workers(3)
        for r in range(ROUNDS):
            # silent: a stopped worker process
            wid, p = next((w, q) for w, q in c.workers.items() if q.poll() is None)
            t0 = int(time.time() * 1000)
            p.send_signal(signal.SIGSTOP)
            s, d = after(c, t0, "worker.suspect", wid), after(c, t0, "worker.dead", wid)
            rows.append(("silent", s, d, None, None, None))
            p.send_signal(signal.SIGKILL)
            p.wait()
            c.start_worker("node1", gpu)
            gpu += 1
            c.wait_workers(3)
            # killed: the stream closes
            wid, p = next((w, q) for w, q in c.workers.items() if q.poll() is None)
            t0 = int(time.time() * 1000)
            p.send_signal(signal.SIGKILL)
            p.wait()
            s, d = after(c, t0, "worker.suspect", wid), after(c, t0, "worker.dead", wid)
            rows.append(("killed", s, d, None, None, None))
            c.start_worker("node1", gpu)
            gpu += 1
            c.wait_workers(3)
            # recovery of a tide-mlp job
            ck = os.path.join(c.tmp, f"ck{r}")
            jid = json.loads(c.tidectl("-o", "json", "submit", "--launcher", "mpi", "--workers", "2", "--", mlp,
                                       "--steps", "100000", "--checkpoint-dir", ck, "--checkpoint-every", "50",
                                       "--simulated-compute", "2", "--log-every", "0").stdout)["id"]
            job = wait_for(lambda: (lambda j: j if j.get("state") == "JOB_STATE_RUNNING" and all(
                int(x.get("progress", {}).get("step", -1)) >= 60 for x in j.get("ranks", [])) else None)(c.job(jid)),
                60, "job running past step 60")
            wid = job["ranks"][1]["workerId"]
            t0 = int(time.time() * 1000)
            c.workers[wid].send_signal(signal.SIGKILL)
            c.workers[wid].wait()
            d = after(c, t0, "worker.dead", wid)
            try:
                q = after(c, t0, "job.requeued", job=jid, timeout=10)
            except AssertionError:
                print(c.tidectl("events", "--job", jid).stdout[-3000:], file=sys.stderr)
                raise
            run = after(c, t0, "job.running", job=jid)
            started = after(c, t0, "job.started", job=jid)
            rows.append(("recovery", None, d, q, started, run))
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED")
            c.start_worker("node1", gpu)
            gpu += 1
            c.wait_workers(3)
            # crash: one rank's process dies by itself
            out = os.path.join(c.tmp, f"crash{r}")
            os.makedirs(out)
            jid = json.loads(c.tidectl("-o", "json", "submit", "--restart", "on-failure", "--workers", "2", "--",
                                       "sh", "-c", f"echo $$ > {out}/pid$RANK.$TIDE_GENERATION; exec sleep 1000"
                                       ).stdout)["id"]
            pid = wait_for(lambda: (lambda f: int(open(f).read()) if os.path.exists(f) and open(f).read().strip()
                                    else None)(os.path.join(out, "pid1.1")), 30, "rank 1's pid")
            wait_for(lambda: c.job(jid).get("ranksRunning") == 2, 30, "2 ranks running")
            t0 = int(time.time() * 1000)
            os.kill(pid, signal.SIGKILL)
            q = after(c, t0, "job.requeued", job=jid)
            started = after(c, t0, "job.started", job=jid)
            run = after(c, t0, "job.running", job=jid)
            rows.append(("crash", None, None, q, started, run))
            c.tidectl("cancel", jid)
            c.wait_job(jid, "JOB_STATE_CANCELLED")
    print(f"{'case':<10} {'suspect s':>10} {'dead s':>8} {'requeued s':>11} {'launched s':>11} {'running s':>10}")
    for case, s, d, q, st, run in rows:
        f = (lambda v: f"{v:.2f}" if v is not None else "-")
        print(f"{case:<10} {f(s):>10} {f(d):>8} {f(q):>11} {f(st):>11} {f(run):>10}")


if __name__ == "__main__":
    main()
