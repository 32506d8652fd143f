#!/usr/bin/env bash
# make dst: the deterministic simulation over many seeds, split into JOBS contiguous seed ranges run at once
# (tests/dst/README.md). Prints each range's summary and, for a failing seed, the command that replays it.
#   scripts/dst.sh TIDE_DST START_SEED SEEDS JOBS [tide-dst switches...]
# Exit status: 0 when every range passed, 1 otherwise.
set -uo pipefail
dst=$1 start=$2 seeds=$3 jobs=$4
shift 4
[ "$jobs" -ge 1 ] || jobs=1
[ "$seeds" -ge "$jobs" ] || jobs=$seeds
out=$(mktemp -d "${TMPDIR:-/tmp}/tide-dst-XXXXXX")
trap 'rm -rf "$out"' EXIT
t0=$(date +%s)
echo "dst: seeds $start..$((start + seeds - 1)) ($seeds) in $jobs ranges; $(nproc) cores; $dst $*"
pids=()
per=$(( (seeds + jobs - 1) / jobs ))
for ((j = 0; j < jobs; j++)); do
    from=$((start + j * per))
    n=$per
    [ $((j * per + n)) -le "$seeds" ] || n=$((seeds - j * per))
    [ "$n" -gt 0 ] || break
    "$dst" --seed "$from" --seeds "$n" -q "$@" >"$out/$j.log" 2>&1 &
    pids+=("$!")
done
rc=0
for j in "${!pids[@]}"; do
    if ! wait "${pids[$j]}"; then
        rc=1
    fi
done
for j in "${!pids[@]}"; do
    echo "--- range $j"
    cat "$out/$j.log"
done
echo "dst: $seeds seeds in $(( $(date +%s) - t0 )) s: $([ $rc -eq 0 ] && echo 'all passed' || echo 'FAILED (see above)')"
exit $rc
