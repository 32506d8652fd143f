#!/usr/bin/env bash
# make bench: runs every benchmark against the release build and prints its tables, with the commit.
#   bench/run.sh BUILD_DIR
set -euo pipefail
BUILD=${1:-build}
echo "tide benchmarks at $(git rev-parse --short HEAD 2>/dev/null || echo '?') on $(nproc) cores, $(date -u +%F)"
echo
"$BUILD/bin/tide-bench-core"
echo
"$BUILD/bin/tide-bench-placement"
echo
"$BUILD/bin/tide-bench-trainer"
echo
"$BUILD/bin/tide-bench-telemetry"
echo
"$BUILD/bin/tide-bench-steal"
echo
"$(dirname "$0")/steal.sh" "$BUILD"
echo
"$(dirname "$0")/worker_footprint.sh" "$BUILD" 30
