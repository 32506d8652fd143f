#!/usr/bin/python3
"""make bench: runs every benchmark in bench/ against a release build, one after the other, and rewrites the
measured blocks of docs/performance.md (tables, and PNG plots drawn with gnuplot into docs/img/) with the command
that reproduces each, the commit and the machine. Benchmarks never decide `make test`; one that fails or times out
is reported as such on the page and in the exit status.

    /usr/bin/python3 bench/run.py [--build BUILD] [--only a,b] [--skip a,b] [--list] [--no-doc]

Each benchmark's stdout is kept in BUILD/bench-results/NAME.out (stderr in NAME.err). On the page, its markdown
tables (lines starting with '|') stay tables and any other lines go in a code block, between the markers
<!-- bench:NAME start --> and <!-- bench:NAME end --> (a benchmark without markers gets a section at the end)."""

import argparse
import csv
import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"


class Bench:
    def __init__(self, name, title, cmd, timeout, needs=(), plot=None, note=""):
        self.name, self.title, self.cmd, self.timeout = name, title, cmd, timeout
        self.needs = needs  # programs that must be on PATH (or paths that must exist)
        self.plot = plot    # see plot_spec below
        self.note = note


def plot_spec(title, x, ys, table=0, xlabel=None, ylabel="", logx=False, logy=False, kind="lines", csv_file=None,
              rows=None, ymin=0):
    """What to draw: columns of the benchmark's table number `table` (its markdown tables, in order), of a CSV it
    wrote ({csv} in its command), or of the rows that rows(stdout) finds in its text (text_rows). x is a column,
    or a tuple of columns joined into one label. kind: "lines" (x numeric) or "bars" (x a label; a bar whose
    value is not a number, "-", is left out). ymin: the bottom of a linear y axis."""
    return dict(title=title, x=x, ys=ys, table=table, xlabel=xlabel or (x if isinstance(x, str) else ""),
                ylabel=ylabel, logx=logx, logy=logy, kind=kind, csv=csv_file, rows=rows, ymin=ymin)


def text_rows(pattern, cols):
    """A rows() for plot_spec: one row for each line of the output that matches pattern, header first; cols is
    [(header, a group name of pattern or a function of the match)]."""
    rx = re.compile(pattern)

    def rows(stdout):
        out = [[h for h, _ in cols]]
        for line in stdout.splitlines():
            m = rx.search(line)
            if m:
                out.append([str(f(m)) if callable(f) else m.group(f) for _, f in cols])
        return out
    return rows


def store_label(m):
    url = m.group("url")
    kind = "sqlite" if url.startswith("sqlite") else ("etcd, 3 members" if "," in url else "etcd, 1 member")
    return f"{kind}, {m.group('ops')} op(s)"


# The benchmarks, in the order they run. {bin} is BUILD/bin, {build} BUILD, {csv} a CSV file for the plot.
# Sizes are chosen so the whole run fits in 20 minutes on the 2-core machine; each command with larger
# arguments reproduces the deeper runs the docs quote.
BENCHES = [
    Bench("core", "Scheduler core: heartbeats, registration, ticks, jobs", "{bin}/tide-bench-core", 120,
          plot=plot_spec("Scheduler core: one heartbeat", "workers", ["heartbeat (ns each)"], logx=True,
                         ylabel="ns per heartbeat")),
    Bench("fleet", "Fleet load", "bench/fleet.py {build} 1000 10000 100000 --csv {csv}", 600,
          plot=plot_spec("Fleet load: a connection's PING round trip under the heartbeats", "workers",
                         ["p50 ms", "p99 ms"], logx=True, logy=True, ylabel="milliseconds")),
    Bench("placement", "Placement and policy", "{bin}/tide-bench-placement", 180,
          plot=plot_spec("Placement: small gangs", "small gangs (1-8 GPUs)", ["jobs/s"], kind="bars",
                         ylabel="jobs per second (log scale)", logy=True)),
    Bench("trainer", "Trainer SDK", "{bin}/tide-bench-trainer", 120,
          plot=plot_spec("Trainer SDK: cost per step", "mode", ["mean (ns/step)"], kind="bars",
                         ylabel="ns per step")),
    Bench("telemetry", "Telemetry reads", "{bin}/tide-bench-telemetry", 60,
          plot=plot_spec("Telemetry: one read", "reading", ["us"], kind="bars", ylabel="microseconds")),
    Bench("authz", "Authentication and authorisation per call", "{bin}/tide-bench-authz 10000", 120,
          plot=plot_spec("Authentication and authorisation: one call", "call", ["ns per call"], kind="bars",
                         ylabel="ns per call",
                         rows=text_rows(r"^(?P<call>[^:]+?):\s+(?P<ns>[\d.]+) ns/call",
                                        [("call", "call"), ("ns per call", "ns")]))),
    Bench("steal", "Work stealing", "bench/steal.sh {build} 2000 8 200", 300, needs=("mpirun",),
          plot=plot_spec("Work stealing: step time of 8 workers", "case", ["p50 ms", "p90 ms"], kind="bars",
                         ylabel="ms per step",
                         rows=text_rows(r"^(?P<case>\S.*?)\s+step time p50 (?P<p50>[\d.]+) ms p90 (?P<p90>[\d.]+) ms",
                                        [("case", "case"), ("p50 ms", "p50"), ("p90 ms", "p90")]))),
    Bench("worker", "Worker footprint", "bench/worker_footprint.sh {build} 20", 180, needs=("mpirun",),
          plot=plot_spec("A 4-rank MPI job of true, start to end", "run", ["median ms"], kind="bars",
                         ylabel="milliseconds",
                         rows=text_rows(r"^(?P<what>.+?):\s+median (?P<ms>\d+) ms",
                                        [("run", lambda m: "tide: submit to SUCCEEDED" if m.group("what").startswith(
                                            "MPI") else "plain mpirun on one host"), ("median ms", "ms")]))),
    Bench("detect", "Failure detection and recovery", PY + " bench/detect.py {build} 2", 300,
          plot=plot_spec("Failure detection and recovery (each round)", "case",
                         ["suspect s", "dead s", "requeued s", "running s"], kind="bars", ylabel="seconds",
                         rows=text_rows(r"^(?P<case>silent|killed|recovery|crash)\s+(?P<su>\S+)\s+(?P<de>\S+)\s+"
                                        r"(?P<rq>\S+)\s+(?P<la>\S+)\s+(?P<ru>\S+)\s*$",
                                        [("case", "case"), ("suspect s", "su"), ("dead s", "de"),
                                         ("requeued s", "rq"), ("running s", "ru")]))),
    Bench("torchrun", "Recovery side by side with torchrun",
          PY + " bench/recovery_vs_torchrun.py --build {build} --rounds 1", 420, needs=("torchrun",),
          plot=plot_spec("Recovery: seconds to training again", ("fault", "launcher"),
                         ["launcher's part", "training again"], kind="bars", ylabel="seconds")),
    Bench("resize", "Elastic scaling", "bench/resize.sh {build} 3", 240, needs=("mpirun",),
          plot=plot_spec("Elastic scaling: one resize (median)", "resize",
                         ["checkpoint s", "stop s", "start s", "total s"], kind="bars", ylabel="seconds",
                         rows=text_rows(r"^(?P<d>\d+->\d+): \d+ resizes; total median (?P<t>[\d.]+) s.*"
                                        r"checkpoint median (?P<c>[\d.]+) s.*stop median (?P<s>[\d.]+) s.*"
                                        r"start median (?P<st>[\d.]+) s",
                                        [("resize", "d"), ("checkpoint s", "c"), ("stop s", "s"), ("start s", "st"),
                                         ("total s", "t")]))),
    Bench("burst", "Burst", "bench/burst.sh {build} 1", 240, needs=("mpirun",),
          plot=plot_spec("Burst: the same job, time to finish", "burst", ["seconds"], kind="bars",
                         ylabel="seconds",
                         rows=text_rows(r"^(?P<mode>\w+) job \d+: SUCCEEDED in (?P<s>[\d.]+) s",
                                        [("burst", lambda m: "burst " + m.group("mode")), ("seconds", "s")]))),
    Bench("ckpt", "Checkpoint overhead", "bench/ckpt_overhead.sh {build} 1", 300, needs=("mpirun",),
          plot=plot_spec("Checkpoints: share of the run stalled in checkpointing", "checkpoints", ["stalled %"],
                         kind="bars", ylabel="% of the run",
                         rows=text_rows(r"^(?P<mode>\w+) job \d+: [\d.]+ steps/s, stalled (?P<st>[\d.]+) %",
                                        [("checkpoints", "mode"), ("stalled %", "st")]))),
    Bench("slurm", "Job throughput: tide and Slurm",
          PY + " bench/jobs_vs_slurm.py --build {build} --idle-rounds 12 --csv {csv}", 420, needs=("slurmctld", "munged"),
          plot=plot_spec("Job throughput (1,000 short jobs, 16 slots)", "system", ["jobs/s"], kind="bars",
                         ylabel="jobs per second")),
    Bench("goodput", "Goodput study (quick)", PY + " bench/goodput.py --sim {bin}/tide-sim --quick", 300,
          plot=plot_spec("Goodput study (quick): effective training time", "configuration", ["ETT %"], kind="bars",
                         ylabel="% of the time", ymin=90),
          note="The quick subset of docs/goodput.md's study (`bench/goodput.py` without `--quick` runs all of it, "
               "about 4 minutes on an idle machine)."),
    Bench("failover", "Scheduler failover", PY + " bench/failover.py {build} 3", 240, needs=("etcd",),
          plot=plot_spec("Scheduler failover: seconds from the signal (median)", "signal",
                         ["a standby leads", "it serves", "workers follow"], kind="bars", ylabel="seconds",
                         rows=text_rows(r"^(?P<sig>kill -9|SIGTERM)\s+leads\s+median\s+(?P<l>[\d.]+).*?"
                                        r"serves median\s+(?P<s>[\d.]+).*?workers median\s+(?P<w>[\d.]+)",
                                        [("signal", "sig"), ("a standby leads", "l"), ("it serves", "s"),
                                         ("workers follow", "w")]))),
    Bench("submit", "Submissions through a stock gRPC client", PY + " bench/submit.py {build} 1000 64", 180,
          needs=("etcd",),
          plot=plot_spec("SubmitJob from grpcio, 64 in flight", "store", ["submissions/s"], kind="bars",
                         ylabel="submissions per second",
                         rows=text_rows(r"^(?P<store>\w+)\s+one at a time:.*in flight:\s+(?P<r>\d+) submissions/s",
                                        [("store", "store"), ("submissions/s", "r")]))),
    Bench("store", "Store commits", PY + " bench/store_bench.py {build} 300", 120, needs=("etcd",),
          plot=plot_spec("Store: commits per second (ops per commit)", "store", ["commits/s"], kind="bars",
                         ylabel="commits per second",
                         rows=text_rows(r"^(?P<url>\S+) ops=(?P<ops>\d+) commits=\d+ commits/s=(?P<c>\d+)",
                                        [("store", store_label), ("commits/s", "c")]))),
]


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def commit_id():
    c = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return c + ("-dirty" if dirty and dirty != "?" else "")


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) // (1024 * 1024)
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB"


def tables(text):
    """The markdown tables in text: lists of rows (lists of cells), header first, separator dropped."""
    out, cur = [], []
    for line in text.splitlines() + [""]:
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            cells = [c.strip() for c in s.strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                cur.append(cells)
        elif cur:
            out.append(cur)
            cur = []
    return out


def number(s):
    m = re.match(r"^[~<>]?\s*(-?[\d,]*\.?\d+(?:[eE][-+]?\d+)?)", s.replace(" ", ""))
    return float(m.group(1).replace(",", "")) if m else None


def draw(b, stdout, csv_path, img):
    """Draws b.plot into img (PNG) with gnuplot. Returns None, or why not."""
    p = b.plot
    if p["rows"]:
        rows = p["rows"](stdout)
    elif p["csv"]:
        try:
            rows = list(csv.reader(open(csv_path)))
        except OSError as e:
            return f"no CSV: {e}"
    else:
        ts = tables(stdout)
        if len(ts) <= p["table"]:
            return "no table to plot"
        rows = ts[p["table"]]
    if len(rows) < 2:
        return "an empty table"
    head = rows[0]
    try:
        xis = [head.index(x) for x in ((p["x"],) if isinstance(p["x"], str) else p["x"])]
        yis = [head.index(y) for y in p["ys"]]
    except ValueError as e:
        return f"column not found: {e}"
    data = io.StringIO()
    for r in rows[1:]:
        if len(r) <= max(xis + yis):
            continue
        ys = [number(r[i]) for i in yis]
        if all(v is None for v in ys) or (p["kind"] == "lines" and any(v is None for v in ys)):
            continue
        x = " ".join(r[i] for i in xis).replace('"', "'")
        if p["kind"] == "lines":
            if number(x) is None:
                continue
            x = str(number(x))
        else:
            x = '"' + "\\n".join(textwrap.wrap(x, 18)) + '"'  # a long label on a few lines
        data.write(x + " " + " ".join("?" if v is None else str(v) for v in ys) + "\n")
    if not data.getvalue():
        return "no numeric rows"
    n_bars = data.getvalue().count("\n")
    label_lines = max(x.count("\\n") for x in data.getvalue().splitlines()) + 1
    dat = img + ".dat"
    with open(dat, "w") as f:
        f.write(data.getvalue())
    g = [
        "set terminal pngcairo size 800,440 font 'sans,10'",
        f"set output '{img}'",
        f"set title \"{p['title']}\"",
        f"set xlabel \"{p['xlabel']}\"",
        f"set ylabel \"{p['ylabel']}\"",
        "set grid ytics",
        "set key top left",
        "set datafile missing '?'",
    ]
    if p["logx"]:
        g.append("set logscale x")
    if p["logy"]:
        g.append("set logscale y")
    else:
        g.append(f"set yrange [{p['ymin']}:*]")
    if p["kind"] == "lines":
        plots = [f"'{dat}' using 1:{i + 2} with linespoints lw 2 pt 7 title \"{y}\"" for i, y in enumerate(p["ys"])]
    else:
        g += ["set style data histogram", "set style histogram cluster gap 1", "set style fill solid 0.8",
              "set boxwidth 0.9", "set rmargin 3",
              # few bars: level labels of a few lines; many: slanted ones
              "set xtics norotate center noenhanced" if n_bars <= 6 else "set xtics rotate by 25 right noenhanced",
              f"set bmargin {label_lines + 3 if n_bars <= 6 else 8}",
              f"set xlabel offset 0,{-(label_lines - 1) if n_bars <= 6 else 0}", "set lmargin 12" if n_bars <= 6 else "set lmargin 16",
              "set key inside top left opaque noenhanced" if len(p["ys"]) > 1 else "set key off"]
        plots = [f"'{dat}' using {i + 2}:xtic(1) title \"{y}\"" for i, y in enumerate(p["ys"])]
    g.append("plot " + ", ".join(plots))
    r = subprocess.run(["gnuplot"], input="\n".join(g) + "\n", capture_output=True, text=True)
    os.unlink(dat)
    if r.returncode != 0:
        return "gnuplot: " + r.stderr.strip()[-300:]
    return None


def render(stdout):
    """Markdown tables as they are; other non-empty lines in code blocks."""
    out, code, in_table = [], [], False
    for line in stdout.splitlines():
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            if code:
                out += ["```"] + code + ["```", ""]
                code = []
            if not in_table:
                out.append("")
            out.append(s)
            in_table = True
            continue
        if in_table:
            out.append("")
            in_table = False
        if s:
            code.append(line.rstrip())
    if code:
        out += ["```"] + code + ["```"]
    return "\n".join(out).strip("\n")


def block(b, res):
    cmd = res["cmd"]
    lines = [f"<!-- bench:{b.name} start -->",
             f"Measured by `make bench` — `{cmd}` — at commit {res['commit']}, {res['date']}, on {res['machine']} "
             f"(load average {res['load']} before); it took {res['secs']:.0f} s."]
    if b.note:
        lines.append(b.note)
    lines.append("")
    if res["status"] != "ok":
        lines.append(f"**{res['status']}**")
        lines.append("")
    body = render(res["stdout"])
    if body:
        lines.append(body)
        lines.append("")
    if res.get("img"):
        lines.append(f"![{b.title}](img/bench-{b.name}.png)")
        lines.append("")
    lines.append(f"<!-- bench:{b.name} end -->")
    return "\n".join(lines)


def section_of(text, name):
    """The heading of the section holding benchmark name's block (its anchor's text), or None."""
    at = text.find(f"<!-- bench:{name} start -->")
    if at < 0:
        return None
    head = text.rfind("\n## ", 0, at)
    return text[head + 4:text.index("\n", head + 1)].strip() if head >= 0 else None


def summary(text, results, total):
    lines = ["<!-- bench:summary start -->",
             f"The last `make bench`: {len(results)} benchmarks in {total / 60:.1f} minutes.", "",
             "| benchmark | result | time (s) | command |", "|---|---|---|---|"]
    for b, res in results:
        head = section_of(text, b.name) or b.title
        lines.append(f"| [{b.title}](#{anchor(head)}) | {res['status']} | {res['secs']:.0f} | `{res['cmd']}` |")
    lines.append("<!-- bench:summary end -->")
    return "\n".join(lines)


def anchor(title):
    a = re.sub(r"[^\w\- ]", "", title.lower()).strip()
    return re.sub(r" ", "-", a)


def rewrite_doc(doc, results, total, full):
    text = open(doc).read()
    for b, res in results:
        new = block(b, res)
        pat = re.compile(r"<!-- bench:%s start -->.*?<!-- bench:%s end -->" % (re.escape(b.name), re.escape(b.name)),
                         re.S)
        if pat.search(text):
            text = pat.sub(lambda _m: new, text)
        else:
            text = text.rstrip("\n") + f"\n\n## {b.title}\n\n{new}\n"
    if not full:  # --only / --skip: the summary of the last full run stays
        results = []
    new = summary(text, results, total) if results else None
    pat = re.compile(r"<!-- bench:summary start -->.*?<!-- bench:summary end -->", re.S)
    if new and pat.search(text):
        text = pat.sub(lambda _m: new, text)
    elif new:
        first, _, rest = text.partition("\n")
        text = first + "\n\n" + new + "\n" + rest
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--no-doc", action="store_true", help="print only; leave docs/performance.md alone")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    a = ap.parse_args()
    if a.list:
        for b in BENCHES:
            print(f"{b.name:<12} {b.timeout:>4} s max  {b.cmd}")
        return 0
    build = os.path.abspath(a.build)
    only = [x for x in a.only.split(",") if x]
    skip = [x for x in a.skip.split(",") if x]
    chosen = [b for b in BENCHES if (not only or b.name in only) and b.name not in skip]
    unknown = [x for x in only + skip if x not in [b.name for b in BENCHES]]
    if unknown:
        print(f"bench: unknown benchmark(s): {', '.join(unknown)} (--list)", file=sys.stderr)
        return 2
    out_dir = os.path.join(build, "bench-results")
    img_dir = os.path.join(os.path.dirname(a.doc), "img") if not a.no_doc else os.path.join(build, "bench-results")
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(img_dir, exist_ok=True)
    commit, mach = commit_id(), machine()
    print(f"bench: {len(chosen)} benchmarks at {commit} on {mach}; results in {out_dir}", flush=True)
    results, failed, t_all = [], 0, time.time()
    for i, b in enumerate(chosen, 1):
        csv_path = os.path.join(out_dir, b.name + ".csv")
        cmd = b.cmd.format(bin=os.path.relpath(os.path.join(build, "bin"), ROOT), build=os.path.relpath(build, ROOT),
                           csv=os.path.relpath(csv_path, ROOT))
        res = dict(cmd=cmd, commit=commit, machine=mach, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   load="%.2f" % os.getloadavg()[0], stdout="", status="ok", secs=0.0)
        missing = [n for n in b.needs if not (shutil.which(n) or os.path.exists(n))]
        print(f"[{i}/{len(chosen)}] {b.name}: {cmd}", flush=True)
        if missing:
            res["status"] = "skipped: " + ", ".join(missing) + " not found"
            print(f"    {res['status']}", flush=True)
            results.append((b, res))
            continue
        t0 = time.time()
        env = dict(os.environ, TIDE_BUILD_DIR=build)
        with open(os.path.join(out_dir, b.name + ".err"), "w") as err:
            try:
                p = subprocess.run(cmd, shell=True, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                   timeout=b.timeout, env=env, start_new_session=True)
                res["stdout"] = p.stdout
                if p.returncode != 0:
                    res["status"] = f"failed (exit {p.returncode}; stderr in {os.path.relpath(err.name, ROOT)})"
            except subprocess.TimeoutExpired as e:
                res["stdout"] = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) \
                    else (e.stdout or "")
                res["status"] = f"timed out after {b.timeout} s"
        res["secs"] = time.time() - t0
        with open(os.path.join(out_dir, b.name + ".out"), "w") as f:
            f.write(res["stdout"])
        if res["status"] != "ok":
            failed += 1
        if b.plot and res["stdout"]:
            img = os.path.join(img_dir, f"bench-{b.name}.png")
            why = draw(b, res["stdout"], csv_path, img)
            if why:
                print(f"    no plot: {why}", flush=True)
            else:
                res["img"] = img
        print(f"    {res['status']} in {res['secs']:.0f} s", flush=True)
        sys.stdout.write(res["stdout"])
        results.append((b, res))
    if not a.no_doc:
        rewrite_doc(a.doc, results, time.time() - t_all, full=not only and not skip)
        print(f"bench: rewrote {os.path.relpath(a.doc, ROOT)} and its plots in {os.path.relpath(img_dir, ROOT)}")
    print(f"bench: {len(results)} benchmarks in {time.time() - t_all:.0f} s, {failed} failed or timed out")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
