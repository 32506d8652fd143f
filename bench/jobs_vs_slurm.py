#!/usr/bin/python3
"""Job throughput and idle submit-to-running latency, tide beside Slurm on this machine (issue 11; results in
docs/performance.md, "Job throughput: tide and Slurm"). In one run, each system in turn on loopback:

  Slurm default  one slurmctld + one slurmd (own munged; slurmtest.py), the node declaring CPUS = --workers CPUs,
                 Slurm's scheduler defaults (sched/backfill, no SchedulerParameters), finished jobs kept
                 (MinJobAge=3600)
  Slurm tuned    the same plus what an admin tuning for short jobs would set (TUNED below, printed)
  tide           a tide-scheduler (SQLite store) + --workers tide-workers (fake GPUs; tidetest.py)

throughput  --jobs jobs of one task running `true` (--default-jobs in Slurm's default configuration, whose
            ~7 jobs/s would take 140 s for 1000), submitted as fast as the client allows: Slurm one
            `sbatch --wrap true` per job (--sbatch-parallel sbatch processes at a time), tide one gRPC SubmitJob
            per job (64 in flight). jobs/s = jobs / (last completion seen - first submit). Completion is watched
            cheaply: Slurm's sdiag "Jobs completed" counter every --poll s (not squeue), tide's WatchEvents stream.
            Beside it the CPU time the daemons and everything they started (the jobs too) used per job: a cgroup
            (cpuacct) holding the daemons. With --array also one Slurm job array of --jobs tasks (1 submission)
            in the tuned configuration.
idle        --idle-rounds times, with the cluster idle (the previous job finished, then a random pause of
            0-1 s so the submissions do not ride a scheduler tick): submit one job and time from just before
            the submission to the moment the job's own first act ran: both run the same script, `#!/bin/bash`,
            `echo $EPOCHREALTIME > FILE` (sbatch SCRIPT FILE; tide command [SCRIPT, FILE]). Median and p90. In the
            tuned configuration also through `srun SCRIPT FILE` (an interactive allocation: Slurm's fastest
            path, which skips batch scheduling; --no-srun leaves it out).

Every daemon is stopped at the end, also on failure (the fixtures' context managers; they die with this
process too). Where Slurm cannot run here (not root, slurm-wlm or munge missing) only tide is measured.
    /usr/bin/python3 bench/jobs_vs_slurm.py [--build BUILD] [--jobs 1000] [--default-jobs 300] [--workers 16]
                  [--idle-rounds 20] [--csv F] [--only slurm-default,slurm-tuned,tide] [--array] [--no-srun]
                  [--verbose] (the slurm.conf files) [--tuned-conf LINE ...] (instead of TUNED)"""

import argparse
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))

# What the "tuned" Slurm adds to the default configuration (one slurm.conf line each): jobs considered at
# every submission and completion without delay or throttle, the periodic main loop and backfill every second
# instead of 60 s / 30 s, and the daemons logging only errors (the high-throughput guide's advice).
TUNED = (
    "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1,"
    "default_queue_depth=1000",
    "SlurmctldDebug=error",
    "SlurmdDebug=error",
)
# Lines of the fixture's (test-oriented) slurm.conf that the benchmark sets itself.
OWN_KEYS = ("MinJobAge", "SchedulerParameters", "SlurmctldDebug", "SlurmdDebug", "MaxJobCount")

STAMP = "#!/bin/bash\n# the job's first act: the wall clock (microseconds) into the file named by $1\n" \
        "echo $EPOCHREALTIME > \"$1\"\n"


def say(*a):
    print(*a, flush=True)


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100.0 * len(s)) - 1)]


def wait_stamp(path, timeout):
    """The float a job wrote into path (polled every 2 ms: a stat, nothing the jobs compete with much)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                txt = f.read().strip()
            if txt:
                return float(txt)
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.002)
    raise AssertionError(f"no timestamp in {path} after {timeout}s")


class CpuGroup:
    """The CPU time of some daemons and of everything they start afterwards (job processes included, even
    daemonized ones such as slurmstepd): a cgroup of its own (v1 cpuacct, or v2), removed by close(). Where
    none can be made (not root, no cgroup fs) usage() is None and the tables say "-"."""

    def __init__(self, name):
        self.path, self.v2 = None, False
        for base, v2 in (("/sys/fs/cgroup/cpuacct", False), ("/sys/fs/cgroup", True)):
            if os.path.exists(os.path.join(base, "cpu.stat" if v2 else "cpuacct.usage")) or \
                    (v2 and os.path.exists(os.path.join(base, "cgroup.controllers"))):
                try:
                    p = os.path.join(base, f"{name}-{os.getpid()}")
                    os.mkdir(p)
                    self.path, self.v2 = p, v2
                    break
                except OSError:
                    continue

    def add(self, pid):
        if self.path:
            try:
                with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
            except OSError as e:
                say(f"(cpu accounting off: {e})")
                self.close()

    def usage(self):
        """CPU seconds used so far by the group, or None."""
        if not self.path:
            return None
        if self.v2:
            for ln in open(os.path.join(self.path, "cpu.stat")):
                if ln.startswith("usage_usec "):
                    return int(ln.split()[1]) / 1e6
            return None
        return int(open(os.path.join(self.path, "cpuacct.usage")).read()) / 1e9

    def close(self):
        if self.path:
            for _ in range(50):  # the last job processes may still be exiting
                try:
                    os.rmdir(self.path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                say(f"(could not remove the cgroup {self.path})")
            self.path = None


def cpu_per_job(g, u0, n):
    u = g.usage()
    return {} if u is None or u0 is None else {"cpu_ms_per_job": (u - u0) * 1e3 / n}


# ----------------------------------------------------------------------------------------------- Slurm

def slurm_cluster(slurmtest, name, cpus, extra):
    """A slurmtest.Slurm with one node of cpus CPUs, MinJobAge=3600, MaxJobCount=100000 and the extra lines."""
    slurmtest.NODES = ("gpunode1",)  # one slurmd (the fixture's module-level node list)

    class One(slurmtest.Slurm):
        def _write_conf(self):
            super()._write_conf()
            lines = []
            for ln in open(self.conf).read().splitlines():
                if ln.split("=", 1)[0] in OWN_KEYS:
                    continue
                if ln.startswith("NodeName="):
                    ln = " ".join(f"CPUs={cpus}" if w.startswith("CPUs=") else w for w in ln.split())
                lines.append(ln)
            lines[-1:-1] = ["MinJobAge=3600", "MaxJobCount=100000", *extra]  # before the partition line
            with open(self.conf, "w") as f:
                f.write("\n".join(lines) + "\n")

    return One(name)


def sdiag_counters(s):
    """sdiag's job counters since its last reset: {"submitted", "started", "completed", "failed", ...}."""
    out = s.run("sdiag", timeout=20).stdout
    got = {}
    for ln in out.splitlines():
        k, _, v = ln.strip().partition(":")
        k = k.strip().lower()
        if k.startswith("jobs ") and v.strip().isdigit() and k[5:] not in got:  # the first block (since reset)
            got[k[5:]] = int(v)
    return got


def slurm_wait_done(s, base, n, poll, timeout):
    """Polls sdiag until n more jobs completed (or failed/cancelled) than in base; returns the time it saw it."""
    deadline = time.monotonic() + timeout
    while True:
        c = sdiag_counters(s)
        ended = sum(c.get(k, 0) - base.get(k, 0) for k in ("completed", "failed", "canceled", "cancelled"))
        if ended >= n:
            return time.time(), c
        if time.monotonic() > deadline:
            raise AssertionError(f"Slurm: {ended} of {n} jobs ended after {timeout}s ({c})")
        time.sleep(poll)


def slurm_states(s):
    """{state: count} of every job slurmctld still holds (MinJobAge keeps finished ones)."""
    out = s.run("squeue", "-h", "-t", "all", "-r", "-o", "%T", timeout=60).stdout.split()
    got = {}
    for st in out:
        got[st] = got.get(st, 0) + 1
    return got


def slurm_throughput(s, a, label, g, array=False, jobs=None):
    jobs = jobs or a.jobs
    env = s.env()
    argv = ["sbatch", "--parsable", "--output=/dev/null", "--chdir", s.dir, "--wrap", "true"]
    base = sdiag_counters(s)
    u0 = g.usage()
    t0 = time.time()
    if array:
        r = subprocess.run(argv[:1] + [f"--array=0-{jobs - 1}"] + argv[1:], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0, r.stderr
    else:
        def one(_):
            r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
            assert r.returncode == 0, r.stderr
        with ThreadPoolExecutor(a.sbatch_parallel) as ex:
            list(ex.map(one, range(jobs)))
    t_sub = time.time()
    t_end, c = slurm_wait_done(s, base, jobs, a.poll, timeout=600)
    cpu = cpu_per_job(g, u0, jobs)
    states = slurm_states(s)
    # sdiag counts a job completed when its script ended; its cleanup (COMPLETING) may still be under way
    assert states.get("COMPLETED", 0) + states.get("COMPLETING", 0) >= jobs and \
        not set(states) - {"COMPLETED", "COMPLETING"}, f"Slurm {label}: {states}"
    rate = jobs / (t_end - t0)
    say(f"  {label}: {jobs} jobs submitted in {t_sub - t0:.2f} s ({jobs / (t_sub - t0):.0f}/s), all completed "
        f"after {t_end - t0:.2f} s: {rate:.1f} jobs/s" +
        (f"; daemons + jobs used {cpu['cpu_ms_per_job']:.1f} ms CPU per job" if cpu else ""))
    return {"jobs": jobs, "jobs_per_s": rate, "submit_s": t_sub - t0, "total_s": t_end - t0, **cpu}


def slurm_idle(s, a, script, tmp, label, rng, srun=False):
    """Idle rounds through sbatch, or (srun) through an interactive srun, which asks for its allocation at once
    and launches the step itself: no batch scheduling in between (it returns when the job ended)."""
    env = s.env()
    lat, ack = [], []
    for i in range(a.idle_rounds):
        base = sdiag_counters(s)
        time.sleep(rng.random())  # de-phase from Slurm's once-a-second timers (not synchronisation)
        out = os.path.join(tmp, f"{label}-{i}")
        t0 = time.time()
        if srun:
            p = subprocess.Popen(["srun", "--quiet", "-N1", "-n1", f"--chdir={tmp}", script, out], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                lat.append(wait_stamp(out, 60) - t0)
            finally:
                _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
        else:
            r = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--chdir", tmp, script, out],
                               capture_output=True, text=True, env=env, timeout=60)
            ack.append(time.time() - t0)
            assert r.returncode == 0, r.stderr
            lat.append(wait_stamp(out, 60) - t0)
        slurm_wait_done(s, base, 1, 0.02, timeout=60)
    say(f"  {label}: idle submit -> running over {len(lat)} rounds: median {statistics.median(lat) * 1e3:.0f} ms, "
        f"p90 {pct(lat, 90) * 1e3:.0f} ms" +
        (f" (sbatch itself: median {statistics.median(ack) * 1e3:.0f} ms)" if ack else ""))
    return {"idle_median_ms": statistics.median(lat) * 1e3, "idle_p90_ms": pct(lat, 90) * 1e3,
            **({"submit_ack_ms": statistics.median(ack) * 1e3} if ack else {})}


def run_slurm(slurmtest, a, tuned, script, tmp, rng):
    label = "slurm-tuned" if tuned else "slurm-default"
    res = {}
    t = time.monotonic()
    g = CpuGroup("jobs-vs-slurm")
    try:
        with slurm_cluster(slurmtest, f"bench-{label}", a.workers, TUNED if tuned else ()) as s:
            for p in s.procs.values():
                g.add(p.pid)
            say(f"{label}: slurmctld + 1 slurmd ({a.workers} CPUs) up in {time.monotonic() - t:.1f} s")
            if a.verbose:
                say(open(s.conf).read())
            res[label] = slurm_throughput(s, a, label, g, jobs=a.jobs if tuned else a.default_jobs)
            res[label].update(slurm_idle(s, a, script, tmp, label, rng))
            if tuned and a.srun:
                res[label + "-srun"] = slurm_idle(s, a, script, tmp, label + "-srun", rng, srun=True)
            if tuned and a.array:
                res[label + "-array"] = slurm_throughput(s, a, label + "-array", g, array=True)
    finally:
        g.close()
    return res


# ------------------------------------------------------------------------------------------------ tide

class Watch:
    """Follows tide's WatchEvents in a thread: the time each job's terminal event arrived here."""

    def __init__(self, c, js):
        import grpc
        self.js = js
        self.ch = grpc.insecure_channel(c.addr)
        self.md = [("authorization", f"Bearer {c.token}")]
        self.stub = js[1].JobServiceStub(self.ch)
        self.done = {}  # job id -> (local time, type)
        self.cv = threading.Condition()
        self.seq = 0
        self.stream = None
        self.stop = False
        # start from the newest event kept, so the wait later sees only new ones
        for ev in self.stub.WatchEvents(js[0].WatchEventsRequest(follow=False), metadata=self.md, timeout=30):
            self.seq = max(self.seq, ev.seq)
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        import grpc
        while not self.stop:
            self.stream = self.stub.WatchEvents(self.js[0].WatchEventsRequest(since_seq=self.seq, follow=True),
                                                metadata=self.md)
            try:
                for ev in self.stream:
                    self.seq = ev.seq
                    if ev.type in ("job.succeeded", "job.failed", "job.cancelled"):
                        with self.cv:
                            self.done[ev.job_id] = (time.time(), ev.type)
                            self.cv.notify_all()
            except grpc.RpcError:
                pass  # ended (a slow watcher is cut off, or we cancelled): follow again from the last seq

    def wait(self, ids, timeout):
        """Waits until every job in ids ended; returns the latest arrival time."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                missing = [j for j in ids if j not in self.done]
                if not missing:
                    break
                left = deadline - time.monotonic()
                assert left > 0, f"tide: {len(missing)} of {len(ids)} jobs not ended after {timeout}s"
                self.cv.wait(min(left, 1.0))
            bad = [j for j in ids if self.done[j][1] != "job.succeeded"]
            assert not bad, f"tide: {len(bad)} jobs did not succeed: {[(j, self.done[j]) for j in bad[:3]]}"
            return max(self.done[j][0] for j in ids)

    def close(self):
        self.stop = True
        if self.stream is not None:
            self.stream.cancel()
        self.ch.close()
        self.th.join(timeout=10)


def run_tide(tidetest, a, script, tmp, rng):
    gen = tempfile.mkdtemp(prefix="tide-stubs-")
    try:
        tidetest.gen_stubs(gen)
        from tide.v1 import job_service_pb2 as js, job_service_pb2_grpc as jsg
        from tide.v1 import types_pb2 as tp
    finally:
        shutil.rmtree(gen, ignore_errors=True)
    res = {}
    t = time.monotonic()
    g = CpuGroup("jobs-vs-tide")
    try:
        res.update(tide_phases(tidetest, a, script, tmp, rng, g, js, jsg, tp, t))
    finally:
        g.close()
    return res


def tide_phases(tidetest, a, script, tmp, rng, g, js, jsg, tp, t):
    import grpc
    res = {}
    with tidetest.Cluster("bench-jobs") as c:
        c.start_scheduler()
        for i in range(a.workers):
            c.start_worker(f"n{i // 8}", i % 8)
        c.wait_workers(a.workers, timeout=60)
        for p in [c.sched, *c.workers.values()]:
            g.add(p.pid)
        say(f"tide: scheduler + {a.workers} workers up in {time.monotonic() - t:.1f} s")
        w = Watch(c, (js, jsg))
        ch = grpc.insecure_channel(c.addr)
        stub = jsg.JobServiceStub(ch)
        md = [("authorization", f"Bearer {c.token}")]
        try:
            req = js.SubmitJobRequest(spec=tp.JobSpec(name="true", command=["true"], min_workers=1, max_workers=1))
            ids, pending = [], []
            u0 = g.usage()
            t0 = time.time()
            for _ in range(a.jobs):
                pending.append(stub.SubmitJob.future(req, metadata=md, timeout=120))
                if len(pending) >= 64:
                    ids.append(pending.pop(0).result().id)
            ids += [f.result().id for f in pending]
            t_sub = time.time()
            t_end = w.wait(ids, 600)
            cpu = cpu_per_job(g, u0, a.jobs)
            rate = a.jobs / (t_end - t0)
            say(f"  tide: {a.jobs} jobs submitted in {t_sub - t0:.2f} s ({a.jobs / (t_sub - t0):.0f}/s), all "
                f"succeeded after {t_end - t0:.2f} s: {rate:.1f} jobs/s" +
                (f"; daemons + jobs used {cpu['cpu_ms_per_job']:.1f} ms CPU per job" if cpu else ""))
            res["tide"] = {"jobs": a.jobs, "jobs_per_s": rate, "submit_s": t_sub - t0, "total_s": t_end - t0, **cpu}
            lat, ack = [], []
            for i in range(a.idle_rounds):
                time.sleep(rng.random())  # the same de-phasing pause as for Slurm
                out = os.path.join(tmp, f"tide-{i}")
                r = js.SubmitJobRequest(spec=tp.JobSpec(name="stamp", command=[script, out], min_workers=1,
                                                        max_workers=1))
                t0 = time.time()
                jid = stub.SubmitJob(r, metadata=md, timeout=30).id
                t1 = time.time()
                lat.append(wait_stamp(out, 60) - t0)
                ack.append(t1 - t0)
                w.wait([jid], 60)
            say(f"  tide: idle submit -> running over {len(lat)} rounds: median "
                f"{statistics.median(lat) * 1e3:.1f} ms, p90 {pct(lat, 90) * 1e3:.1f} ms (SubmitJob itself: median "
                f"{statistics.median(ack) * 1e3:.1f} ms)")
            res["tide"].update({"idle_median_ms": statistics.median(lat) * 1e3, "idle_p90_ms": pct(lat, 90) * 1e3,
                                "submit_ack_ms": statistics.median(ack) * 1e3})
        finally:
            ch.close()
            w.close()
    return res


# ------------------------------------------------------------------------------------------------ main

def header(a):
    def cmd(*argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=SRC).stdout.strip()
        except OSError:
            return "?"
    commit = cmd("git", "rev-parse", "--short", "HEAD") or "?"
    dirty = " (+ uncommitted changes)" if cmd("git", "status", "--porcelain", "--untracked-files=no") else ""
    slurm = cmd("dpkg-query", "-W", "-f", "${Version}", "slurm-wlm") or "not installed"
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    say(f"jobs vs Slurm at {commit}{dirty}, {os.uname().nodename}: {os.cpu_count()} cores, load {load}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, slurm-wlm {slurm}")
    say(f"command: {' '.join(sys.argv)}")
    return commit


def table(res, a):
    rows = [k for k in ("slurm-default", "slurm-tuned", "slurm-tuned-srun", "slurm-tuned-array", "tide") if k in res]
    say("")  # a markdown table (bench/run.py keeps it one on docs/performance.md)
    say("| system | jobs | jobs/s | CPU ms per job | idle submit->running median ms | p90 ms | submit call ms |")
    say("|---|---|---|---|---|---|---|")
    for k in rows:
        r = res[k]
        cell = (lambda key, fmt: format(r[key], fmt) if key in r else "-")
        say(f"| {k} | {r.get('jobs', '-')} | {cell('jobs_per_s', '.1f')} | {cell('cpu_ms_per_job', '.1f')} | "
            f"{cell('idle_median_ms', '.1f')} | {cell('idle_p90_ms', '.1f')} | {cell('submit_ack_ms', '.1f')} |")
    say("")
    if "tide" in res:
        t = res["tide"]
        # the targets (issue 11) are judged against the tuned Slurm: >= 10x its jobs/s, >= 20x lower idle latency
        for k in ("slurm-default", "slurm-tuned", "slurm-tuned-srun"):
            if k not in res:
                continue
            tgt = k == "slurm-tuned"
            parts = []
            if "jobs_per_s" in res[k]:
                x = t["jobs_per_s"] / res[k]["jobs_per_s"]
                parts.append(f"{x:.1f}x the jobs/s" + (f" (target >= 10x: {'met' if x >= 10 else 'NOT met'})"
                                                        if tgt else ""))
            x = res[k]["idle_median_ms"] / t["idle_median_ms"]
            parts.append(f"{x:.1f}x lower median idle latency" + (f" (target >= 20x: {'met' if x >= 20 else 'NOT met'})"
                                                                   if tgt else ""))
            parts.append(f"{res[k]['idle_p90_ms'] / t['idle_p90_ms']:.1f}x lower p90")
            say(f"tide vs {k}: " + ", ".join(parts))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("system,jobs,workers,jobs_per_s,submit_s,total_s,cpu_ms_per_job,idle_rounds,idle_median_ms,"
                    "idle_p90_ms,submit_ack_ms\n")
            for k in rows:
                r = res[k]
                f.write(",".join([k, str(r.get("jobs", "")), str(a.workers)] +
                                 [f"{r[x]:.3f}" if x in r else "" for x in ("jobs_per_s", "submit_s", "total_s",
                                                                            "cpu_ms_per_job")] +
                                 [str(a.idle_rounds) if "idle_median_ms" in r else ""] +
                                 [f"{r[x]:.3f}" if x in r else "" for x in ("idle_median_ms", "idle_p90_ms",
                                                                            "submit_ack_ms")]) + "\n")
        say(f"(CSV in {a.csv})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(SRC, "build"), help="the tide build directory (bin/ inside)")
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--default-jobs", type=int, default=300,
                   help="jobs of the throughput run in Slurm's default configuration (at ~7 jobs/s, 1000 take "
                        "~140 s: over the run's budget)")
    p.add_argument("--workers", type=int, default=16, help="tide workers = Slurm's declared CPUs")
    p.add_argument("--idle-rounds", type=int, default=20)
    p.add_argument("--csv")
    p.add_argument("--only", default="slurm-default,slurm-tuned,tide")
    p.add_argument("--array", action="store_true", help="also one Slurm job array (tuned configuration)")
    p.add_argument("--no-srun", dest="srun", action="store_false",
                   help="skip the idle rounds through srun (tuned configuration)")
    p.add_argument("--sbatch-parallel", type=int, default=4, help="sbatch processes at a time")
    p.add_argument("--poll", type=float, default=0.2, help="seconds between sdiag polls during a throughput run")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--verbose", action="store_true", help="print each slurm.conf")
    p.add_argument("--tuned-conf", action="append", metavar="LINE",
                   help="the tuned configuration's slurm.conf lines instead of TUNED (repeat)")
    a = p.parse_args()
    if a.tuned_conf:
        global TUNED
        TUNED = tuple(a.tuned_conf)
    os.environ["TIDE_BUILD_DIR"] = os.path.abspath(a.build)
    import tidetest  # noqa: E402  (reads TIDE_BUILD_DIR)
    import slurmtest  # noqa: E402
    header(a)
    only = set(a.only.split(","))
    tmp = tempfile.mkdtemp(prefix="jobs-vs-slurm-")
    os.chmod(tmp, 0o755)
    script = os.path.join(tmp, "stamp.sh")
    with open(script, "w") as f:
        f.write(STAMP)
    os.chmod(script, 0o755)
    rng = random.Random(a.seed)
    res = {}
    t = time.monotonic()
    try:
        if only & {"slurm-default", "slurm-tuned"}:
            why = slurmtest.available()
            if why:
                say(f"Slurm skipped: {why}")
            else:
                say(f"Slurm conf beside the fixture's: MinJobAge=3600 MaxJobCount=100000, node CPUs={a.workers}; "
                    f"tuned adds: {' '.join(TUNED)}")
                for tuned in (False, True):
                    if ("slurm-tuned" if tuned else "slurm-default") in only:
                        res.update(run_slurm(slurmtest, a, tuned, script, tmp, rng))
        if "tide" in only:
            res.update(run_tide(tidetest, a, script, tmp, rng))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table(res, a)
    say(f"(whole run {time.monotonic() - t:.0f} s)")


if __name__ == "__main__":
    main()
