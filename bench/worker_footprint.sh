#!/usr/bin/env bash
# The worker's footprint and MPI job latency on this machine (docs/performance.md, "Worker").
#   bench/worker_footprint.sh BUILD_DIR [IDLE_SECONDS]
# 1. A worker with the default heartbeat (500 ms) and no rank: RSS and CPU over IDLE_SECONDS.
# 2. The same while a 1-rank tide-mlp reports steps through the trainer SDK as fast as it can (a tiny
#    model: thousands of reports per second, far above any real trainer): CPU per step report.
# 3. An MPI job of `true` on 4 workers (2 simulated nodes), submit to SUCCEEDED, median of 5, beside
#    plain `mpirun -n 4 true` on the same machine.
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
IDLE=${2:-30}
B=$BUILD/bin
# run as root (CI), the workers must be told that ranks may run as root too (docs/worker.md)
ROOT_JOBS=$([ "$(id -u)" = 0 ] && echo --allow-root-jobs || true)
DIR=$(mktemp -d /tmp/tide-bench-worker.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

"$B/tide-scheduler" --listen 127.0.0.1:0 --data-dir "$DIR/s" >"$DIR/s.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$DIR/s/scheduler.addr" ] && break; sleep 0.1; done
export TIDE_SCHEDULER=$(cat "$DIR/s/scheduler.addr") TIDE_TOKEN_FILE=$DIR/s/token
for n in node1 node2; do for g in 0 1; do
    "$B/tide-worker" $ROOT_JOBS --node $n --gpu-index $g --advertise 127.0.0.1 --data-dir "$DIR/$n-$g" >"$DIR/$n-$g.log" 2>&1 &
    PIDS+=($!)
done; done
W=${PIDS[1]}
for _ in $(seq 100); do [ "$("$B/tidectl" workers | grep -c READY)" = 4 ] && break; sleep 0.1; done

t0=$(ticks "$W"); sleep "$IDLE"; t1=$(ticks "$W")
rss=$(awk '/VmRSS/ {print $2}' "/proc/$W/status")
echo "idle worker: RSS $((rss / 1024)).$(((rss % 1024) * 10 / 1024)) MiB, CPU $(awk -v t=$((t1 - t0)) -v s="$IDLE" -v hz="$hz" 'BEGIN {printf "%.3f", 100 * t / hz / s}')% of a core over ${IDLE}s"

"$B/tidectl" submit --workers 1 -- "$B/tide-mlp" --steps 100000000 --width 8 --depth 1 --batch 4 \
    --micro-batches 1 --log-every 0 >/dev/null
for _ in $(seq 100); do "$B/tidectl" -o json job 1 | grep -q stepsReported && break; sleep 0.1; done
w1=$("$B/tidectl" -o json job 1 | sed -n 's/.*"workerId": *"\([^"]*\)".*/\1/p' | head -1)
WP=$(pgrep -f -- "tide-worker.* --node ${w1%/gpu*} --gpu-index ${w1#*/gpu} " | head -1)
steps() { "$B/tidectl" -o json job 1 | sed -n 's/.*"stepsReported": *"\([0-9]*\)".*/\1/p'; }
s0=$(steps); t0=$(ticks "$WP"); sleep 10; t1=$(ticks "$WP"); s1=$(steps)
rss=$(awk '/VmRSS/ {print $2}' "/proc/$WP/status")
awk -v t=$((t1 - t0)) -v n=$((s1 - s0)) -v hz="$hz" -v rss="$rss" 'BEGIN {
    printf "busy worker: %d step reports/s, %.2f us of worker CPU per report, RSS %.1f MiB\n", n / 10, 1e6 * t / hz / n, rss / 1024 }'
"$B/tidectl" cancel 1 >/dev/null

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tide_ms=() mpi_ms=()
for i in 1 2 3 4 5; do
    a=$(date +%s%N); "$B/tidectl" submit --launcher mpi --workers 4 --wait -- true >/dev/null; b=$(date +%s%N)
    tide_ms+=($(((b - a) / 1000000)))
    a=$(date +%s%N); mpirun --oversubscribe -n 4 true; b=$(date +%s%N)
    mpi_ms+=($(((b - a) / 1000000)))
done
med() { printf '%s\n' "$@" | sort -n | sed -n 3p; }
echo "MPI job of true on 4 workers (2 simulated nodes), submit to SUCCEEDED: median $(med "${tide_ms[@]}") ms (runs: ${tide_ms[*]})"
echo "plain mpirun -n 4 true on one host:                               median $(med "${mpi_ms[@]}") ms (runs: ${mpi_ms[*]})"
