#!/usr/bin/python3
"""Scheduler failover time (docs/operations.md): three tide-scheduler replicas on a real etcd (loopback), two
workers and a running 2-rank job. Each round kills the leader (SIGKILL, or SIGTERM for a graceful hand-over)
and measures, from the signal:
  leads     a standby reports tide_is_leader 1 (it won the election and rebuilt the core from etcd)
  serves    a stock gRPC call (GetClusterStatus) through the replica list succeeds
  workers   both workers are connected to the new leader again (READY or BUSY)
The killed replica is restarted as a standby before the next round. The job's ranks must survive every round.
    bench/failover.py BUILD_DIR [ROUNDS] [LEASE_S]"""

import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
if len(sys.argv) > 1:
    os.environ["TIDE_BUILD_DIR"] = os.path.abspath(sys.argv[1])
import tidetest  # noqa: E402
from tidetest import Replicas, wait_for, pid_alive  # noqa: E402
from etcdtest import Etcd  # noqa: E402

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
LEASE_S = int(sys.argv[3]) if len(sys.argv) > 3 else 3


def connected(c):
    try:
        return len([w for w in c.workers_json() if w["state"] in ("WORKER_STATE_READY", "WORKER_STATE_BUSY")]) == 2
    except AssertionError:
        return False


def serves(c):
    return c.tidectl("status", check=False, timeout=20).returncode == 0


def one_round(c, ha, sig):
    leader = ha.leader()
    others = [i for i in range(3) if i != leader]
    t0 = time.monotonic()
    ha.procs[leader].send_signal(sig)
    new = wait_for(lambda: [i for i in others if ha.is_leader(i)] or None, 60, "a new leader", interval=0.005)[0]
    leads = time.monotonic() - t0
    wait_for(lambda: serves(c), 60, "the new leader serving", interval=0.01)
    serving = time.monotonic() - t0
    wait_for(lambda: connected(c), 60, "the workers on the new leader", interval=0.02)
    workers = time.monotonic() - t0
    ha.procs[leader].wait(timeout=20)
    ha.start(leader)
    wait_for(lambda: ha.is_leader(leader) is False, 20, "the old leader back as a standby")
    assert new != leader
    return leads, serving, workers


def main():
    with tidetest.Cluster("bench-failover") as c, Etcd() as etcd:
        etcd.start()
        ha = Replicas(c, etcd.endpoint, lease_s=LEASE_S)
        for i in range(3):
            ha.start(i)
        ha.leader()
        c.start_worker("n1", 0)
        c.start_worker("n2", 0)
        c.wait_workers(2)
        out = os.path.join(c.tmp, "out")
        os.makedirs(out)
        jid = c.tidectl("submit", "--workers", "2", "--", "sh", "-c",
                        f"echo $$ > {out}/pid$RANK; exec sleep 100000").stdout.strip()
        wait_for(lambda: c.job(jid)["ranksRunning"] == 2, 20, "2 ranks running")
        pids = [int(open(os.path.join(out, f"pid{r}")).read()) for r in range(2)]
        print(f"lease {LEASE_S} s, {ROUNDS} rounds each; seconds from the signal to the leader's loss", flush=True)
        for name, sig in (("kill -9", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
            rows = [one_round(c, ha, sig) for _ in range(ROUNDS)]
            cols = list(zip(*rows))
            print(f"{name:8} leads  median {statistics.median(cols[0]):5.2f}  max {max(cols[0]):5.2f}   "
                  f"serves median {statistics.median(cols[1]):5.2f}  max {max(cols[1]):5.2f}   "
                  f"workers median {statistics.median(cols[2]):5.2f}  max {max(cols[2]):5.2f}", flush=True)
        assert all(pid_alive(p) for p in pids), "a rank died in a failover"
        job = c.job(jid)
        assert job["state"] == "JOB_STATE_RUNNING" and job["generation"] == 1, job
        print("the job's 2 ranks ran through every failover (generation 1, same processes)")


if __name__ == "__main__":
    main()
