#!/usr/bin/env bash
# Checkpoint overhead on the training step (docs/fault-tolerance.md, "Checkpoint tiers"; target <= 1 %): a real
# scheduler and 3 real tide workers on loopback (3 simulated nodes, so the hot tier's mirror peer is another
# worker), tide-mlp on MPI on 2 of them with a model of PARAMS_MIB MiB of parameters and steps of ~STEP_MS ms
# (--simulated-compute), run ROUNDS times each way:
#   none    no checkpoints
#   plain   --checkpoint-dir DIR (the trainer's own files, reported; no tiers)
#   tiered  --tiered-checkpoints (hot in memory, a manifest, a warm copy and a mirror to a peer, all off the loop)
# every EVERY steps. Prints each run's steps/s as tide-mlp measured it (its own clock, from its first to its last
# step) and the overhead against the mean of `none`.
#   bench/ckpt_overhead.sh BUILD_DIR [ROUNDS] [EVERY]
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-3}
EVERY=${3:-50}
STEPS=400
B=$BUILD/bin
DIR=$(mktemp -d /tmp/tide-bench-ckpt.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$B/tide-scheduler" --listen 127.0.0.1:0 --data-dir "$DIR/s" --reserve 0 >"$DIR/s.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$DIR/s/scheduler.addr" ] && break; sleep 0.1; done
export TIDE_SCHEDULER=$(cat "$DIR/s/scheduler.addr") TIDE_TOKEN_FILE=$DIR/s/token
for n in 1 2 3; do
    "$B/tide-worker" --node node$n --gpu-index 0 --advertise 127.0.0.1 --data-dir "$DIR/w$n" \
        --ckpt-hot "$DIR/w$n/hot" >"$DIR/w$n.log" 2>&1 &
    PIDS+=($!)
done
for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = 3 ] && break; sleep 0.1; done

# width 512, depth 8: 8 x 512 x 512 doubles = 16 MiB of parameters; 5 ms of simulated compute per micro-batch.
MODEL=(--width 512 --depth 8 --batch 64 --micro-batches 4 --simulated-compute 5 --log-every 0)
declare -A SUM CNT
run() { # $1: label, rest: tide-mlp flags
    local label=$1 id rate
    shift
    id=$("$B/tidectl" submit --launcher mpi --workers 2 -- "$B/tide-mlp" --steps $STEPS "${MODEL[@]}" "$@")
    for _ in $(seq 2400); do
        "$B/tidectl" -o json job "$id" | grep -q '"JOB_STATE_\(SUCCEEDED\|FAILED\|CANCELLED\)"' && break
        sleep 0.25
    done
    rate=$("$B/tidectl" logs "$id" --rank 0 | sed -n 's/^tide-mlp: [0-9]* steps in [0-9.]*s on [0-9]* ranks: \([0-9.]*\) steps\/s.*/\1/p')
    echo "$label job $id: ${rate:-?} steps/s"
    SUM[$label]=$(python3 -c "print(${SUM[$label]:-0} + ${rate:-0})")
    CNT[$label]=$(( ${CNT[$label]:-0} + 1 ))
    for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = 3 ] && break; sleep 0.1; done
}
for r in $(seq "$ROUNDS"); do
    run none
    run plain --checkpoint-dir "$DIR/ck-$r" --checkpoint-every "$EVERY"
    run tiered --tiered-checkpoints --checkpoint-every "$EVERY"
done
python3 - "${SUM[none]}" "${CNT[none]}" "${SUM[plain]}" "${CNT[plain]}" "${SUM[tiered]}" "${CNT[tiered]}" <<'PY'
import sys
v = [float(x) for x in sys.argv[1:]]
base = v[0] / v[1]
for name, s, n in (("plain", v[2], v[3]), ("tiered", v[4], v[5])):
    m = s / n
    print(f"{name}: {m:.2f} steps/s vs {base:.2f} without checkpoints: overhead {100 * (base / m - 1):+.1f}% of the step")
PY
