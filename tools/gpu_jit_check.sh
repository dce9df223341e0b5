#!/usr/bin/env bash
# One call on the GPU machine for the JIT: build, every test (cuda label included), the MLP
# example eager vs compiled at batch 64 and 8192. Logs land in $OUT.
#   bash tools/gpu_jit_check.sh
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
"$build/examples/mlp" --steps 500 --log-every 500 >"$out/mlp64.txt" 2>&1; tail -7 "$out/mlp64.txt"
echo "== example batch 8192"
"$build/examples/mlp" --steps 200 --batch 8192 --log-every 200 >"$out/mlp8192.txt" 2>&1
tail -7 "$out/mlp8192.txt"
exit $rc
