#!/usr/bin/env bash
# The NVML telemetry backend and MFU on a real NVIDIA GPU (docs/metrics.md, "On a real GPU").
#
#   bench/gpu_check.sh BIN_DIR OUT_DIR [SECONDS]
#
# BIN_DIR holds tide-scheduler, tide-worker, tide-exec and tidectl (with BIN_DIR/../lib holding their
# shared libraries when they were built on another machine). Prints `tide-worker --gpu nvml --probe`, then starts a
# scheduler and one `--gpu auto` worker on loopback and runs examples/gpu/torch_mfu.py twice (a
# compute-bound bf16 GEMM and a memory-bound axpy), saving `tidectl top --once`, `tidectl job -o json`
# and /metrics from the middle of each run and the script's own FLOP/s (the ground truth) into OUT_DIR.
set -uo pipefail

BIN=$(cd "$1" && pwd)
# run as root (CI), the workers must be told that ranks may run as root too (docs/worker.md)
ROOT_JOBS=$([ "$(id -u)" = 0 ] && echo --allow-root-jobs || true)
OUT=$2
SECS=${3:-24}
HERE=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mktemp -d /tmp/tide-gpu.XXXXXX)
PIDS=()
[ -d "$BIN/../lib" ] && export LD_LIBRARY_PATH="$(cd "$BIN/../lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT"

cleanup() {
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    cp "$DIR"/*.log "$OUT"/ 2>/dev/null || true
}
trap cleanup EXIT

wait_for() { # SECONDS WHAT CMD...: poll until CMD succeeds
    local end=$((SECONDS + $1)) what=$2; shift 2
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || { echo "timed out waiting for $what" >&2; return 1; }
        sleep 0.2
    done
}

nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
echo "== tide-worker --gpu nvml --probe"
"$BIN/tide-worker" --gpu nvml --probe 2>&1 | tee "$OUT/probe.txt"

"$BIN/tide-scheduler" --listen 127.0.0.1:0 --data-dir "$DIR/scheduler" >"$DIR/scheduler.log" 2>&1 &
PIDS+=($!)
wait_for 20 "the scheduler" test -s "$DIR/scheduler/scheduler.addr" || exit 1
export TIDE_SCHEDULER=$(cat "$DIR/scheduler/scheduler.addr") TIDE_TOKEN_FILE="$DIR/scheduler/token"
"$BIN/tide-worker" $ROOT_JOBS --gpu auto --node gpunode --advertise 127.0.0.1 --data-dir "$DIR/worker" \
    >"$DIR/worker.log" 2>&1 &
PIDS+=($!)
wait_for 30 "the worker" sh -c "'$BIN/tidectl' workers | grep -q ' READY '" || exit 1
"$BIN/tidectl" workers | tee "$OUT/workers.txt"

PY=$(command -v python3)
for kind in gemm axpy; do
    echo "== $kind"
    JOB=$("$BIN/tidectl" submit --name "$kind" --workdir "$HERE" -- "$PY" -u \
        "$HERE/examples/gpu/torch_mfu.py" --kind "$kind" --seconds "$SECS") || exit 1
    # The middle of the run: past warm-up, the ~10 s window full.
    wait_for 120 "$kind to report steps" sh -c "'$BIN/tidectl' job $JOB -o json | grep -qE 'flopsPerS|SUCCEEDED|FAILED'" || true
    sleep $((SECS / 2)) # let the 10 s window fill (a measurement pause, not synchronisation)
    "$BIN/tidectl" top --once | tee "$OUT/top-$kind.txt"
    "$BIN/tidectl" job "$JOB" -o json >"$OUT/job-$kind.json"
    "$PY" -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://$TIDE_SCHEDULER/metrics').read().decode())" \
        >"$OUT/metrics-$kind.txt"
    wait_for $((SECS + 120)) "$kind to end" sh -c "'$BIN/tidectl' job $JOB | grep -qE 'State: +(SUCCEEDED|FAILED)'" || true
    "$BIN/tidectl" job "$JOB" | tee "$OUT/jobend-$kind.txt"
    "$BIN/tidectl" logs "$JOB" | tee "$OUT/log-$kind.txt"
done
