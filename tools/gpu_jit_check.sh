#!/usr/bin/env bash
# One call on the GPU machine for the JIT: build, every test (cuda label included), the MLP
# example (eager vs compiled), the first compiled step in fresh processes with an empty and a
# warm disk cache, JIT logs, bench/ember_bench (the seed MLP) over modes and batch sizes, and
# optionally compute-sanitizer over the CUDA JIT tests (SANITIZE=1). Logs land in $OUT.
#   [SANITIZE=1] bash tools/gpu_jit_check.sh [extra ember_bench run options]
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
BUILD_ONLY=1 bash .device/run.sh >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
build=${BUILD_DIR:-/tmp/build}
extra="$out/extra.txt"
echo "== tests"
( cd "$build" && ctest -j8 --output-on-failure --timeout 300 ) >"$out/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Skipped\)" "$out/ctest.log" | tail -25
echo "== example batch 64" | tee -a "$extra"
"$build/examples/mlp" --steps 500 --log-every 500 >>"$extra" 2>&1; tail -5 "$extra"
echo "== first compiled step in a fresh process: empty, then warm disk cache" | tee -a "$extra"
cache=$(mktemp -d)
for run in cold warm; do
  EMBER_CACHE_DIR=$cache EMBER_LOGS=cache,perf "$build/examples/mlp" --mode compiled --batch 64 \
    --steps 30 --warmup 20 >"$out/first.txt" 2>&1
  echo "$run: $(grep -E '^compiled|traced call 1|built in' "$out/first.txt" | tr '\n' ' ')" | tee -a "$extra"
  grep -cE "compiled|nvrtc|miss" "$out/first.txt" | sed "s/^/$run cache log lines mentioning compile\/miss: /" | tee -a "$extra"
done
rm -f "$out/first.txt"
echo "== jit logs (perf, autotune, fusion) for short compiled runs" | tee -a "$extra"
EMBER_LOGS=perf,autotune,fusion "$build/bench/ember_bench" run --workloads mlp \
  --modes default,max-autotune --batches 64,8192 --steps 10 --repeats 2 --warmup 5 \
  --no-first-step --no-kernel-count >>"$extra" 2>&1
grep -E "lowered|group|memory|autotune\]|not used|fallback" "$extra" | tail -24
if [ "${SANITIZE:-0}" = 1 ]; then
  echo "== compute-sanitizer memcheck over the CUDA JIT tests" | tee -a "$extra"
  compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/ember_tests" "[jit][cuda]" \
    >"$out/sanitizer.txt" 2>&1
  echo "compute-sanitizer exit code $?" | tee -a "$extra"
  tail -4 "$out/sanitizer.txt"
fi
echo "== bench ember_bench (seed MLP)"
"$build/bench/ember_bench" run --workloads mlp --json "$out/ember_bench.json" "$@" \
  >"$out/ember_bench.txt" 2>&1
tail -20 "$out/ember_bench.txt"
exit $rc
