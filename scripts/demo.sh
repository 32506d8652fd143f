#!/usr/bin/env bash
# tide end to end on one machine: a scheduler (embedded SQLite store in a throwaway data dir), 4 workers
# with simulated H100s on 2 simulated nodes, a 4-rank job; shows the jobs and workers tables while it
# runs, waits for it to succeed, prints each rank's output; then tide-mlp as one MPI job across the 4
# workers (--launcher mpi) with its MFU, health and bottleneck shown (tidectl top) and a checkpoint
# requested mid-run, checked bitwise against a one-process run; and stops everything it started.
#   scripts/demo.sh BIN_DIR        (make demo; TIDE_DEMO_QUICK=1 for a short run, as CI does)
set -euo pipefail

BIN=$(cd "${1:-build/bin}" && pwd)
QUICK=${TIDE_DEMO_QUICK:-0}
STEPS=$([ "$QUICK" = 1 ] && echo 4 || echo 12)
MLP_STEPS=$([ "$QUICK" = 1 ] && echo 60 || echo 400)
DIR=$(mktemp -d /tmp/tide-demo.XXXXXX)
PIDS=()

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

cleanup() {
    local rc=$?
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    if [ $rc -ne 0 ]; then
        echo "demo failed; logs in $DIR" >&2
        tail -n 20 "$DIR"/*.log >&2 || true
    else
        rm -rf "$DIR"
    fi
}
trap cleanup EXIT

# wait_for SECONDS WHAT COMMAND...: polls COMMAND until it succeeds or the deadline passes.
wait_for() {
    local secs=$1 what=$2; shift 2
    local end=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || die "timed out after ${secs}s waiting for $what"
        sleep 0.1
    done
}

say "starting tide-scheduler (data dir $DIR/scheduler)"
"$BIN/tide-scheduler" --listen 127.0.0.1:0 --data-dir "$DIR/scheduler" >"$DIR/scheduler.log" 2>&1 &
PIDS+=($!)
wait_for 20 "the scheduler to listen" test -s "$DIR/scheduler/scheduler.addr"
export TIDE_SCHEDULER=$(cat "$DIR/scheduler/scheduler.addr")
export TIDE_TOKEN_FILE="$DIR/scheduler/token"
echo "scheduler at $TIDE_SCHEDULER, token in $TIDE_TOKEN_FILE"

say "starting 4 tide-workers: simulated H100s on node1 and node2"
# A worker running as root runs a rank as root only when allowed (docs/worker.md, "Running ranks as their
# user"); the demo's job has no Unix account, so as root it is.
ROOT_JOBS=()
[ "$(id -u)" -eq 0 ] && ROOT_JOBS=(--allow-root-jobs)
for node in node1 node2; do
    for gpu in 0 1; do
        "$BIN/tide-worker" --scheduler "$TIDE_SCHEDULER" --token-file "$TIDE_TOKEN_FILE" --node "$node" \
            --gpu-index "$gpu" --gpu sim:h100 --advertise 127.0.0.1 --data-dir "$DIR/$node-gpu$gpu" \
            "${ROOT_JOBS[@]}" \
            >"$DIR/worker-$node-gpu$gpu.log" 2>&1 &
        PIDS+=($!)
    done
done
ready() { [ "$("$BIN/tidectl" workers | grep -c ' READY ')" -ge 4 ]; }
wait_for 30 "4 workers to be READY" ready
"$BIN/tidectl" workers

say "submitting a 4-rank job"
cat >"$DIR/train.sh" <<'RANK'
#!/bin/sh
# A stand-in for a training script: what torchrun would give it, then a few "steps".
echo "rank $RANK of $WORLD_SIZE (local $LOCAL_RANK of $LOCAL_WORLD_SIZE, node $GROUP_RANK) on $TIDE_WORKER_ID"
echo "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
step=1
while [ $step -le "$STEPS" ]; do
    echo "rank $RANK step $step/$STEPS"
    sleep 0.5
    step=$((step + 1))
done
echo "rank $RANK done"
RANK
chmod +x "$DIR/train.sh"
JOB=$("$BIN/tidectl" submit --name demo --workers 4 --env STEPS="$STEPS" --workdir "$DIR" -- "$DIR/train.sh")
echo "submitted job $JOB"

say "while it runs"
state() { "$BIN/tidectl" job "$JOB" | awk '/^State:/ {print $2}'; }
end=$((SECONDS + 120))
shown=0
while :; do
    st=$(state)
    case "$st" in SUCCEEDED | FAILED | CANCELLED) break ;; esac
    [ $SECONDS -lt $end ] || die "job $JOB did not finish within 120s (state $st)"
    if [ "$st" = RUNNING ] && [ $shown -lt 2 ]; then
        "$BIN/tidectl" jobs
        echo
        "$BIN/tidectl" workers
        echo
        shown=$((shown + 1))
    fi
    sleep 1
done
"$BIN/tidectl" jobs
[ "$st" = SUCCEEDED ] || { "$BIN/tidectl" job "$JOB"; die "job $JOB ended $st"; }

say "each rank's output (tidectl logs $JOB)"
"$BIN/tidectl" logs "$JOB"

say "job $JOB"
"$BIN/tidectl" job "$JOB"

say "an MPI job: tide-mlp across the 4 workers (tidectl submit --launcher mpi --workers 4 -- tide-mlp)"
MLP=$("$BIN/tidectl" submit --launcher mpi --workers 4 --workdir "$DIR" -- \
    "$BIN/tide-mlp" --steps "$MLP_STEPS" --checkpoint-dir "$DIR/ckpt")
echo "submitted job $MLP"
stepping() { "$BIN/tidectl" -o json job "$MLP" | grep -q '"stepsReported"'; }
wait_for 60 "job $MLP to report steps through the trainer SDK" stepping
say "MFU, health and the bottleneck while it trains (tidectl top --once)"
"$BIN/tidectl" top --once
echo "(the simulated GPUs look 90% busy while the model FLOPs are a sliver of their peak: a CPU trainer on"
echo " simulated H100s. GPU utilization is not MFU; that gap is what tide measures.)"
say "asking it for a checkpoint now (tidectl checkpoint $MLP --wait)"
"$BIN/tidectl" checkpoint "$MLP" --deadline 60s --wait || echo "(the job ended before it could checkpoint)"
"$BIN/tidectl" job "$MLP"
end=$((SECONDS + 180))
until [ "$("$BIN/tidectl" job "$MLP" | awk '/^State:/ {print $2}')" = SUCCEEDED ]; do
    st=$("$BIN/tidectl" job "$MLP" | awk '/^State:/ {print $2}')
    case "$st" in FAILED | CANCELLED) "$BIN/tidectl" job "$MLP"; "$BIN/tidectl" logs "$MLP"; die "job $MLP ended $st" ;; esac
    [ $SECONDS -lt $end ] || die "job $MLP did not finish within 180s"
    sleep 0.5
done
say "job $MLP succeeded; rank 0's output ends"
"$BIN/tidectl" logs "$MLP" --rank 0 | tail -n 4
got=$("$BIN/tidectl" logs "$MLP" --rank 0 | awk '/^params-sha256/ {print $2}')
want=$("$BIN/tide-mlp" --steps "$MLP_STEPS" --quiet | awk '/^params-sha256/ {print $2}')
echo "4 MPI ranks under tide: $got"
echo "1 process, no tide:     $want"
[ -n "$got" ] && [ "$got" = "$want" ] || die "the MPI run's parameters differ from the one-process run"
echo "bitwise identical"
say "demo succeeded; stopping everything"
