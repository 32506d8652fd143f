"""Crashes: kill -9 of the scheduler mid-job (the job is still there in the right state, its ranks were
not restarted, the workers reconnect, and it finishes); kill -9 of a worker (no orphan rank survives it,
the job runs again on spares once the worker is declared dead, with its generation history, and the
restarted worker registers again); a worker that does not come back within the reconnect deadline after a
scheduler restart fails its job (--restart never)."""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for, pid_alive  # noqa: E402


def pids_in(d, n, prefix="pid"):
    return wait_for(lambda: [int(open(os.path.join(d, f"{prefix}{r}")).read().split()[0]) for r in range(n)]
                    if all(os.path.exists(os.path.join(d, f"{prefix}{r}")) for r in range(n)) else None,
                    20, f"{n} pid files in {d}")


def scheduler_restart(c, out):
    go = os.path.join(out, "go")
    # Each rank appends to its start log once per start, then waits for the go file.
    script = (f"echo $$ >> {out}/starts$RANK; echo $$ > {out}/pid$RANK; "
              f"while [ ! -e {go} ]; do sleep 0.1; done; echo done $RANK")
    jid = c.tidectl("submit", "--name", "survivor", "--workers", "4", "--", "sh", "-c", script).stdout.strip()
    pids = pids_in(out, 4)
    wait_for(lambda: c.job(jid)["ranksRunning"] == 4, 20, "4 ranks running")

    c.kill_scheduler(signal.SIGKILL)
    for pid in pids:
        assert pid_alive(pid), "a rank died with the scheduler"
    c.start_scheduler()  # same data dir, same port
    job = c.job(jid)
    assert job["state"] == "JOB_STATE_RUNNING" and job["generation"] == 1, job
    wait_for(lambda: len([w for w in c.workers_json() if w["state"] == "WORKER_STATE_BUSY"]) == 4, 20,
             "the 4 workers to reconnect with their ranks")
    open(go, "w").close()
    job = c.wait_job(jid, "JOB_STATE_SUCCEEDED", 30)
    assert job["generation"] == 1, job
    for r in range(4):
        starts = open(os.path.join(out, f"starts{r}")).read().split()
        assert len(starts) == 1, f"rank {r} started {len(starts)} times"
    logs = c.tidectl("logs", jid).stdout
    assert all(f"done {r}" in logs for r in range(4)), logs
    events = c.tidectl("events", "--job", jid).stdout
    assert "job.reconciled" in events, events
    print("ok   kill -9 of the scheduler: job kept, ranks adopted (each started once), finished after restart")


def worker_kill(c, out):
    script = (f"sleep 300 & echo $$ $! > {out}/pid$RANK; wait")
    jid = c.tidectl("submit", "--name", "victim", "--workers", "2", "--", "sh", "-c", script).stdout.strip()
    pids = pids_in(out, 2)
    job = wait_for(lambda: (lambda j: j if j["ranksRunning"] == 2 else None)(c.job(jid)), 20, "2 ranks")
    victim = job["workerIds"][1]
    lines = [open(os.path.join(out, f"pid{r}")).read().split() for r in range(2)]
    rank_pid, child_pid = int(lines[1][0]), int(lines[1][1])
    c.workers[victim].send_signal(signal.SIGKILL)
    c.workers[victim].wait(timeout=10)
    wait_for(lambda: not pid_alive(rank_pid) and not pid_alive(child_pid), 10,
             "the killed worker's rank and its child to die with it")
    # The default restart policy (on-loss): a new generation on the spares, the old rank 0 stopped first.
    wait_for(lambda: not pid_alive(pids[0]), 20, "the other rank to be stopped")
    job = wait_for(lambda: (lambda j: j if j["generation"] == 2 and j["ranksRunning"] == 2 else None)(c.job(jid)),
                   20, "generation 2 running")
    assert victim not in job["workerIds"], job
    assert job["restarts"] == 1 and job["restartsInRow"] == 1, job
    gens = job["generations"]
    assert [g["cause"] for g in gens] == ["submitted", "worker_lost"], gens
    assert f"worker {victim}" in gens[1]["detail"] and int(gens[1]["failureTimeMs"]) > 0, gens
    assert int(gens[1]["runningTimeMs"]) >= int(gens[1]["failureTimeMs"]) and int(gens[0]["endTimeMs"]) > 0, gens
    recovery = (int(gens[1]["runningTimeMs"]) - int(gens[1]["failureTimeMs"])) / 1000
    shown = c.tidectl("job", jid).stdout
    assert "Generations:" in shown and "worker_lost" in shown and "Restarts:     1 (1 in a row" in shown, shown
    assert "job.recovered" in c.tidectl("events", "--job", jid).stdout
    c.tidectl("cancel", jid)
    c.wait_job(jid, "JOB_STATE_CANCELLED", 20)
    node, gpu = victim.split("/gpu")
    c.start_worker(node, int(gpu))
    c.wait_workers(4)
    print(f"ok   kill -9 of a worker: its rank and the rank's child die, the job runs again on spares "
          f"({recovery:.2f}s from the death to every rank running), the worker comes back")


def worker_stays_away(c, out):
    jid = c.tidectl("submit", "--name", "orphaned", "--workers", "2", "--restart", "never", "--", "sh", "-c",
                    f"echo $$ > {out}/pid$RANK; exec sleep 300").stdout.strip()
    pids = pids_in(out, 2)
    job = wait_for(lambda: (lambda j: j if j["ranksRunning"] == 2 else None)(c.job(jid)), 20, "2 ranks")
    c.kill_scheduler(signal.SIGKILL)
    gone = job["workerIds"][1]
    c.workers[gone].send_signal(signal.SIGKILL)
    c.workers[gone].wait(timeout=10)
    c.start_scheduler("--reconnect-deadline-s", "2")
    job = c.wait_job(jid, "JOB_STATE_FAILED", 20)
    assert "did not re-register within 2s" in job["message"], job
    wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "both ranks to be gone")
    assert "restart policy never" in job["message"], job
    print("ok   a worker that stays away after a scheduler restart fails its job (--restart never) at the reconnect "
          "deadline")


def main():
    with tidetest.Cluster("restart") as c:
        c.start_scheduler()
        for node in ("node1", "node2"):
            for gpu in (0, 1):
                c.start_worker(node, gpu)
        c.wait_workers(4)
        for i, t in enumerate((scheduler_restart, worker_kill, worker_stays_away)):
            out = os.path.join(c.tmp, f"out{i}")
            os.makedirs(out)
            t(c, out)


if __name__ == "__main__":
    main()
