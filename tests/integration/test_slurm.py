"""tide workers under real Slurm daemons (docs/slurm.md): slurmctld and two slurmd with 4 fake GPUs each on
loopback (slurmtest.py); `sbatch slurm/tide-workers.sbatch` (2 nodes x 2 tasks, --gpus-per-node=2) starts one
tide-worker per GPU, each registers labelled with its Slurm identity and GPU; a tide job runs on them and
succeeds; scancel ends the allocation and the workers say goodbye and are gone from `tidectl workers`, with
nothing left in squeue or in the process table. Then bad input: a malformed SLURM_STEP_GPUS under srun is
refused (exit 2, the variable named). Skips (exit 77) where Slurm or root is missing."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import slurmtest  # noqa: E402
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402

TEMPLATE = os.path.join(tidetest.SRC, "slurm", "tide-workers.sbatch")
WORKER = os.path.join(tidetest.BIN, "tide-worker")


def procs_of_job(s, jobid):
    """PIDs of live processes started for Slurm job jobid of cluster s (by their environment)."""
    want = (f"SLURM_JOB_ID={jobid}".encode(), f"SLURM_CONF={s.conf}".encode())
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if all(w in env for w in want) and tidetest.pid_alive(int(pid)):
            found.append(int(pid))
    return found


def slurm_workers(c, jobid):
    return [w for w in c.workers_json() if w.get("labels", {}).get("slurm.job_id") == jobid]


def allocation(c, s, times):
    t0 = time.monotonic()
    # A job holding GPUs 0 and 1 of both nodes first: the workers' allocation then gets GPUs 2 and 3, so
    # each worker's GPU must come from SLURM_STEP_GPUS (entry SLURM_LOCALID), not SLURM_LOCALID itself.
    blocker = s.sbatch("--nodes=2", "--gpus-per-node=2", "--ntasks-per-node=1", "--output=/dev/null",
                       "--wrap", "exec sleep 600")
    wait_for(lambda: s.job_state(blocker) == "RUNNING", 20, "the GPU-holding job to run", interval=0.1)
    env = {"TIDE_SCHEDULER": c.addr, "TIDE_TOKEN_FILE": os.path.join(c.data, "token"), "TIDE_WORKER": WORKER,
           "TIDE_WORKER_DATA": os.path.join(c.tmp, "slurm-workers")}
    jobid = s.sbatch("--nodes=2", "--gpus-per-node=2", "--ntasks-per-node=2", f"--chdir={c.tmp}",
                     f"--output={c.tmp}/slurm-%j.log", TEMPLATE,
                     # given to every tide-worker by the template
                     "--stop-grace-ms", "2000", "--gpu", "sim:h100", "--ckpt-mirror-min-free", "0",
                     # slurmd runs the allocation as its submitter: root here, and the ranks then run as root too
                     *(["--allow-root-jobs"] if os.geteuid() == 0 else []), env=env)
    assert jobid.isdigit(), jobid

    def registered():
        assert s.job_state(jobid) in ("PENDING", "CONFIGURING", "RUNNING"), \
            f"allocation {jobid} is {s.job_state(jobid)!r}: {c.log(f'slurm-{jobid}.log')}"
        ws = [w for w in slurm_workers(c, jobid) if w.get("state") == "WORKER_STATE_READY"]
        return ws if len(ws) == 4 else None
    ws = wait_for(registered, 30, "4 Slurm workers READY", interval=0.1)
    times["registered"] = time.monotonic() - t0
    by_node = {}
    for w in ws:
        lab = w["labels"]
        assert lab["slurm.node"] == w["node"] and w["node"] in slurmtest.NODES, w
        assert w["id"] == f"{w['node']}/gpu{w.get('gpuIndex', 0)}", w
        assert lab.get("slurm.step_id", "") != "" and lab["slurm.localid"] in ("0", "1"), w
        # SLURM_STEP_GPUS is "2,3" on each node (0 and 1 are held): task LOCALID takes entry LOCALID.
        assert w.get("gpuIndex", 0) == 2 + int(lab["slurm.localid"]), w
        by_node.setdefault(w["node"], set()).add(w.get("gpuIndex", 0))
    assert by_node == {n: {2, 3} for n in slurmtest.NODES}, by_node
    assert sorted(int(w["labels"]["slurm.procid"]) for w in ws) == [0, 1, 2, 3], ws
    ids = sorted(w["id"] for w in ws)
    s.run("scancel", blocker)

    # A tide job on the 4 Slurm workers.
    t1 = time.monotonic()
    jid = c.tidectl("submit", "--name", "on-slurm", "--workers", "4", "--", "sh", "-c",
                    'echo "hello $RANK from $SLURMD_NODENAME"').stdout.strip()
    job = c.wait_job(jid, ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"), 30)
    assert job["state"] == "JOB_STATE_SUCCEEDED", job
    assert sorted(job["workerIds"]) == ids, (job, ids)
    logs = c.tidectl("logs", jid).stdout
    for r in range(4):
        assert f"hello {r} from gpunode" in logs, logs
    times["job"] = time.monotonic() - t1

    # The allocation ends: every worker gets SIGTERM, says goodbye and leaves `tidectl workers`.
    t2 = time.monotonic()
    s.run("scancel", jobid)
    wait_for(lambda: not slurm_workers(c, jobid), 30, "the Slurm workers to leave `tidectl workers`", interval=0.1)
    times["gone"] = time.monotonic() - t2
    wait_for(lambda: not s.squeue(), 20, "squeue to be empty", interval=0.1)
    wait_for(lambda: not procs_of_job(s, jobid), 20, f"no process of Slurm job {jobid} left", interval=0.1)
    times["ended"] = time.monotonic() - t2
    left = [w["id"] for w in c.workers_json()]
    assert left == [], left
    status = c.tidectl_json("status")
    assert not status.get("workersTotal") and not status.get("workersDead"), status
    # Still known by id (a cordon would be kept), shown on request as departed.
    gone = c.tidectl_json("workers", "--all").get("workers", [])
    assert sorted(w["id"] for w in gone) == ids, gone
    assert all(w.get("departed") and w["state"] == "WORKER_STATE_DEAD" for w in gone), gone
    table = c.tidectl("workers", "--all").stdout
    assert table.count("DEPARTED") == 4, table
    # They said goodbye: no failure, nobody was declared dead.
    events = c.tidectl("events").stdout
    assert "worker.dead" not in events and events.count("worker.departed") == 4, events
    print(f"ok   sbatch {os.path.basename(TEMPLATE)}: 4 workers registered with their Slurm identity in "
          f"{times['registered']:.1f}s, a 4-rank job SUCCEEDED on them in {times['job']:.1f}s, scancel: gone from "
          f"`tidectl workers` in {times['gone']:.1f}s, allocation and processes gone in {times['ended']:.1f}s")


def bad_step_gpus(c, s):
    r = s.run("srun", "-N1", "-n1", "--time=1", "env", "SLURM_STEP_GPUS=0,gpu1", "SLURM_LOCALID=1",
              f"TIDE_SCHEDULER={c.addr}", f"TIDE_TOKEN={c.token}", WORKER, "--data-dir",
              os.path.join(c.tmp, "bad-worker"), check=False)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "SLURM_STEP_GPUS" in r.stderr + r.stdout, (r.stdout, r.stderr)
    assert c.workers_json() == [], c.workers_json()
    print("ok   a malformed SLURM_STEP_GPUS under srun: the worker exits 2 naming it and does not register")


def main():
    why = slurmtest.available()
    if why:
        print(f"skip: {why}")
        sys.exit(77)
    t0 = time.monotonic()
    times = {}
    with tidetest.Cluster("slurm") as c, slurmtest.Slurm("slurmd") as s:
        times["slurm"] = time.monotonic() - t0
        c.start_scheduler()
        allocation(c, s, times)
        bad_step_gpus(c, s)
    print(f"ok   Slurm up in {times['slurm']:.1f}s; whole test {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    main()
