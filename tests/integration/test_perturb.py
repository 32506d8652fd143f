"""Scripted perturbations of a worker (`tide-worker --perturb FILE`, docs/worker.md): a script with an error
names its line and the worker does not start; heat shows in the temperature the scheduler sees; `die` kills the
worker like a crash (no goodbye) and the scheduler declares it dead."""

import os
import signal
import subprocess
import sys

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


if __name__ == "__main__":
    main()
