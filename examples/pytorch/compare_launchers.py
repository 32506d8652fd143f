#!/usr/bin/python3
"""Wall time of ddp_train.py with 2 and 4 ranks under tide and under torchrun on this machine.

Boots a throwaway tide cluster (a scheduler and 4 workers, 2 "nodes" x 2 GPUs, on 127.0.0.1) with the
integration-test harness, then for each world size runs, --repeat times each:
  tide         `tidectl submit --workers N --wait -- /usr/bin/python3 ddp_train.py` (submit to exit)
  torchrun-5s  `python3 -m torch.distributed.run ... --monitor_interval 5` (torch 1.13's default)
  torchrun-0.1 the same with --monitor_interval 0.1 (current PyTorch's default)
  bare         the N ranks started directly with RANK/WORLD_SIZE/MASTER_* set (no launcher at all)
  bare-setsid  the same, each rank in a session of its own as tide's worker starts them: with the
               kernel's autogroup scheduling (sched_autogroup_enabled) each session gets its own share
               of a loaded CPU, which favours tide's ranks over torchrun's (one session) on a busy machine
and prints the median and the range, and the median of the `init` time rank 0 prints (its
init_process_group: how long it waited for its peers). Nothing here is a test: timings depend on the load.

  TIDE_BUILD_DIR=build /usr/bin/python3 examples/pytorch/compare_launchers.py [--repeat 3] [-- SCRIPT ARGS]
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
import tidetest  # noqa: E402

PYTHON = "/usr/bin/python3"
SCRIPT = os.path.join(HERE, "ddp_train.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_seconds(out):
    """The `init X s` of rank 0's first line in the output."""
    m = re.search(r"^(?:\[default0\]:)?world \d+ .* init ([0-9.]+)s", out, re.M)
    if not m:
        raise SystemExit(f"no init line in:\n{out}")
    return float(m.group(1))


def timed(fn):
    """(wall seconds of fn(), what fn returned: rank 0's init seconds)."""
    t0 = time.monotonic()
    init = fn()
    return time.monotonic() - t0, init


def check(r, what):
    if r.returncode != 0:
        raise SystemExit(f"{what} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")


def run_torchrun(n, monitor, args):
    with tempfile.TemporaryDirectory(prefix="compare-torchrun-") as logs:  # else it leaves /tmp/torchelastic_*
        r = subprocess.run([PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1", "--nnodes=1",
                            f"--nproc_per_node={n}", "--rdzv_backend=c10d",
                            f"--rdzv_endpoint=127.0.0.1:{free_port()}", "--monitor_interval", str(monitor),
                            "--log_dir", logs, SCRIPT, *args], capture_output=True, text=True, timeout=300)
    check(r, "torchrun")
    return init_seconds(r.stdout)


def run_bare(n, args, setsid=False):
    port = str(free_port())
    procs = [subprocess.Popen([PYTHON, SCRIPT, *args], stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                              text=True, start_new_session=setsid,
                              env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n),
                                       LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
             for r in range(n)]
    out = procs[0].communicate(timeout=300)[0]
    codes = [p.wait(timeout=300) for p in procs]
    if any(codes):
        raise SystemExit(f"bare ranks exited {codes}")
    return init_seconds(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("args", nargs="*", help="arguments for ddp_train.py (after --)")
    a = ap.parse_args()
    results = {}
    with tidetest.Cluster("compare") as c:
        c.start_scheduler()
        for node in ("node1", "node2"):
            for gpu in (0, 1):
                c.start_worker(node, gpu)
        c.wait_workers(4)

        def run_tide(n):
            r = c.tidectl("submit", "--workers", str(n), "--wait", "--", PYTHON, SCRIPT, *a.args, check=False,
                          timeout=300)
            check(r, "tidectl submit --wait")
            jid = re.match(r"job (\S+):", r.stdout).group(1)
            c.wait_workers(4)  # every worker idle again before the next run
            return init_seconds(c.tidectl("logs", jid, "--rank", "0").stdout)

        for n in (2, 4):
            for i in range(a.repeat):  # interleaved, so a burst of load elsewhere hits every launcher alike
                for name, fn in (("tide", lambda: run_tide(n)),
                                 ("torchrun-5s", lambda: run_torchrun(n, 5, a.args)),
                                 ("torchrun-0.1s", lambda: run_torchrun(n, 0.1, a.args)),
                                 ("bare", lambda: run_bare(n, a.args)),
                                 ("bare-setsid", lambda: run_bare(n, a.args, setsid=True))):
                    results.setdefault((n, name), []).append(timed(fn))
    print(f"{'ranks':>5}  {'launcher':<14} {'median s':>8}  {'min-max s':>11}  {'init s':>6}  "
          f"(n={a.repeat}, {os.cpu_count()} CPUs)")
    for (n, name), runs in results.items():
        ts = [t for t, _ in runs]
        init = statistics.median(i for _, i in runs)
        print(f"{n:>5}  {name:<14} {statistics.median(ts):8.2f}  {min(ts):5.2f}-{max(ts):5.2f}  {init:6.2f}")


if __name__ == "__main__":
    main()
