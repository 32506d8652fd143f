#!/usr/bin/env bash
# Work stealing on this machine (docs/work-stealing.md, "Measured"), with a real scheduler and real
# tide workers on loopback:
# 1. Steal round trips as a trainer sees them (tide-bench-steal-rtt as a 2-rank job; the percentiles).
# 2. tide-mlp's step time with one of W workers slowed to 50% (the worker's `slow 50` perturbation), with
#    and without stealing, against the balanced run of W workers (default 8, 2 per simulated node) with
#    --simulated-compute so that micro-batches cost a fixed time and 2 cores are enough.
#   bench/steal.sh BUILD_DIR [ROUNDS] [WORKERS] [STEPS] [MICRO_BATCHES_PER_RANK] [MS_PER_MICRO_BATCH]
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-5000}
W=${3:-8}
STEPS=${4:-300}
MBR=${5:-8}
MS=${6:-4}
B=$BUILD/bin
# run as root (CI), the workers must be told that ranks may run as root too (docs/worker.md)
ROOT_JOBS=$([ "$(id -u)" = 0 ] && echo --allow-root-jobs || true)
DIR=$(mktemp -d /tmp/tide-bench-steal.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# A short straggler window (ranks compared every 2 s) so that the slowed rank is known as slow, and
# stops stealing from faster ones, early in these short runs.
"$B/tide-scheduler" --listen 127.0.0.1:0 --data-dir "$DIR/s" --straggler-window 8s >"$DIR/s.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$DIR/s/scheduler.addr" ] && break; sleep 0.1; done
export TIDE_SCHEDULER=$(cat "$DIR/s/scheduler.addr") TIDE_TOKEN_FILE=$DIR/s/token
echo "0 slow 50" >"$DIR/slow.txt"
# W workers at full speed and one more (the last) at 50%.
for i in $(seq 0 "$W"); do
    n=node$((i / 2)) g=$((i % 2)) extra=()
    [ "$i" = "$W" ] && extra=(--perturb "$DIR/slow.txt")
    "$B/tide-worker" $ROOT_JOBS --node $n --gpu-index $g --advertise 127.0.0.1 --data-dir "$DIR/$n-$g" "${extra[@]}" \
        >"$DIR/$n-$g.log" 2>&1 &
    PIDS+=($!)
done
for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = $((W + 1)) ] && break; sleep 0.1; done

wait_done() {
    for _ in $(seq 6000); do
        s=$("$B/tidectl" -o json job "$1" | sed -n 's/^  "state": "JOB_STATE_\([A-Z]*\)".*/\1/p')
        case "$s" in SUCCEEDED) return 0 ;; FAILED | CANCELLED) echo "job $1 $s" >&2; "$B/tidectl" job "$1" >&2; "$B/tidectl" logs "$1" >&2; return 1 ;; esac
        sleep 0.1
    done
    return 1
}

# 1. Round trips: two workers of node0 (neither slowed).
id=$("$B/tidectl" submit --workers 2 --topology node -- "$B/tide-bench-steal-rtt" "$ROUNDS")
wait_done "$id"
"$B/tidectl" logs "$id" --rank 1

# 2. Step times. MLP flags: MBR micro-batches per rank, MS ms of simulated compute each.
MB=$((W * MBR))
FLAGS=(--steps "$STEPS" --width 32 --depth 2 --input 16 --output 2 --batch $((MB * 8)) --micro-batches "$MB"
    --log-every 0 --simulated-compute "$MS")
run() { # run LABEL WORKERS [SUBMIT FLAGS...]: prints the step-time line of rank 0
    local label=$1 n=$2
    shift 2
    id=$("$B/tidectl" submit --launcher mpi --workers "$n" "$@" -- "$B/tide-mlp" "${FLAGS[@]}")
    wait_done "$id"
    printf '%-40s %s\n' "$label" "$("$B/tidectl" logs "$id" --rank 0 | grep 'step time' | sed 's/^tide-mlp: //')"
    "$B/tidectl" logs "$id" --rank 0 | grep params-sha256
}
echo
echo "tide-mlp, $MB micro-batches of $MS ms (simulated) per step, $STEPS steps"
slow="node$((W / 2))/gpu$((W % 2))" last="node$(((W - 1) / 2))/gpu$(((W - 1) % 2))"
"$B/tidectl" cordon "$slow" >/dev/null
run "balanced: $W workers at full speed" "$W"
"$B/tidectl" uncordon "$slow" >/dev/null
"$B/tidectl" cordon "$last" >/dev/null
run "one of $W at 50%, stealing" "$W"
run "one of $W at 50%, no stealing" "$W" --no-stealing
