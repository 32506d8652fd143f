#!/usr/bin/env bash
# What phase-aware burst buys one job on this machine (docs/elastic.md, "Burst"): a real scheduler and 3 real
# tide workers on loopback; tide-mlp on MPI on 2 of them with PHASES evaluation phases of 64 held-out shards
# (100 ms of running time each, one per rank per step while a phase lasts; 4 ms per micro-batch), run ROUNDS
# times without burst and with `--burst 50` (the third worker may be lent). Prints each run's wall time
# (submit to end, from the job record), how many lendings, and how many shards the lent worker evaluated.
#   bench/burst.sh BUILD_DIR [ROUNDS] [PHASES]
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-3}
PHASES=${3:-6}
B=$BUILD/bin
# run as root (CI), the workers must be told that ranks may run as root too (docs/worker.md)
ROOT_JOBS=$([ "$(id -u)" = 0 ] && echo --allow-root-jobs || true)
DIR=$(mktemp -d /tmp/tide-bench-burst.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$B/tide-scheduler" --listen 127.0.0.1:0 --data-dir "$DIR/s" --reserve 0 --burst-enter 100ms --burst-exit 500ms \
    --burst-dwell 1s >"$DIR/s.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$DIR/s/scheduler.addr" ] && break; sleep 0.1; done
export TIDE_SCHEDULER=$(cat "$DIR/s/scheduler.addr") TIDE_TOKEN_FILE=$DIR/s/token
for g in 0 1 2; do
    "$B/tide-worker" $ROOT_JOBS --node node1 --gpu-index $g --advertise 127.0.0.1 --data-dir "$DIR/w$g" >"$DIR/w$g.log" 2>&1 &
    PIDS+=($!)
done
for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = 3 ] && break; sleep 0.1; done

run() { # $1: label, rest: extra submit flags
    local label=$1 ck id state
    shift
    ck=$DIR/ck-$label-$RANDOM
    id=$("$B/tidectl" submit --launcher mpi --workers 2 "$@" -- "$B/tide-mlp" --steps $((PHASES * 50)) \
        --width 16 --depth 2 --batch 32 --micro-batches 8 --log-every 0 --checkpoint-dir "$ck" \
        --checkpoint-keep 100 --eval-every 50 --eval-tasks 64 --eval-per-step 1 --eval-compute 100 \
        --simulated-compute 4)
    for _ in $(seq 1200); do
        "$B/tidectl" -o json job "$id" | grep -q '"JOB_STATE_\(SUCCEEDED\|FAILED\|CANCELLED\)"' && break
        sleep 0.5
    done
    state=$("$B/tidectl" -o json job "$id" | python3 -c 'import json,sys; j=json.load(sys.stdin)
print("%s in %.1f s, %d lending(s)" % (j["state"][10:], (int(j["endTimeMs"]) - int(j["startTimeMs"])) / 1e3,
                                      j.get("bursts", 0)))')
    echo "$label job $id: $state, $(grep -c ' by burst ' "$ck/eval.log" || true) of $((PHASES * 64)) shards" \
        "by a lent worker"
    for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = 3 ] && break; sleep 0.1; done
}
for r in $(seq "$ROUNDS"); do
    run off
    run burst --burst 50
done
