#!/usr/bin/python3
"""Fleet load (docs/performance.md, "Fleet load"): for each size, a fresh tide-scheduler (Release build, sqlite
store in a temp dir unless --store mem) and tide-loadgen with that many simulated workers. Prints one row per size:
workers, connections, heartbeats/s sent by the loadgen in its window, the lifetime totals sent vs counted by the
scheduler (tide_heartbeats_total, scraped once after the loadgen exited: a /metrics scrape at 100k workers is
large, so none is taken while measuring), PING RTT p50/p99/max, scheduler CPU over the window (utime+stime from
/proc/PID/stat, % of one core) and the time it was runnable but waiting for a CPU (/proc/PID/task/*/schedstat, % of
the window: how much the machine's other load held it back), the loadgen's own CPU, scheduler RSS after registration and per worker
((RSS_after - RSS_before)/N, KiB), and registration time. Nothing is pinned: both share the machine's cores.

usage: bench/fleet.py BUILD [SIZES ...] [--csv FILE] [--store sqlite|mem] [--duration-s 30] [--warmup-s 5]
                      [--perf-dir DIR] [--keep-logs DIR] [--sched-arg=ARG ...] [--loadgen-arg=ARG ...]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def proc_runq_wait_s(pid):
    """Seconds the process's threads spent runnable but waiting for a CPU (/proc/PID/task/*/schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except OSError:
            pass
    return total / 1e9


def proc_rss_kib(pid, key="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def http_get(addr, path, timeout=120):
    return urllib.request.urlopen(f"http://{addr}{path}", timeout=timeout).read().decode()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def run_size(args, n, tmp):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    data = os.path.join(tmp, f"sched-{n}")
    os.makedirs(data)
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("fleet-bench-token-0123456789\n")
    os.chmod(token, 0o600)
    store = f"sqlite:{data}/state.db" if args.store == "sqlite" else "mem:"
    log = open(os.path.join(tmp, f"sched-{n}.log"), "w")
    sched = subprocess.Popen([os.path.join(args.build, "bin", "tide-scheduler"), "--listen", addr, "--data-dir", data,
                              "--store", store, "--token-file", token] + args.sched_arg, stdout=log, stderr=subprocess.STDOUT)
    row = {"workers": n, "store": args.store}
    try:
        deadline = time.time() + 20
        while True:
            try:
                if http_get(addr, "/healthz", timeout=2).strip():
                    break
            except OSError:
                pass
            if time.time() > deadline or sched.poll() is not None:
                raise RuntimeError("tide-scheduler did not come up; see " + log.name)
            time.sleep(0.05)
        time.sleep(0.5)
        rss_before = proc_rss_kib(sched.pid)
        cmd = [os.path.join(args.build, "bin", "tide-loadgen"), "--scheduler", addr, "--token-file", token,
               "--workers", str(n), "--duration-s", str(args.duration_s), "--warmup-s", str(args.warmup_s),
               "-o", "json"] + args.loadgen_arg
        lg = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cpu0 = cpu1 = t0 = t1 = None
        rss_after = 0
        perf = None
        hb_total = None
        for line in lg.stderr:
            sys.stderr.write(f"  [{n}] {line}")
            if line.startswith("lg: window start"):
                t0, cpu0, wait0 = time.monotonic(), proc_cpu_s(sched.pid), proc_runq_wait_s(sched.pid)
                rss_after = proc_rss_kib(sched.pid)
                row["load_at_start"] = loadavg()
                if args.perf_dir and n == max(args.sizes):
                    os.makedirs(args.perf_dir, exist_ok=True)
                    pdata = os.path.join(args.perf_dir, f"perf-{n}.data")
                    perf = subprocess.Popen(["perf", "record", "-g", "-F", "499", "-o", pdata, "-p", str(sched.pid),
                                             "--", "sleep", str(max(2, int(args.duration_s) - 2))],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            elif line.startswith("lg: window end"):
                t1, cpu1, wait1 = time.monotonic(), proc_cpu_s(sched.pid), proc_runq_wait_s(sched.pid)
                row["load_at_end"] = loadavg()
            elif line.startswith("lg: heartbeats sent in all"):
                hb_total = int(line.split()[-1])
        out = lg.stdout.read()
        lg.wait()
        if perf:
            perf.wait()
        res = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        time.sleep(1.0)  # the scheduler reads what was still in its sockets
        ts = time.monotonic()
        try:
            text = http_get(addr, "/metrics")
        except OSError as e:
            sys.stderr.write(f"  [{n}] /metrics: {e}\n")
            text = ""
        row["metrics_scrape_s"] = round(time.monotonic() - ts, 3)
        row["metrics_bytes"] = len(text)
        counted = metric(text, "tide_heartbeats_total")
        row.update({
            "connections": res.get("connections"),
            "registration_s": res.get("registration_s"),
            "welcomed": res.get("welcomed"),
            "hb_per_s_sent": res.get("heartbeats_per_s"),
            "hb_total_sent": hb_total,
            "hb_total_counted": int(counted) if counted is not None else None,
            "skipped": (res.get("skipped_inflight", 0) + res.get("skipped_window", 0) + res.get("skipped_notready", 0)),
            "rtt_p50_ms": res.get("rtt_p50_ms"), "rtt_p99_ms": res.get("rtt_p99_ms"),
            "rtt_max_ms": res.get("rtt_max_ms"), "ping_samples": res.get("ping_samples"), "pings_open_at_end": res.get("pings_open_at_end"),
            "ping_missed": res.get("ping_missed"),
            "sched_cpu_pct": round(100.0 * (cpu1 - cpu0) / (t1 - t0), 1) if t1 else None,
            "sched_runq_wait_pct": round(100.0 * (wait1 - wait0) / (t1 - t0), 1) if t1 else None,
            "loadgen_cpu_pct": res.get("loadgen_cpu_pct"),
            "rss_before_kib": rss_before, "rss_after_kib": rss_after,
            "rss_per_worker_kib": round((rss_after - rss_before) / n, 2) if rss_after else None,
            "max_tick_late_ms": res.get("max_tick_late_ms"),
            "first_error": res.get("first_error", ""),
            "loadgen_rc": lg.returncode,
        })
    finally:
        sched.send_signal(signal.SIGTERM)
        try:
            sched.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sched.kill()
            sched.wait()
        log.close()
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
            shutil.copy(log.name, args.keep_logs)
    return row


COLS = [("workers", "workers", "{}"), ("connections", "conns", "{}"), ("hb_per_s_sent", "hb/s sent", "{:.0f}"),
        ("hb_total_sent", "total sent", "{}"), ("hb_total_counted", "counted", "{}"),
        ("rtt_p50_ms", "p50 ms", "{:.2f}"), ("rtt_p99_ms", "p99 ms", "{:.2f}"), ("rtt_max_ms", "max ms", "{:.2f}"),
        ("skipped", "skipped", "{}"),
        ("sched_cpu_pct", "sched CPU%", "{:.1f}"),
        ("sched_runq_wait_pct", "sched waits for CPU%", "{:.1f}"), ("loadgen_cpu_pct", "lg CPU%", "{:.1f}"),
        ("rss_after_kib", "RSS KiB", "{}"), ("rss_per_worker_kib", "KiB/worker", "{:.2f}"),
        ("registration_s", "reg s", "{:.2f}"), ("metrics_scrape_s", "/metrics s", "{:.2f}"),
        ("load_at_start", "load avg", "{}")]


def fmt(row, key, f):
    v = row.get(key)
    return "-" if v is None else f.format(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("sizes", nargs="*", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--csv")
    ap.add_argument("--store", choices=["sqlite", "mem"], default="sqlite")
    ap.add_argument("--duration-s", type=float, default=30)
    ap.add_argument("--warmup-s", type=float, default=5)
    ap.add_argument("--perf-dir", help="perf record -g the scheduler during the largest size's window")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy each scheduler's log here")
    ap.add_argument("--sched-arg", action="append", default=[], help="extra tide-scheduler argument (repeatable)")
    ap.add_argument("--loadgen-arg", action="append", default=[], help="extra tide-loadgen argument (repeatable)")
    args = ap.parse_args()
    if not args.sizes:
        args.sizes = [1000, 10000, 100000]
    tmp = tempfile.mkdtemp(prefix="tide-fleet-")
    rows = []
    try:
        for n in args.sizes:
            rows.append(run_size(args, n, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| " + " | ".join(h for _, h, _ in COLS) + " |")
    print("|" + "---|" * len(COLS))
    for r in rows:
        print("| " + " | ".join(fmt(r, k, f) for k, _, f in COLS) + " |")
        if r.get("first_error") or r.get("loadgen_rc"):
            print(f"  ({r['workers']}: loadgen rc {r.get('loadgen_rc')}, first error: {r.get('first_error')})")
    if args.csv:
        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w") as f:
            f.write(",".join(keys) + "\n")
            for r in rows:
                f.write(",".join(str(r.get(k, "")).replace(",", ";") for k in keys) + "\n")
    return 0 if all(r.get("loadgen_rc") == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
