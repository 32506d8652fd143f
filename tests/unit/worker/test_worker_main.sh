#!/bin/sh
# Smoke test of tide-worker's main(): flags, exit statuses and SIGTERM, run on a build of main.c whose
# transport is the fake (it never answers, so the worker stays unregistered). $1: that binary.
set -u
BIN=$1
unset SLURM_JOB_ID SLURM_STEP_ID SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURMD_NODENAME SLURM_STEP_GPUS
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tide-worker-main-XXXXXX")
PID=
cleanup() {
    [ -n "$PID" ] && kill -KILL "$PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$BIN" --help >"$TMP/out" 2>&1 || fail "--help exited $?"
grep -q -- "--stop-grace-ms" "$TMP/out" || fail "--help text"

"$BIN" --bogus >"$TMP/out" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--bogus exited $rc"
[ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "--bogus: not one line: $(cat "$TMP/out")"
grep -q -- "--bogus" "$TMP/out" || fail "--bogus not named: $(cat "$TMP/out")"

"$BIN" --gpu-index x >"$TMP/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q -- "--gpu-index" "$TMP/out" || fail "--gpu-index x: $rc $(cat "$TMP/out")"

"$BIN" --ckpt-keep-hot 0 >"$TMP/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q -- "--ckpt-keep-hot" "$TMP/out" || fail "--ckpt-keep-hot 0: $rc $(cat "$TMP/out")"

"$BIN" --gpu sim:h999 --data-dir "$TMP/d0" >"$TMP/out" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "unknown model exited $rc"
grep -q "sim:h100, sim:a100, sim:l4, sim:b200" "$TMP/out" || fail "known models not listed: $(cat "$TMP/out")"

# Under srun with a malformed Slurm environment: exit 2, the variable named, nothing started.
SLURM_JOB_ID=9 SLURM_LOCALID=2 SLURM_STEP_GPUS=0,1 "$BIN" --data-dir "$TMP/ds" >"$TMP/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "SLURM_STEP_GPUS" "$TMP/out" || fail "bad Slurm environment: $rc $(cat "$TMP/out")"

# Runs, creates its data dir 0700 and its hot tier (with a token, a mirror too), and exits 0 on SIGTERM, its
# empty hot tier removed.
TIDE_TOKEN=t "$BIN" --scheduler 127.0.0.1:1 --advertise 127.0.0.1 --node n1 --data-dir "$TMP/d1/x" \
    --ckpt-hot "$TMP/hot" --log-level debug >"$TMP/log" 2>&1 &
PID=$!
i=0
until grep -q "connecting to 127.0.0.1:1" "$TMP/log"; do
    i=$((i + 1)); [ $i -lt 1000 ] || fail "worker did not start: $(cat "$TMP/log")"
    kill -0 "$PID" 2>/dev/null || fail "worker died: $(cat "$TMP/log")"
    sleep 0.01
done
[ "$(stat -c %a "$TMP/d1/x")" = 700 ] || fail "data dir mode $(stat -c %a "$TMP/d1/x")"
[ -d "$TMP/d1/x/ranks" ] && [ -d "$TMP/d1/x/logs" ] || fail "data dir layout"
[ -d "$TMP/hot/mirror" ] || fail "no hot tier with its mirror: $(ls -R "$TMP")"
grep -q "worker n1/gpu0 (sim:h100, n1)" "$TMP/log" || fail "default id: $(cat "$TMP/log")"
kill -TERM "$PID"
wait "$PID"; rc=$?
PID=
[ $rc -eq 0 ] || fail "SIGTERM: exit $rc: $(cat "$TMP/log")"
[ ! -e "$TMP/hot" ] || fail "the empty hot tier outlived the worker: $(find "$TMP/hot")"
echo "ok"
