#!/usr/bin/env bash
# One call on the GPU machine for the JIT: build, every test (cuda label included), the MLP
# example (eager vs compiled) and bench/mlp_step over modes and batch sizes. Logs land in $OUT.
#   bash tools/gpu_jit_check.sh [extra mlp_step options]
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
BUILD_ONLY=1 bash .device/run.sh >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
build=${BUILD_DIR:-/tmp/build}
echo "== tests"
( cd "$build" && ctest -j8 --output-on-failure --timeout 300 ) >"$out/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Skipped\)" "$out/ctest.log" | tail -25
echo "== example batch 64"
"$build/examples/mlp" --steps 500 --log-every 500 >"$out/mlp64.txt" 2>&1; tail -6 "$out/mlp64.txt"
echo "== jit logs (perf, cache, autotune, fusion) for one short compiled run"
EMBER_LOGS=perf,cache,autotune,fusion "$build/bench/mlp_step" --modes default,max-autotune \
  --batches 64 --steps 10 --repeats 2 --warmup 5 >"$out/jit_logs.txt" 2>&1
grep -E "lowered|group|graph|autotune|not used|fallback" "$out/jit_logs.txt" | head -20
echo "== bench mlp_step"
"$build/bench/mlp_step" --modes eager,default,reduce-overhead,max-autotune --json "$out/mlp_step.json" "$@" \
  >"$out/mlp_step.txt" 2>&1
tail -17 "$out/mlp_step.txt"
exit $rc
