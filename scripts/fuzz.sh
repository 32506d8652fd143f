#!/usr/bin/env bash
# make fuzz: every libFuzzer target (tests/fuzz) for FUZZ_S seconds each, JOBS at a time, on a scratch copy of its
# committed corpus (clang, ASan+UBSan; docs/transport.md, "Testing and fuzzing"). New inputs stay in the scratch
# copy unless FUZZ_KEEP=1 merges them into tests/fuzz/corpus/TARGET (libFuzzer -merge=1: only inputs that add
# coverage). A crash, leak or timeout leaves its input in FUZZ_OUT (printed) and fails the run.
#   scripts/fuzz.sh BUILD_DIR SECONDS JOBS [TARGET...]
set -uo pipefail
build=$1 secs=$2 jobs=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
CC=${CC:-clang}
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIDE_FUZZ=ON \
    -DTIDE_SANITIZE=ON -DBUILD_TESTING=ON >/dev/null || exit 1
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(sed -n 's/^tide_fuzz_target(\([a-z_0-9]*\) .*/\1/p' "$root/tests/fuzz/CMakeLists.txt")
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >/dev/null || exit 1
out=${FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tide-fuzz-XXXXXX")}
echo "fuzz: ${#targets[@]} targets x ${secs}s, $jobs at a time; scratch and crashes in $out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
run_one() {
    local t=$1 bin dir
    bin=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
    dir="$out/$t"
    mkdir -p "$dir/corpus" "$dir/crashes"
    cp -r "$root/tests/fuzz/corpus/$t/." "$dir/corpus/" 2>/dev/null
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$dir/crashes/" "$dir/corpus" >"$dir/log" 2>&1
    local rc=$?
    local execs
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
    if [ $rc -eq 0 ]; then
        echo "fuzz: $t: ${execs:-?} executions in ${secs}s, no crash; corpus $(ls "$dir/corpus" | wc -l) inputs"
        if [ "${FUZZ_KEEP:-0}" = 1 ]; then
            "$bin" -merge=1 "$root/tests/fuzz/corpus/$t" "$dir/corpus" >>"$dir/log" 2>&1
        fi
    else
        echo "fuzz: $t: FAILED (exit $rc) after ${execs:-?} executions: $(ls "$dir/crashes" | head -3 | tr '\n' ' ')"
        tail -30 "$dir/log"
    fi
    return $rc
}
rc=0
running=0
pids=()
for t in "${targets[@]}"; do
    run_one "$t" &
    pids+=("$!")
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || rc=1
        running=$((running - 1))
    fi
done
while [ "$running" -gt 0 ]; do
    wait -n || rc=1
    running=$((running - 1))
done
echo "fuzz: $([ $rc -eq 0 ] && echo 'every target ran clean' || echo FAILED)"
exit $rc
