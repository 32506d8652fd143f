#!/bin/sh
# tide-sim burst on the command line: the table's shape, burst off lends nothing, a pulse shorter than
# the cost of a change is never lent for (while the same pulse is at a small cost), one seed gives
# identical bytes, -o json and --sweep -o json are JSON, a bad flag exits 2. No timings are checked.
# usage: test_burst.sh TIDE_SIM
set -eu
SIM=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# field MODE COLUMN FILE: a column of a mode's row (1 = mode, 2 = wall s, ... 7 = lends).
field() {
    awk -v m="$1" -v c="$2" '$1 == m { print $c; found = 1 } END { if (!found) exit 1 }' "$3"
}

"$SIM" burst --ranks 8 --pulse-length 5 --cycles 10 --cost-ms 6000 >"$T/long.out"
"$SIM" burst --ranks 8 --pulse-length 5 --cycles 10 --cost-ms 6000 >"$T/long2.out"
cmp -s "$T/long.out" "$T/long2.out" || fail "two runs with one seed printed different tables"
head -1 "$T/long.out" | grep -q '^tide-sim burst: 8 ranks' || fail "no header: $(head -1 "$T/long.out")"
grep -q '^mode .*wall s.*lends.*goodput' "$T/long.out" || fail "no column header"
for m in off detached resize; do
    field $m 7 "$T/long.out" >/dev/null || fail "no row for $m"
done
[ "$(field off 7 "$T/long.out")" = 0 ] || fail "burst off lent"
[ "$(field off 5 "$T/long.out")" = 0 ] || fail "burst off has lent GPU-seconds"
[ "$(field resize 7 "$T/long.out")" = 0 ] || fail "a 5 s pulse was lent for at a 6 s resize cost"
[ "$(field detached 7 "$T/long.out")" = 0 ] || fail "a 5 s pulse was lent for at a 6 s start cost"

"$SIM" burst --ranks 8 --pulse-length 5 --cycles 10 --cost-ms 300 >"$T/short.out"
[ "$(field off 7 "$T/short.out")" = 0 ] || fail "burst off lent"
[ "$(field resize 7 "$T/short.out")" -gt 0 ] || fail "a 5 s pulse was not lent for at a 0.3 s resize cost"
[ "$(field detached 7 "$T/short.out")" -gt 0 ] || fail "a 5 s pulse was not lent for at a 0.3 s start cost"
[ "$(field detached 5 "$T/short.out")" -gt 0 ] || fail "lending left no lent GPU-seconds"
"$SIM" burst --ranks 8 --pulse-length 5 --cycles 10 --cost-ms 300 --seed 9 >"$T/seed9.out"
cmp -s "$T/short.out" "$T/seed9.out" && fail "another seed printed the same table"

if command -v python3 >/dev/null; then
    "$SIM" burst --ranks 8 --cycles 5 -o json >"$T/a.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["off"]["lends"] == 0 and 0 < d["detached"]["goodput"] <= 1, d' "$T/a.json" ||
        fail "-o json is not the JSON expected"
    "$SIM" burst --ranks 4 --cycles 2 --sweep -o json >"$T/s.json"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["rows"]) == 15, len(d["rows"])' "$T/s.json" ||
        fail "--sweep -o json does not hold 15 rows"
fi

rc=0
"$SIM" burst --ranks 0 >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--ranks 0 exited $rc, not 2"
rc=0
"$SIM" burst --pulse-length 10 --pulse-period 5 >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a period shorter than the pulse exited $rc, not 2"
rc=0
"$SIM" burst --cost-ms x >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--cost-ms x exited $rc, not 2"
echo "ok"
