"""Scripted perturbations of a worker (`tide-worker --perturb FILE`, docs/worker.md): a script with an error
names its line and the worker does not start; heat shows in the temperature the scheduler sees; `die` kills the
worker like a crash (no goodbye) and the scheduler declares it dead."""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402


def main():
    with tidetest.Cluster("perturb") as c:
        c.start_scheduler("--heartbeat-ms", "200")
        bad = os.path.join(c.tmp, "bad.txt")
        with open(bad, "w") as f:
            f.write("# comment\n10 slow 50\n20 hot 3\n")
        r = subprocess.run([os.path.join(tidetest.BIN, "tide-worker"), "--scheduler", c.addr, "--perturb", bad,
                            "--data-dir", os.path.join(c.tmp, "wbad")], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, TIDE_TOKEN=c.token))
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert f"{bad}:3: unknown action 'hot'" in r.stderr, r.stderr
        print("ok   a bad perturbation script names its line; the worker exits 2")

        script = os.path.join(c.tmp, "p.txt")
        with open(script, "w") as f:
            f.write("0 heat 90   # 1.5 C a second\n2 xid 79\n8 die\n")
        w = c.start_worker("node1", 0, "--perturb", script)
        c.wait_workers(1)
        temps = []

        def hotter():
            ws = [x for x in c.workers_json() if x["id"] == "node1/gpu0"]
            if ws and ws[0].get("telemetry", {}).get("temperatureC") is not None:
                temps.append(float(ws[0]["telemetry"]["temperatureC"]))
            return len(temps) >= 2 and temps[-1] > temps[0] + 2
        wait_for(hotter, 20, "the temperature to rise")

        def xid():
            t = [x for x in c.workers_json() if x["id"] == "node1/gpu0"][0].get("telemetry", {})
            return int(t.get("xidCount", 0)) == 1 and t.get("lastXid") == 79
        wait_for(xid, 20, "the scripted XID in the worker's telemetry")
        w.wait(timeout=30)
        assert w.returncode == -signal.SIGKILL, w.returncode
        wait_for(lambda: [x for x in c.workers_json() if x["id"] == "node1/gpu0"][0]["state"] ==
                 "WORKER_STATE_DEAD", 20, "the worker to be declared dead")
        print(f"ok   heat shows ({temps[0]:.1f} -> {temps[-1]:.1f} C), so does the XID; die kills the worker, declared dead")


def step_rate(c, jid, seconds):
    """Steps per second of job jid's rank 0 over `seconds`, from its progress (heartbeat-lagged by the same
    amount at both ends)."""
    def step():
        p = c.job(jid)["ranks"][0].get("progress", {})
        return int(p.get("step", -1)), time.monotonic()
    s0, t0 = step()
    end = t0 + seconds
    wait_for(lambda: time.monotonic() >= end, seconds + 10, "the measuring window")
    s1, t1 = step()
    return (s1 - s0) / (t1 - t0)


def slow_down():
    """`slow 25` runs the worker's ranks at a quarter of their speed (SIGSTOP/SIGCONT duty cycle)."""
    with tidetest.Cluster("perturb-slow") as c:
        c.start_scheduler("--heartbeat-ms", "200")
        script = os.path.join(c.tmp, "slow.txt")
        with open(script, "w") as f:
            f.write("9 slow 25\n")
        c.start_worker("node1", 0, "--perturb", script)
        c.wait_workers(1)
        jid = c.tidectl("submit", "--", os.path.join(tidetest.BIN, "tide-mlp"), "--steps", "100000000",
                        "--log-every", "0").stdout.strip()
        wait_for(lambda: int(c.job(jid)["ranks"][0].get("progress", {}).get("step", -1)) >= 1, 30, "steps")
        fast = step_rate(c, jid, 3.0)
        wait_for(lambda: "25% speed" in c.log("worker-node1-gpu0.log"), 30, "the slowdown to start")
        slow = step_rate(c, jid, 4.0)
        assert fast > 0 and slow < 0.6 * fast, (fast, slow)
        c.tidectl("cancel", jid)
        c.wait_job(jid, "JOB_STATE_CANCELLED")
        print(f"ok   slow 25 slows the rank's steps: {fast:.1f} -> {slow:.1f} steps/s")


def cpu_backend_mpi_slow():
    """The cpu backend (`--gpu cpu`, docs/metrics.md): a calibrated peak, and the utilization of the core
    from the CPU time of the worker's ranks, seen through tide-rank-exec to the trainer it runs. And `slow`
    reaches an MPI job's virtual rank (through its tide-rank-exec), so the whole job slows."""
    with tidetest.Cluster("perturb-cpu") as c:
        c.start_scheduler("--heartbeat-ms", "200")
        script = os.path.join(c.tmp, "slow.txt")
        with open(script, "w") as f:
            f.write("10 slow 25\n")
        c.start_worker("node1", 0, "--gpu", "cpu")
        c.start_worker("node2", 0, "--gpu", "cpu", "--perturb", script)
        c.wait_workers(2)
        for w in c.workers_json():
            assert w["device"] == "cpu" and 0 < float(w["peakFlops"]) < 1e13, w
        # --no-stealing: with stealing the fast rank would take the slowed rank's micro-batches and hide
        # the slowdown this checks (that is it_steal's subject, docs/work-stealing.md).
        jid = c.tidectl("submit", "--launcher", "mpi", "--workers", "2", "--no-stealing", "--",
                        os.path.join(tidetest.BIN, "tide-mlp"), "--steps", "100000000",
                        "--log-every", "0").stdout.strip()
        wait_for(lambda: int(c.job(jid)["ranks"][0].get("progress", {}).get("step", -1)) >= 1, 30, "steps")

        def busy_cores():
            ws = c.workers_json()
            return all(float(w.get("telemetry", {}).get("gpuUtil", 0)) > 0.05 for w in ws) and ws
        ws = wait_for(busy_cores, 20, "both workers' cores busy with their ranks")
        fast = step_rate(c, jid, 3.0)
        job = c.job(jid)
        assert float(job.get("mfu", 0)) > 0, job
        wait_for(lambda: "25% speed" in c.log("worker-node2-gpu0.log"), 30, "the slowdown to start")
        slow = step_rate(c, jid, 4.0)
        assert fast > 0 and slow < 0.6 * fast, (fast, slow)
        c.tidectl("cancel", jid)
        c.wait_job(jid, "JOB_STATE_CANCELLED")
        utils = ", ".join(f"{float(w['telemetry']['gpuUtil']):.0%}" for w in ws)
        print(f"ok   cpu backend: core utilization {utils} from the ranks, job MFU {float(job['mfu']):.1%} "
              f"of the calibrated peak; slow 25 on one MPI rank's worker: {fast:.1f} -> {slow:.1f} steps/s")


if __name__ == "__main__":
    main()
    slow_down()
    cpu_backend_mpi_slow()
