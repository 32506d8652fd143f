#!/usr/bin/env python3
"""The goodput study (docs/goodput.md): 16,384 GPUs for 54 simulated days under Llama 3's failure statistics and
under the article's, with no reserve, a fixed reserve and tide's policies; then one experiment per claim of the
article, on the scaled twin (goodput-1k.json: the same big run's failures, restarts and lost work at 1/16 the cost)
and with `tide-sim steal` / `tide-sim burst`. Prints markdown tables, mean +- sd over seeds.

  bench/goodput.py [--sim BUILD/bin/tide-sim] [--seeds N] [-j JOBS] [--quick] [--json FILE] [--only GROUP,...]

--quick: one seed, the 16k matrix with only "tide (auto reserve)", the 5-minute checkpoint runs left out: ~65
CPU-seconds, ~40 s with -j 2 on an idle 2-core machine (the full study: ~430 CPU-seconds, ~4 min). --json writes
every run's figures. Effective training time (ETT) is the big run's share of the wall time that made progress it
kept (tide-sim's per-class `effective_training_time`; docs/simulator.md).
"""
import argparse
import concurrent.futures
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCEN = os.path.join(ROOT, "scheduler", "sim", "scenarios")
S16 = os.path.join(SCEN, "goodput-16k.json")
S1K = os.path.join(SCEN, "goodput-1k.json")

# Failure models: Llama 3 (419 in 54 days on 16,384 GPUs: the scenarios' default) and the article (3 a month per
# 1,000 GPUs; the 1k twin's GPUs fail 16x as often, so its big run sees what the 16k one does).
MODELS = {
    "llama3": {"16k": [], "1k": []},
    "article": {"16k": ["faults.per_1000_gpu_month=3"], "1k": ["faults.per_1000_gpu_month=48"]},
}
NO_FAULTS = "faults.per_1000_gpu_month=0"
# A system without tide's mechanisms: the durable copy starts at once (no gate), only the durable copy survives a
# failure (no mirrored hot tier), failures are not predicted, checkpoints only on the trainer's own schedule (no
# cadence).
NO_CADENCE = "policy.checkpoint_interval_min=0"
PLAIN = ["gate.enabled=false", "storage.mirrored_hot_tier=false", "faults.precursor.predict=false", NO_CADENCE]


def find_sim():
    for d in ("build-gp", "build-sim-rel", "build-rel", "build", "build-sim"):
        p = os.path.join(ROOT, d, "bin", "tide-sim")
        if os.access(p, os.X_OK):
            return p
    return "tide-sim"


def experiments(quick):
    """(group, label, scenario, sets) for every configuration of the study."""
    ex = []
    # 1. The headline matrix at 16k.
    pol16 = [
        ("none", ["policy.reserve=0"] + PLAIN),
        ("fixed reserve 64", ["policy.reserve=64"] + PLAIN),
        ("tide (auto reserve)", []),
        ("tide (auto reserve, no cadence)", [NO_CADENCE]),
        ("tide (reserve 64, ckpt 5 min)", ["policy.reserve=64", "workload.classes[0].checkpoint.every_min=5"]),
    ]
    if quick:
        pol16 = [pol16[2]]
    for m, sets in MODELS.items():
        for label, ps in pol16:
            ex.append(("16k", "%s | %s" % (m, label), S16, sets["16k"] + ps))
    if not quick:
        ex.append(("16k", "no failures | tide (auto reserve)", S16, [NO_FAULTS]))
    # 2. The 1k twin: the same policies (a check that the twin reproduces the 16k figures).
    for m, sets in MODELS.items():
        for label, ps in [("none", ["policy.reserve=0"] + PLAIN), ("tide (auto reserve)", []),
                          ("tide (reserve 8)", ["policy.reserve=8"])]:
            ex.append(("twin", "%s | %s" % (m, label), S1K, sets["1k"] + ps))
    ex.append(("twin", "no failures | tide (reserve 8)", S1K, [NO_FAULTS, "policy.reserve=8"]))
    # (the reference of the prediction group, which runs without the cadence)
    ex.append(("twin", "no failures | tide (reserve 8, no cadence)", S1K, [NO_FAULTS, "policy.reserve=8", NO_CADENCE]))
    # Groups 3 to 6 isolate one mechanism each and run without the checkpoint cadence (the trainer's own 30-minute
    # checkpoints), as they did before the cadence existed: their figures compare with each other.
    # 3. Prediction: on/off by the share of failures that show a precursor (tide, reserve 8, so a move finds a
    # free GPU); and with the auto reserve.
    for m in MODELS:
        for frac in (0.25, 0.5, 0.75, 1.0):
            for pred in ("false", "true"):
                ex.append(("predict", "%s | precursors %.0f%% | predict %s" % (m, frac * 100, pred), S1K,
                           MODELS[m]["1k"] + ["policy.reserve=8", "faults.precursor.fraction=%g" % frac,
                                              "faults.precursor.predict=" + pred, NO_CADENCE]))
        ex.append(("predict", "%s | precursors 50%% | predict true, auto reserve" % m, S1K,
                   MODELS[m]["1k"] + [NO_CADENCE]))
    # 4. The MFU gate: durable copies of 4 GB per GPU (32 s each at 0.125 GB/s) so copy interference shows; the big
    # run has an evaluation phase (MFU 10 %) of 10 min every 4 h, the low-MFU window the gate waits for.
    gate_base = [NO_CADENCE, "policy.reserve=8", "workload.classes[0].checkpoint.gb_per_gpu=4",
                 'workload.classes[0].eval={"every_min": 240, "duration_min": 10, "mfu": 0.1}']
    for mirror in ("true", "false"):
        ex.append(("gate", "mirror %s | gate off" % mirror, S1K,
                   gate_base + ["storage.mirrored_hot_tier=" + mirror, "gate.enabled=false"]))
        for thr in (0.1, 0.3, 0.5):
            ex.append(("gate", "mirror %s | gate on, MFU < %.0f%%" % (mirror, thr * 100), S1K,
                       gate_base + ["storage.mirrored_hot_tier=" + mirror, "gate.mfu_threshold=%g" % thr]))
    # 5. Headroom: the reserve, half the cluster left idle, and load headroom for the pulses (Llama 3's rate).
    for label, ps in [("reserve 0", ["policy.reserve=0"]), ("reserve 8", ["policy.reserve=8"]),
                      ("reserve 64", ["policy.reserve=64"]), ("reserve auto", []),
                      ("50% of the cluster idle (run on 504 GPUs, reserve 8)",
                       ["policy.reserve=8", "workload.classes[0].gpus=504"]),
                      ("base load 0.20 (pulses fit: 5 x 0.2 = 1)",
                       ["policy.reserve=8", "workload.classes[0].base_load=0.2"]),
                      ("base load 0.40", ["policy.reserve=8", "workload.classes[0].base_load=0.4"])]:
        ex.append(("headroom", label, S1K, ps + [NO_CADENCE]))
    # 6. MFU 80 % -> 90 %: the same run at the base loads that give training MFU 0.80 and 0.90 (pulses included:
    # MFU = 140 / (90 / L + 50)), on mature GPUs and on new-arch GPUs whose failure rate grows with MFU (the
    # article: 3x at 70 % vs 50 %), the article's rate.
    for arch in ("false", "true"):
        for mfu, load in (("80%", 0.72), ("90%", 0.852632)):
            ex.append(("mfu", "new-arch %s | MFU %s" % (arch, mfu), S1K,
                       MODELS["article"]["1k"] + ["policy.reserve=8", "cluster.groups[0].new_arch=" + arch,
                                                  "workload.classes[0].base_load=%g" % load, NO_CADENCE]))
    # 7. Checkpoint interval (tide, reserve 8): what reaching 97 % takes. The trainer's own schedule (every 30 min)
    # with tide's cadence off, then the cadence at 15, 10 (the default) and 5 minutes.
    for m in MODELS:
        ex.append(("ckpt", "%s | trainer every 30 min, no cadence" % m, S1K,
                   MODELS[m]["1k"] + ["policy.reserve=8", NO_CADENCE]))
        for every in ((10,) if quick else (15, 10, 5)):
            ex.append(("ckpt", "%s | cadence %d min" % (m, every), S1K,
                       MODELS[m]["1k"] + ["policy.reserve=8", "policy.checkpoint_interval_min=%d" % every]))
    return ex


def run_sim(sim, scenario, sets, seed):
    cmd = [sim, scenario, "-q", "-o", "json", "--seed", str(seed)]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("tide-sim failed (%s): %s" % (" ".join(cmd), p.stderr.strip()))
    d = json.loads(p.stdout)
    d["_wall_s"] = time.time() - t0
    return d


def figures(d):
    big = d["classes"][0]
    return {
        "ett": big["effective_training_time"] * 100,
        "goodput": d["goodput"] * 100,
        "eff_mfu": d["effective_mfu"] * 100,
        "failures": d["failures"],
        "restarts": big["requeues"],
        "moves": d["moves"],
        "lost_fail_h": d["lost_gpu_hours"]["failures"] * d.get("_x16", 1),
        "lost_prec_h": d["lost_gpu_hours"]["failures_with_precursor"],
        "lost_move_h": d["lost_gpu_hours"]["moves"],
        "interf_h": d["gpu_hours"]["copy_interference"],
        "start_h": d["gpu_hours"]["starting"],
        "age_min": d["durable_age_at_failure_s"] / 60,
        "held": d["copies_held"],
        "reserve": d["reserve_gpus"]["mean"],
        "low_done": d["classes"][1]["finished"] if len(d["classes"]) > 1 else 0,
        "low_gpu_h": d["classes"][1]["retained_gpu_hours"] if len(d["classes"]) > 1 else 0,
    }


def mean_sd(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def fmt(xs, f="%.2f"):
    m, sd = mean_sd(xs)
    return (f % m) + ("" if len(xs) == 1 else " ± " + (f % sd))


STEAL_CASES = ((0.05, 0.0), (0.10, 0.0), (0.10, 0.02))
STEAL_RE = re.compile(r"^(stealing|no stealing)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)%\s+(\S+)%\s+(\S+)%")


def run_steal(sim, noise, hiccup, seed):
    cmd = [sim, "steal", "--noise", str(noise), "--hiccup", str(hiccup), "--seed", str(seed)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    r = {}
    for line in out.splitlines():
        m = STEAL_RE.match(line)
        if m:
            r[m.group(1)] = {"step_mean_ms": float(m.group(4)), "mfu": float(m.group(5)),
                             "p5": float(m.group(6)), "p95": float(m.group(7))}
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim", default=None)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N (default 3; --quick: 1)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="groups to run: 16k,twin,predict,gate,headroom,mfu,ckpt,steal,burst")
    ap.add_argument("--json", help="write every run's figures here")
    a = ap.parse_args()
    sim = a.sim or find_sim()
    seeds = 1 if a.quick and a.seeds == 3 else a.seeds
    only = set(x for x in a.only.split(",") if x)
    t0 = time.time()
    exps = [e for e in experiments(a.quick) if not only or e[0] in only]
    # The 16k runs first: the longest ones, so both workers stay busy to the end.
    # The run without failures differs between seeds only in the LOW experiments: one seed.
    order = sorted(((e, s) for e in exps for s in range(1, seeds + 1) if s == 1 or e[0] != "16k" or
                    not e[1].startswith("no failures")), key=lambda es: es[0][2] != S16)
    futs = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for (g, label, sc, sets), seed in order:
            futs[(g, label, seed)] = pool.submit(run_sim, sim, sc, sets, seed)
        steal = {}
        if not only or "steal" in only:
            for noise, hic in STEAL_CASES:
                for seed in range(1, seeds + 1):
                    steal[(noise, hic, seed)] = pool.submit(run_steal, sim, noise, hic, seed)
        burst = {}
        if not only or "burst" in only:
            for pct in (20, 50, 100):
                burst[pct] = pool.submit(subprocess.run, [sim, "burst", "-o", "json", "--percent", str(pct)],
                                         capture_output=True, text=True, check=True)
    res = {}
    for (g, label, seed), f in futs.items():
        res.setdefault((g, label), []).append(f.result())

    def table(group, cols, title):
        rows = [(label, ds) for (g, label), ds in res.items() if g == group]
        if not rows:
            return
        rows.sort(key=lambda r: [i for i, e in enumerate(exps) if e[0] == group and e[1] == r[0]][0])
        print("\n### %s\n" % title)
        print("| configuration | " + " | ".join(c[0] for c in cols) + " |")
        print("| --- |" + " ---: |" * len(cols))
        for label, ds in rows:
            fs = [figures(d) for d in ds]
            print("| %s | %s |" % (label.replace(" | ", "; "),
                                   " | ".join(fmt([f[c[1]] for f in fs], c[2]) for c in cols)))

    print("# tide goodput study: %s; %d seed(s) each; mean ± sd over seeds" % (
        "quick" if a.quick else "full", seeds))
    table("16k", [("ETT %", "ett", "%.2f"), ("goodput %", "goodput", "%.2f"), ("failures", "failures", "%.0f"),
                  ("restarts", "restarts", "%.0f"), ("moves", "moves", "%.0f"),
                  ("lost to failures, GPU-h", "lost_fail_h", "%.0f"), ("starting, GPU-h", "start_h", "%.0f"),
                  ("reserve", "reserve", "%.0f"), ("LOW GPU-h", "low_gpu_h", "%.0f")],
          "16,384 GPUs x 54 days (goodput-16k.json): effective training time of the 16,128-GPU run")
    for (g, label), ds in res.items():
        if g == "twin":
            for d in ds:
                d["_x16"] = 16
    table("twin", [("ETT %", "ett", "%.2f"), ("failures", "failures", "%.0f"), ("restarts", "restarts", "%.0f"),
                   ("moves", "moves", "%.0f"), ("lost to failures, GPU-h x16", "lost_fail_h", "%.0f")],
          "The 1k twin (goodput-1k.json) under the same policies (lost GPU-hours x16 compare with the 16k table)")
    table("predict", [("ETT %", "ett", "%.2f"), ("moves", "moves", "%.0f"),
                      ("lost to failures, GPU-h", "lost_fail_h", "%.0f"),
                      ("of which with a precursor", "lost_prec_h", "%.0f"), ("lost in moves", "lost_move_h", "%.1f")],
          "Prediction on/off (1k twin, tide with reserve 8)")
    # Interruption time: the ETT lost against the same policy without failures (no cadence, as the group runs).
    ideal = res.get(("twin", "no failures | tide (reserve 8, no cadence)"))
    if ideal:
        ide = mean_sd([figures(d)["ett"] for d in ideal])[0]
        print("\nInterruption time (ETT without failures %.3f %% minus ETT), per seed pair, and its reduction:\n" % ide)
        print("| failure model | precursors | interruption, predict off (% of wall) | on | reduction |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for m in MODELS:
            for frac in (0.25, 0.5, 0.75, 1.0):
                off = res.get(("predict", "%s | precursors %.0f%% | predict false" % (m, frac * 100)))
                on = res.get(("predict", "%s | precursors %.0f%% | predict true" % (m, frac * 100)))
                if not off or not on:
                    continue
                io = [ide - figures(d)["ett"] for d in off]
                inn = [ide - figures(d)["ett"] for d in on]
                red = [100 * (1 - b / x) for x, b in zip(io, inn)]
                print("| %s | %.0f %% | %s | %s | %s %% |" % (m, frac * 100, fmt(io, "%.2f"), fmt(inn, "%.2f"),
                                                               fmt(red, "%.0f")))
    table("gate", [("ETT %", "ett", "%.3f"), ("copy interference, GPU-h", "interf_h", "%.0f"),
                   ("copies held", "held", "%.0f"), ("durable age at a failure, min", "age_min", "%.1f"),
                   ("lost to failures, GPU-h", "lost_fail_h", "%.0f")],
          "The MFU gate (1k twin, Llama 3's rate, 4 GB per GPU, an evaluation phase every 4 h)")
    table("headroom", [("ETT %", "ett", "%.2f"), ("effective MFU %", "eff_mfu", "%.2f"),
                       ("goodput %", "goodput", "%.2f"), ("reserve", "reserve", "%.0f"),
                       ("moves", "moves", "%.0f"), ("LOW jobs done", "low_done", "%.0f")],
          "Headroom (1k twin, Llama 3's rate)")
    table("mfu", [("ETT %", "ett", "%.2f"), ("effective MFU %", "eff_mfu", "%.2f"), ("failures", "failures", "%.0f"),
                  ("lost to failures, GPU-h", "lost_fail_h", "%.0f")],
          "MFU 80 % vs 90 % (1k twin, the article's rate)")
    for arch in ("false", "true"):
        lo = res.get(("mfu", "new-arch %s | MFU 80%%" % arch))
        hi = res.get(("mfu", "new-arch %s | MFU 90%%" % arch))
        if lo and hi:
            sp = [100 * (figures(h)["eff_mfu"] / figures(l)["eff_mfu"] - 1) for l, h in zip(lo, hi)]
            print("\nnew-arch %s: progress (effective MFU) at MFU 90 %% vs 80 %%: %s %%" % (arch, fmt(sp, "%+.1f")))
    table("ckpt", [("ETT %", "ett", "%.2f"), ("lost to failures, GPU-h", "lost_fail_h", "%.0f"),
                   ("moves", "moves", "%.0f")],
          "Checkpoint interval (1k twin, tide with reserve 8; the trainer saves every 30 min, tide's cadence asks "
          "in between; a local save stalls 0.11 s)")
    if steal:
        print("\n### Work stealing (tide-sim steal: 64 ranks x 16 micro-batches, 200 steps)\n")
        print("| speed noise, hiccups | mode | MFU mean % | MFU p5 vs mean % | MFU p95 vs mean % |")
        print("| --- | --- | ---: | ---: | ---: |")
        for noise, hic in STEAL_CASES:
            rs = [steal[(noise, hic, s)].result() for s in range(1, seeds + 1)]
            for mode in ("no stealing", "stealing"):
                print("| σ %.2f, %.0f %% | %s | %s | %s | %s |" % (
                    noise, hic * 100, mode, fmt([r[mode]["mfu"] for r in rs], "%.1f"),
                    fmt([r[mode]["p5"] for r in rs], "%+.1f"), fmt([r[mode]["p95"] for r in rs], "%+.1f")))
    if burst:
        print("\n### Burst (tide-sim burst: 64 ranks, a 10 s pulse at 5x every 28 s, a change costs 3.26 s)\n")
        print("| ranks lent | mode | wall vs off % | lent GPU-s | goodput |")
        print("| ---: | --- | ---: | ---: | ---: |")
        for pct, f in burst.items():
            b = json.loads(f.result().stdout)
            for mode in ("detached", "resize"):
                print("| %d %% | %s | %+.1f | %.0f | %.3f |" % (pct, mode, 100 * b[mode]["vs_off"],
                                                            b[mode]["lent_gpu_s"], b[mode]["goodput"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"%s | %s" % k: [figures(d) for d in ds] for k, ds in res.items()}, f, indent=1)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "scheduler"], capture_output=True,
                           text=True).stdout.strip()
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print("\n(%d simulator runs, %.0f s of CPU, %.0f s wall with -j %d; commit %s%s; %s, %d CPUs, load average "
          "%.1f at the end; %s)" % (
        sum(len(v) for v in res.values()), cpu.ru_utime + cpu.ru_stime, time.time() - t0, a.jobs, commit,
        " + uncommitted changes in scheduler/" if dirty else "", platform.platform(), os.cpu_count(),
        os.getloadavg()[0], sim))


if __name__ == "__main__":
    main()
