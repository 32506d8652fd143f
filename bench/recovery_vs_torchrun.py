#!/usr/bin/python3
"""Recovery side by side with torchrun (docs/fault-tolerance.md, "Side by side with torchrun"): the same 2-rank
PyTorch DDP script (examples/pytorch/ddp_train_sdk.py: gloo on CPU, a checkpoint every K steps, resume from the
newest) under torchrun (Debian's torch 1.13) and under tide (a real scheduler and 3 workers on loopback, so a
spare exists), one fault per round:

  kill   SIGKILL of rank 1's process.  torchrun --max_restarts 3 with --monitor_interval 5 (torch 1.13's
         default) and 0.1 (current PyTorch's); tide --restart on-failure.
  node   a simulated node lost: SIGKILL of the process group of the torchrun agent that runs rank 1 (the agent
         and its rank; two agents --nnodes 2, --nproc_per_node 1, c10d rendezvous on 127.0.0.1, plus a third
         agent as a spare; the rendezvous host, the first agent, is never the one killed); tide: SIGKILL of
         rank 1's tide-worker and of its rank (restart policy on-loss, the default).
  hang   SIGSTOP of rank 1's process.  tide with the scheduler's --hang-timeout 3s and the default 30s;
         torchrun (nothing watches progress: it acts only when rank 0's collective times out, the script's
         --timeout: 300 s, watched for --bound seconds, and 30 s, tide's default hang timeout).

Per round: the seconds from the fault to the first step completed by a process started after it (training
again), split into the launcher's part (fault -> the last new rank process started, from /proc/PID/stat as
the script logs it) and the trainer's own start (that process's start -> the first step: Python, import
torch, init_process_group, resume); the launcher's reaction (torchrun: its first log line after the fault;
tide: job.requeued or job.hung); and the steps redone (the newest step the old processes did + 1 - the step the new
processes resumed at). Times are wall clock on one host. Rounds alternate between the launchers.

    /usr/bin/python3 bench/recovery_vs_torchrun.py [--build build-rel] [--rounds 3] [--cases kill,node,hang]
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
SCRIPT = os.path.join(ROOT, "examples", "pytorch", "ddp_train_sdk.py")
PYTHON = "/usr/bin/python3"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build-rel", help="build dir with bin/ (default build-rel)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per case and launcher (default 3)")
    ap.add_argument("--cases", default="kill,node,hang", help="comma-separated: kill, node, hang")
    ap.add_argument("--hang-rounds-30s", type=int, default=None,
                    help="rounds of tide with the default 30 s hang timeout (default --rounds; 0 skips)")
    ap.add_argument("--torchrun-hang-rounds", type=int, default=1,
                    help="rounds of torchrun with a hung rank, each watched --bound s, with the script's default "
                         "collective timeout (300 s) and with --timeout 30 (default 1; 0 skips)")
    ap.add_argument("--step-sleep", type=float, default=0.1, help="seconds slept per step (default 0.1)")
    ap.add_argument("--checkpoint-every", type=int, default=10, help="K: a checkpoint every K steps (default 10)")
    ap.add_argument("--bound", type=float, default=90, help="longest wait for a recovery, seconds (default 90)")
    ap.add_argument("--hang-watch", type=float, default=60,
                    help="how long torchrun with a hung rank and the 300 s collective timeout is watched (default 60)")
    ap.add_argument("--seed", type=int, default=8, help="seed of the fault steps (default 8)")
    ap.add_argument("--json", default=None, help="also write every round's figures to this file")
    a = ap.parse_args()
    if a.hang_rounds_30s is None:
        a.hang_rounds_30s = a.rounds
    return a


ARGS = parse_args()
os.environ["TIDE_BUILD_DIR"] = os.path.abspath(os.path.join(ROOT, ARGS.build) if not os.path.isabs(ARGS.build)
                                               else ARGS.build)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def records(log):
    """The timing lines the ranks appended so far."""
    try:
        with open(log) as f:
            return [json.loads(x) for x in f if x.endswith("\n")]
    except FileNotFoundError:
        return []


def script_args(d, extra=()):
    return [SCRIPT, *extra, "--steps", "1000000", "--step-sleep", str(ARGS.step_sleep), "--log-every", "100000",
            "--checkpoint-every", str(ARGS.checkpoint_every), "--checkpoint-dir", os.path.join(d, "ck"),
            "--timing-log", os.path.join(d, "timing.jsonl")]


def wait_step(log, step, timeout=90, alive=None):
    """Waits until every rank of the running world logged step >= `step`; returns {rank: pid} of that world."""
    def ready():
        if alive:
            alive()
        recs = records(log)
        starts = [r for r in recs if r["event"] == "start"]
        if not starts:
            return None
        world = starts[-1]["world"]
        pids = {}
        for r in starts:
            pids[r["rank"]] = r["pid"]  # the newest process of each rank
        if len(pids) < world:
            return None
        done = {r["pid"] for r in recs if r["event"] == "step" and r["step"] >= step}
        return pids if all(p in done for p in pids.values()) else None
    return wait_for(ready, timeout, f"every rank past step {step}", interval=0.02)


def analyse(log, tf):
    """The figures of a recovery from the timing log, fault at tf (Unix s); None where training did not
    resume."""
    recs = records(log)
    old = {r["pid"] for r in recs if r["t"] <= tf}
    # a step the old processes finish just after the fault (its gradients were already exchanged) is lost too
    before = [r["step"] for r in recs if r["event"] == "step" and r["pid"] in old]
    starts = [r for r in recs if r["event"] == "start" and r["pid"] not in old]
    steps = [r for r in recs if r["event"] == "step" and r["pid"] not in old]
    out = {"last_before": max(before) if before else None}
    if not starts or not steps:
        return out
    world = starts[0]["world"]
    gen = starts[:world]  # the first new world (a later restart would append another)
    first = min(steps, key=lambda r: r["t"])
    last = max(gen, key=lambda r: r["proc_start"])  # the rank whose process started last
    out.update(total=first["t"] - tf, launcher=last["proc_start"] - tf, trainer=first["t"] - last["proc_start"],
               python_import=last["imported"] - last["proc_start"], init=last["init"] - last["imported"],
               to_step=first["t"] - last["init"], resumed_at=min(r["resumed_at"] for r in gen), world=world)
    if out["last_before"] is not None:
        out["redone"] = out["last_before"] + 1 - out["resumed_at"]
    return out


# --- torchrun ------------------------------------------------------------------------------------------------

class Agent:
    """One torchrun process (in a session of its own: its group is the agent and its ranks), its output
    lines stamped with their arrival time."""

    def __init__(self, argv, logdir):
        self.lines = []
        self.p = subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
                                   "--log_dir", logdir, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True, text=True, errors="replace")
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def first_after(self, tf, pattern=r"."):
        return next(((t, x) for t, x in list(self.lines) if t >= tf and re.search(pattern, x)), None)

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait(timeout=30)
        self.t.join(timeout=10)


def reaction(agents, tf):
    """Seconds from tf to the first agent log line after it (torchrun's reaction), and that line."""
    hits = [h for h in (a.first_after(tf, r"^(INFO|WARNING|ERROR):torch\.distributed") for a in agents) if h]
    if not hits:
        return None, ""
    t, x = min(hits)
    return t - tf, x


def agent_of(pid):
    """The parent pid (the torchrun agent) of a rank process."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def torchrun_round(case, monitor, d, fault_step, extra=(), bound=None):
    port = free_port()
    common = ["--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id", "bench", "--max_restarts",
              "3", "--monitor_interval", str(monitor)]
    agents = []
    try:
        if case == "node":
            for i in range(3):  # the first hosts the c10d store; the third is a spare node
                os.makedirs(os.path.join(d, f"agent{i}"))
                agents.append(Agent(["--nnodes", "2", "--nproc_per_node", "1", *common, *script_args(d, extra)],
                                    os.path.join(d, f"agent{i}")))
                if i == 0:
                    wait_for(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() or True, 30,
                             "the c10d store")
        else:
            os.makedirs(os.path.join(d, "agent"))
            agents.append(Agent(["--nnodes", "1", "--nproc_per_node", "2", *common, *script_args(d, extra)],
                                os.path.join(d, "agent")))
        log = os.path.join(d, "timing.jsonl")

        def alive():
            if all(a.p.poll() is not None for a in agents):
                raise SystemExit("torchrun exited:\n" + "\n".join(x for a in agents for _, x in a.lines[-30:]))
        pids = wait_step(log, fault_step, alive=alive)
        victim = pids[1]
        if case == "node":
            host = agent_of(victim)
            if host == agents[0].p.pid:  # rank 1 on the store's host: take rank 0's node instead
                victim = pids[0]
                host = agent_of(victim)
            tf = time.time()
            os.killpg(host, signal.SIGKILL)
        else:
            tf = time.time()
            os.kill(victim, signal.SIGSTOP if case == "hang" else signal.SIGKILL)
        res = {}
        try:
            wait_for(lambda: "total" in analyse(log, tf), bound or ARGS.bound, "training again", interval=0.05)
        except AssertionError:
            res["gave_up"] = bound or ARGS.bound
        res.update(analyse(log, tf))
        res["react"], res["react_line"] = reaction(agents, tf)
        res["agents_exited"] = [a.p.poll() for a in agents]
        res["agent_tail"] = [x for a in agents for t, x in a.lines if t >= tf][-12:]
        return res
    finally:
        for a in agents:
            a.kill()


# --- tide --------------------------------------------------------------------------------------------------

def events(c, jid):
    return [json.loads(x) for x in c.tidectl("-o", "json", "events", "--job", jid).stdout.splitlines() if x.strip()]


def event_after(evs, tf, typ):
    ts = [int(e["timeMs"]) / 1e3 - tf for e in evs if e.get("type") == typ and int(e.get("timeMs", 0)) / 1e3 >= tf]
    return min(ts) if ts else None


class TideCluster:
    def __init__(self, name, *flags):
        self.c = tidetest.Cluster(name)
        self.c.start_scheduler(*flags)
        self.gpu = 0
        for _ in range(3):
            self.add_worker()
        self.c.wait_workers(3)

    def add_worker(self):
        self.c.start_worker("node1", self.gpu)
        self.gpu += 1

    def round(self, case, d, fault_step):
        c = self.c
        extra = ["--restart", "on-failure"] if case == "kill" else []
        jid = json.loads(c.tidectl("-o", "json", "submit", "--workers", "2", *extra, "--", PYTHON,
                                   *script_args(d)).stdout)["id"]
        log = os.path.join(d, "timing.jsonl")
        try:
            def alive():
                if c.job(jid).get("state") in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_SUCCEEDED"):
                    raise SystemExit(f"job {jid} ended: {c.tidectl('job', jid).stdout}")
            pids = wait_step(log, fault_step, alive=alive)
            victim = pids[1]
            if case == "node":
                wid = next(r["workerId"] for r in c.job(jid)["ranks"] if int(r.get("rank", 0)) == 1)
                wp = c.workers[wid]
                tf = time.time()
                wp.send_signal(signal.SIGKILL)
                os.kill(victim, signal.SIGKILL)
                wp.wait()
            else:
                tf = time.time()
                os.kill(victim, signal.SIGSTOP if case == "hang" else signal.SIGKILL)
            res = {}
            try:
                wait_for(lambda: "total" in analyse(log, tf), ARGS.bound, "training again", interval=0.05)
            except AssertionError:
                res["gave_up"] = ARGS.bound
            res.update(analyse(log, tf))
            evs = events(c, jid)
            res["react"] = event_after(evs, tf, "job.hung" if case == "hang" else "job.requeued")
            res["started"] = event_after(evs, tf, "job.started")
            res["running"] = event_after(evs, tf, "job.running")
            res["events"] = [f"{(int(e['timeMs']) / 1e3 - tf):+.2f} {e.get('type')} {e.get('message', '')}"
                             for e in evs if int(e.get("timeMs", 0)) / 1e3 >= tf - 0.5]
            gens = c.job(jid).get("generations", [])
            if gens:
                res["tide_generation"] = gens[-1]
            return res
        finally:
            c.tidectl("cancel", jid, check=False)
            c.wait_job(jid, ("JOB_STATE_CANCELLED", "JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"))
            if case == "node":
                self.add_worker()
            wait_for(lambda: not [r for r in records(log) if r["event"] == "start"
                                  and tidetest.pid_alive(r["pid"])], 30, "every rank gone")
            c.wait_workers(3, timeout=30)

    def close(self):
        self.c.close()


# --- the run -----------------------------------------------------------------------------------------------

def fmt(v, w=6):
    return f"{v:{w}.2f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"{'-':>{w}}"


def summary(vals, digits=2):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.median(vals):.{digits}f} ({min(vals):.{digits}f}-{max(vals):.{digits}f})"


def main():
    a = ARGS
    rng = random.Random(a.seed)
    cases = [x.strip() for x in a.cases.split(",") if x.strip()]
    tmp = tempfile.mkdtemp(prefix="recovery-vs-torchrun-")
    rows = []  # (case, launcher, round, result)
    t_start = time.monotonic()
    print(f"load before: {open('/proc/loadavg').read().split()[:3]}, {os.cpu_count()} CPUs; step sleep "
          f"{a.step_sleep}s, checkpoint every {a.checkpoint_every} steps", flush=True)
    clusters = {}
    try:
        plan = []  # (case, [(launcher name, fn(d, fault_step))], rounds)
        if "kill" in cases or "node" in cases or ("hang" in cases and a.hang_rounds_30s):
            clusters["default"] = TideCluster("recovery")
        if "hang" in cases:
            clusters["hang3"] = TideCluster("recovery-hang3", "--hang-timeout", "3s")
        if "kill" in cases:
            plan.append(("kill", [("tide", lambda d, s: clusters["default"].round("kill", d, s)),
                                  ("torchrun-5s", lambda d, s: torchrun_round("kill", 5, d, s)),
                                  ("torchrun-0.1s", lambda d, s: torchrun_round("kill", 0.1, d, s))], a.rounds))
        if "node" in cases:
            plan.append(("node", [("tide", lambda d, s: clusters["default"].round("node", d, s)),
                                  ("torchrun-5s", lambda d, s: torchrun_round("node", 5, d, s)),
                                  ("torchrun-0.1s", lambda d, s: torchrun_round("node", 0.1, d, s))], a.rounds))
        if "hang" in cases:
            plan.append(("hang", [("tide-3s", lambda d, s: clusters["hang3"].round("hang", d, s))], a.rounds))
            if a.hang_rounds_30s:
                plan.append(("hang", [("tide-30s", lambda d, s: clusters["default"].round("hang", d, s))],
                             a.hang_rounds_30s))
            if a.torchrun_hang_rounds:
                plan.append(("hang", [("torchrun-0.1s", lambda d, s: torchrun_round("hang", 0.1, d, s,
                                                                                     bound=a.hang_watch))],
                             a.torchrun_hang_rounds))
                plan.append(("hang", [("torchrun-0.1s, collective timeout 30s",
                                       lambda d, s: torchrun_round("hang", 0.1, d, s, ("--timeout", "30")))],
                             a.torchrun_hang_rounds))
        for case, launchers, rounds in plan:
            for r in range(rounds):
                # the fault after a step between K and 2K-1 (a checkpoint of step K-1 exists): the same step
                # for every launcher of a round
                fault_step = a.checkpoint_every + rng.randrange(a.checkpoint_every)
                for name, fn in launchers:
                    d = os.path.join(tmp, f"{case}-{name}-{r}")
                    os.makedirs(d)
                    load = float(open("/proc/loadavg").read().split()[0])
                    res = fn(d, fault_step)
                    res["load"], res["fault_step"] = load, fault_step
                    rows.append((case, name, r, res))
                    print(f"{case:<5} {name:<38} round {r}: fault after step {fault_step}, total {fmt(res.get('total'))}"
                          f" launcher {fmt(res.get('launcher'))} trainer {fmt(res.get('trainer'))} reaction "
                          f"{fmt(res.get('react'))} redone {res.get('redone', '-')} load {load:.1f}"
                          + (f" GAVE UP after {res['gave_up']:.0f}s" if "gave_up" in res else ""), flush=True)
                    for x in res.get("events", []) + res.get("agent_tail", []):
                        print(f"      {x[:160]}", flush=True)
    finally:
        for cl in clusters.values():
            cl.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload after: {open('/proc/loadavg').read().split()[:3]}; {time.monotonic() - t_start:.0f} s in all\n")
    print("seconds from the fault; median (min-max) of the rounds")
    print("| fault | launcher | rounds | training again | launcher's part | trainer's start | reaction | "
          "steps redone |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    seen = []
    for case, name, _, _ in rows:
        if (case, name) not in seen:
            seen.append((case, name))
    for case, name in seen:
        rs = [res for c, n, _, res in rows if (c, n) == (case, name)]
        ok = [res for res in rs if "total" in res]
        note = "" if len(ok) == len(rs) else f" ({len(rs) - len(ok)} not within {max(x.get('gave_up', 0) for x in rs):.0f} s)"
        print(f"| {case} | {name} | {len(rs)}{note} | {summary([x['total'] for x in ok])} | "
              f"{summary([x['launcher'] for x in ok])} | {summary([x['trainer'] for x in ok])} | "
              f"{summary([x.get('react') for x in rs])} | "
              f"{summary([x.get('redone') for x in ok], 0)} |")
    print("\ntrainer's start split (median): python + import torch | init_process_group | resume + first step")
    for case, name in seen:
        ok = [res for c, n, _, res in rows if (c, n) == (case, name) and "total" in res]
        if ok:
            print(f"  {case:<5} {name:<38} " + " | ".join(f"{statistics.median(x[k] for x in ok):.2f}"
                                                         for k in ("python_import", "init", "to_step")))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"case": c, "setup": n, "round": r, **res} for c, n, r, res in rows], f, indent=1)


if __name__ == "__main__":
    main()
