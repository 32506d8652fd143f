#!/usr/bin/env bash
# Resize latency on this machine (docs/elastic.md, "Measured"): a real scheduler and W real tide workers on
# loopback (2 per simulated node), one elastic tide-mlp job on MPI (the `mpi` launcher: one mpirun across the
# job's workers) scaled back and forth between W/2 and W workers ROUNDS times with `tidectl scale --wait`.
# Each resize is decision -> checkpoint landed -> old ranks stopped -> every new rank's process started
# (the scheduler's own phases, from Job.last_resize); the trainer's start-up (MPI wire-up, resume) is not
# in it. Prints one line per resize and the median and maximum of each phase per direction.
#   bench/resize.sh BUILD_DIR [ROUNDS] [WORKERS] [LAUNCHER]
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-5}
W=${3:-4}
LAUNCHER=${4:-mpi}
B=$BUILD/bin
# run as root (CI), the workers must be told that ranks may run as root too (docs/worker.md)
ROOT_JOBS=$([ "$(id -u)" = 0 ] && echo --allow-root-jobs || true)
DIR=$(mktemp -d /tmp/tide-bench-resize.XXXXXX)
PIDS=()
cleanup() {
    "$B/tidectl" cancel "${id:-0}" >/dev/null 2>&1 || true
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$B/tide-scheduler" --listen 127.0.0.1:0 --data-dir "$DIR/s" --no-auto-grow >"$DIR/s.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$DIR/s/scheduler.addr" ] && break; sleep 0.1; done
export TIDE_SCHEDULER=$(cat "$DIR/s/scheduler.addr") TIDE_TOKEN_FILE=$DIR/s/token
for i in $(seq 0 $((W - 1))); do
    n=node$((i / 2)) g=$((i % 2))
    "$B/tide-worker" $ROOT_JOBS --node $n --gpu-index $g --advertise 127.0.0.1 --data-dir "$DIR/$n-$g" >"$DIR/$n-$g.log" 2>&1 &
    PIDS+=($!)
done
for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = "$W" ] && break; sleep 0.1; done

# Long enough to outlast every round; each micro-batch costs 2 ms so steps take a few ms on any machine.
id=$("$B/tidectl" submit --launcher "$LAUNCHER" --min $((W / 2)) --max "$W" -- "$B/tide-mlp" --steps 100000000 \
    --checkpoint-dir "$DIR/ckpt" --width 64 --depth 2 --batch 64 --micro-batches 8 --log-every 0 --simulated-compute 2)
wait_steps() { # every rank of generation $1 reported a step
    for _ in $(seq 600); do
        "$B/tidectl" -o json job "$id" | python3 -c '
import json, sys
j = json.load(sys.stdin); g = int(sys.argv[1])
ok = j.get("state") == "JOB_STATE_RUNNING" and int(j.get("generation", 0)) == g and \
    all(int(r.get("progress", {}).get("step", -1)) >= 0 for r in j.get("ranks", []))
sys.exit(0 if ok else 1)' "$1" && return 0
        sleep 0.1
    done
    echo "generation $1 did not start" >&2
    "$B/tidectl" job "$id" >&2
    return 1
}
gen=1
wait_steps $gen
OUT=$DIR/resizes.txt
: >"$OUT"
for r in $(seq "$ROUNDS"); do
    for to in $((W / 2)) "$W"; do
        "$B/tidectl" -o json scale "$id" --workers "$to" --wait --timeout 120s | python3 -c '
import json, sys
r = json.load(sys.stdin)["lastResize"]
g = lambda k: float(r.get(k, 0))
print("%s->%s total %.3f checkpoint %.3f stop %.3f start %.3f" % (r["fromWorkers"], r["workers"], g("totalSeconds"),
      g("checkpointSeconds"), g("stopSeconds"), g("startSeconds")))' | tee -a "$OUT"
        gen=$((gen + 1))
        wait_steps $gen
    done
done
python3 - "$OUT" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append([float(x) for x in f[2::2]])
for d, rs in sorted(rows.items()):
    cols = list(zip(*rs))
    print(f"{d}: {len(rs)} resizes; " + ", ".join(
        f"{name} median {statistics.median(c):.3f} s max {max(c):.3f} s"
        for name, c in zip(("total", "checkpoint", "stop", "start"), cols)))
EOF
