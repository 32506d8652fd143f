#!/usr/bin/env bash
# Checkpoint overhead on the training step (docs/fault-tolerance.md, "Checkpoint tiers"; target <= 1 %): a real
# scheduler and 3 real tide workers on loopback (3 simulated nodes, so the hot tier's mirror peer is another
# worker), tide-mlp on MPI on 2 of them with a model of PARAMS_MIB MiB of parameters and steps of ~STEP_MS ms
# (--simulated-compute), run ROUNDS times each way:
#   none    no checkpoints
#   plain   --checkpoint-dir DIR (the trainer's own files, reported; no tiers)
#   tiered  --tiered-checkpoints (hot in memory, a manifest, a warm copy and a mirror to a peer, all off the loop)
#   async   --tiered-checkpoints --async-checkpoints (rank 0 snapshots the state and saves it on a thread)
# every EVERY steps. Prints each run's steps/s as tide-mlp measured it (its own clock, from its first to its last
# step) and the share of that time its training loop stalled in checkpointing (tide-mlp's "checkpoints: N saved,
# training stalled S s of T s (P %)" line), then per mode the overhead in steps/s against the mean of `none`
# (with none's spread: the noise) and the mean stall.
#   bench/ckpt_overhead.sh BUILD_DIR [ROUNDS] [EVERY]
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-3}
EVERY=${3:-50}
STEPS=400
B=$BUILD/bin
# run as root (CI), the workers must be told that ranks may run as root too (docs/worker.md)
ROOT_JOBS=$([ "$(id -u)" = 0 ] && echo --allow-root-jobs || true)
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
    "$B/tide-worker" $ROOT_JOBS --node node$n --gpu-index 0 --advertise 127.0.0.1 --data-dir "$DIR/w$n" \
        --ckpt-hot "$DIR/w$n/hot" --ckpt-mirror-min-free 0 >"$DIR/w$n.log" 2>&1 &
    PIDS+=($!)
done
for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = 3 ] && break; sleep 0.1; done

# width 512, depth 8: 8 x 512 x 512 doubles = 16 MiB of parameters; 5 ms of simulated compute per micro-batch.
MODEL=(--width 512 --depth 8 --batch 64 --micro-batches 4 --simulated-compute 5 --log-every 0)
RESULTS=$DIR/results
run() { # $1: label, rest: tide-mlp flags
    local label=$1 id rate log stall pct saves
    shift
    id=$("$B/tidectl" submit --launcher mpi --workers 2 -- "$B/tide-mlp" --steps $STEPS "${MODEL[@]}" "$@")
    for _ in $(seq 2400); do
        "$B/tidectl" -o json job "$id" | grep -q '"JOB_STATE_\(SUCCEEDED\|FAILED\|CANCELLED\)"' && break
        sleep 0.25
    done
    log=$("$B/tidectl" logs "$id" --rank 0)
    rate=$(sed -n 's/^tide-mlp: [0-9]* steps in [0-9.]*s on [0-9]* ranks: \([0-9.]*\) steps\/s.*/\1/p' <<<"$log")
    stall=$(sed -n 's/^tide-mlp: checkpoints: \([0-9]*\) saved, training stalled [0-9.]* s of [0-9.]* s (\([0-9.]*\) %)$/\2 \1/p' <<<"$log")
    read -r pct saves <<<"${stall:-? ?}"
    echo "$label job $id: ${rate:-?} steps/s, stalled $pct % in checkpointing ($saves saves)"
    [ -n "$rate" ] && echo "$label $rate ${stall:-0 0}" >>"$RESULTS"
    for _ in $(seq 200); do [ "$("$B/tidectl" workers | grep -c READY)" = 3 ] && break; sleep 0.1; done
}
for r in $(seq "$ROUNDS"); do
    run none
    run plain --checkpoint-dir "$DIR/ck-$r" --checkpoint-every "$EVERY"
    run tiered --tiered-checkpoints --checkpoint-every "$EVERY"
    run async --tiered-checkpoints --async-checkpoints --checkpoint-every "$EVERY"
done
python3 - "$RESULTS" <<'PY'
import sys
runs = {}
for line in open(sys.argv[1]):
    label, rate, stall, saved = line.split()
    runs.setdefault(label, []).append((float(rate), float(stall), int(saved)))
none = [r for r, _, _ in runs.get("none", [])]
base = sum(none) / len(none)
print(f"none: {base:.2f} steps/s (runs {min(none):.2f}..{max(none):.2f}: "
      f"{100 * (min(none) / base - 1):+.1f}..{100 * (max(none) / base - 1):+.1f}% run-to-run)")
for name in ("plain", "tiered", "async"):
    v = runs.get(name)
    if not v:
        continue
    m = sum(r for r, _, _ in v) / len(v)
    stall = sum(s for _, s, _ in v) / len(v)
    print(f"{name}: {m:.2f} steps/s vs {base:.2f} without checkpoints: overhead {100 * (base / m - 1):+.1f}% "
          f"of the step; training stalled {stall:.2f}% of the run in checkpointing "
          f"(mean of {len(v)}, {v[0][2]} saves each)")
PY
