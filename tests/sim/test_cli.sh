#!/bin/sh
# tide-sim on the command line: one seed gives byte-identical stdout and CSV (no wall-clock values leak
# into them), another seed other bytes; -o json is JSON; a bad scenario exits 2 naming the key.
# usage: test_cli.sh TIDE_SIM SCENARIO_DIR
set -eu
SIM=$1
DIR=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

"$SIM" "$DIR/small.json" -q --csv "$T/a.csv" >"$T/a.out"
"$SIM" "$DIR/small.json" -q --csv "$T/b.csv" >"$T/b.out"
cmp -s "$T/a.out" "$T/b.out" || fail "two runs with one seed printed different summaries"
cmp -s "$T/a.csv" "$T/b.csv" || fail "two runs with one seed wrote different CSV"
"$SIM" "$DIR/small.json" -q --seed 7 --csv "$T/c.csv" >"$T/c.out"
cmp -s "$T/a.csv" "$T/c.csv" && fail "another seed wrote the same CSV"
[ "$(wc -l <"$T/a.csv")" -gt 500 ] || fail "the CSV has too few rows"
grep -q '^goodput' "$T/a.out" || fail "no goodput line in the table"

"$SIM" "$DIR/small.json" -q -o json >"$T/a.json"
if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert 0 < d["goodput"] <= 1, d["goodput"]' "$T/a.json" ||
        fail "-o json is not JSON with a goodput"
fi

# The run time goes to stderr only.
"$SIM" "$DIR/small.json" >"$T/d.out" 2>"$T/d.err"
grep -q 'run time' "$T/d.err" || fail "no run time on stderr"
grep -q 'run time' "$T/d.out" && fail "the run time leaked into stdout"

rc=0
"$SIM" "$DIR/small.json" --set 'workload.classes[1].gpus=-1' >"$T/e.out" 2>"$T/e.err" || rc=$?
[ "$rc" -eq 2 ] || fail "a bad override exited $rc, not 2"
grep -q 'workload.classes\[1\].gpus: expected a positive integer' "$T/e.err" || fail "the error does not name the key: $(cat "$T/e.err")"
rc=0
"$SIM" "$T/nonexistent.json" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a missing scenario exited $rc, not 2"

for f in "$DIR"/*.json; do
    "$SIM" "$f" --set days=0.01 -q >/dev/null || fail "$f does not run"
done
echo "ok"
