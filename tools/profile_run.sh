#!/usr/bin/env bash
# One GPU call for performance work: build (no benchmarks), the CUDA tests, the first-call
# breakdown, and EMBER_LOGS=perf runs of the example (per-step device times of one replay).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
EMBER_CMAKE_ARGS="-DEMBER_BUILD_BENCH=OFF ${EMBER_CMAKE_ARGS:-}" BUILD_ONLY=1 bash .device/run.sh \
  >"$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
B=/tmp/build
( cd $B && ctest -L cuda -j8 --timeout 300 --output-on-failure ) >"$out/ctest.txt" 2>&1
grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|Timeout" "$out/ctest.txt" | tail -8
$B/tools/first_call_parts 64 | tee "$out/first_parts.txt"
for b in ${BATCHES:-64 1024 8192}; do
  EMBER_LOGS=perf $B/examples/mlp --batch $b --steps 300 --mode both >"$out/perf_$b.txt" 2>&1
  grep -E "device time per step|us/step|per step" "$out/perf_$b.txt" | head -4
done
c=$(mktemp -d)
for r in cold warm; do
  EMBER_CACHE_DIR=$c EMBER_LOGS=perf $B/examples/mlp --batch 64 --steps 8 --mode compiled \
    >"$out/first_$r.txt" 2>&1
  grep -h -E "traced call|built in|compiled|first" "$out/first_$r.txt" | head -8
done
