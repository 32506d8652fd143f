#!/usr/bin/env python3
"""Runs tide-sim over the values of one scenario key and several seeds, and prints the mean (and the
standard deviation over seeds) of the main figures per value (docs/simulator.md, "Sweeps").

  sweep.py [--sim BUILD/bin/tide-sim] [--seeds N] [-j JOBS] [--set PATH=VALUE]... [--csv FILE]
           SCENARIO.json PATH=V1,V2,...

Example: sweep.py --seeds 3 scenarios/cluster-16k-30d.json policy.reserve='"auto"',0,64,512
         sweep.py scenarios/cluster-16k-30d.json gate.enabled=true,false
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def find_sim():
    root = os.path.dirname(os.path.dirname(HERE))
    for d in ("build-sim-rel", "build-rel", "build", "build-sim"):
        p = os.path.join(root, d, "bin", "tide-sim")
        if os.access(p, os.X_OK):
            return p
    return "tide-sim"


# (label, how to read it from tide-sim -o json, format)
FIGURES = [
    ("goodput", lambda d: d["goodput"] * 100, "%.2f%%"),
    ("eff_mfu", lambda d: d["effective_mfu"] * 100, "%.2f%%"),
    ("mfu", lambda d: d["cluster_mfu"]["mean"] * 100, "%.2f%%"),
    ("alloc", lambda d: d["allocated_share"] * 100, "%.1f%%"),
    ("reserve", lambda d: d["reserve_gpus"]["mean"], "%.0f"),
    ("lost_gpu_h", lambda d: d["lost_gpu_hours"]["total"], "%.0f"),
    ("lost_fail", lambda d: d["lost_gpu_hours"]["failures"], "%.0f"),
    ("durable_TB", lambda d: d["durable_bytes"] / 1e12, "%.0f"),
    ("held", lambda d: d["copies_held"], "%.0f"),
    ("copy_wait_s", lambda d: d["copy_wait_s"]["mean"], "%.0f"),
    ("ckpt_age_min", lambda d: d["durable_age_at_failure_s"] / 60, "%.1f"),
    ("failures", lambda d: d["failures"], "%.0f"),
    ("preempt", lambda d: d["preemptions"], "%.0f"),
]


def class_figures(d):
    out = []
    for c in d["classes"]:
        n = c["name"]
        out.append(("%s_delay_h" % n, c["queue_delay_s"]["mean"] / 3600, "%.2f"))
        out.append(("%s_p95_h" % n, c["queue_delay_s"]["p95"] / 3600, "%.2f"))
        out.append(("%s_restart_min" % n, c["restart_delay_s"]["mean"] / 60, "%.1f"))
        out.append(("%s_lost_gpu_h" % n, c["lost_gpu_hours"], "%.0f"))
    return out


def run(sim, scenario, sets, seed):
    cmd = [sim, scenario, "-q", "-o", "json", "--seed", str(seed)]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("tide-sim failed (%s): %s" % (" ".join(cmd), p.stderr.strip()))
    return json.loads(p.stdout)


def mean_sd(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("vary", help="PATH=V1,V2,... (each value is JSON, else a string)")
    ap.add_argument("--sim", default=None)
    ap.add_argument("--seeds", type=int, default=1, help="seeds 1..N (default 1)")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="a fixed override, as tide-sim --set")
    ap.add_argument("--csv", help="also write the table as CSV")
    a = ap.parse_args()
    if "=" not in a.vary:
        ap.error("expected PATH=V1,V2,...")
    key, values = a.vary.split("=", 1)
    values = values.split(",")
    sim = a.sim or find_sim()
    tasks = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        for v in values:
            for seed in range(1, a.seeds + 1):
                tasks[(v, seed)] = ex.submit(run, sim, a.scenario, a.set + ["%s=%s" % (key, v)], seed)
    rows = []
    header = None
    for v in values:
        ds = [tasks[(v, s)].result() for s in range(1, a.seeds + 1)]
        figs = [(name, [f(d) for d in ds], fmt) for name, f, fmt in FIGURES]
        per_class = [class_figures(d) for d in ds]
        for i, (name, _, fmt) in enumerate(per_class[0]):
            figs.append((name, [pc[i][1] for pc in per_class], fmt))
        if header is None:
            header = [key] + [n for n, _, _ in figs]
        row = [v]
        for name, xs, fmt in figs:
            m, sd = mean_sd(xs)
            row.append(fmt % m + ("" if a.seeds == 1 else " ±" + (fmt % sd).rstrip("%")))
        rows.append(row)
    # Transposed: one figure per line, one column per value (values are few, figures many).
    width = max(len(h) for h in header)
    colw = [max(len(r[i]) for r in rows) for i in range(len(header))]
    cw = max(max(len(str(r[0])) for r in rows), max(colw[1:]))
    print("%-*s  %s" % (width, header[0], "  ".join("%*s" % (cw, r[0]) for r in rows)))
    for i in range(1, len(header)):
        print("%-*s  %s" % (width, header[i], "  ".join("%*s" % (cw, r[i]) for r in rows)))
    print("(%s; %d seed%s each%s)" % (os.path.basename(a.scenario), a.seeds, "" if a.seeds == 1 else "s",
                                       "; mean ±sd" if a.seeds > 1 else ""))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write(",".join(header) + "\n")
            for r in rows:
                f.write(",".join('"%s"' % x for x in r) + "\n")


if __name__ == "__main__":
    main()
