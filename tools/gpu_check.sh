#!/usr/bin/env bash
# One call on the GPU machine (../shared/gpu/README.md): build, make the PyTorch parity fixtures,
# run every test (cuda label included), then the benchmarks and the example. Logs and JSON land
# in $OUT. Usage there, from the repository root with .device carried along:
#   bash tools/gpu_check.sh
set -uo pipefail
out=${OUT:-/tmp/out}
mkdir -p "$out"
BUILD_ONLY=1 bash .device/run.sh || exit 1
build=${BUILD_DIR:-/tmp/build}
echo "== fixtures"
mkdir -p tests/fixtures
PYTHONUNBUFFERED=1 python3 tools/make_parity_fixtures.py --out tests/fixtures >"$out/fixtures.log" 2>&1 \
  || { tail -20 "$out/fixtures.log"; }
cp tests/fixtures/*.safetensors "$out/" 2>/dev/null
echo "== tests"
( cd "$build" && ctest -j8 --output-on-failure --timeout 300 ) >"$out/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Skipped\)" "$out/ctest.log" | tail -25
echo "== bench ops"
"$build/bench/ops" --json "$out/ops.json" >"$out/bench_ops.txt" 2>&1; tail -40 "$out/bench_ops.txt"
echo "== bench mlp step (eager and compiled)"
"$build/bench/ember_bench" run --workloads mlp --modes eager,default --json "$out/ember_bench.json" >"$out/ember_bench.txt" 2>&1; tail -15 "$out/ember_bench.txt"
echo "== example"
"$build/examples/mlp" --steps 300 >"$out/mlp.txt" 2>&1; tail -8 "$out/mlp.txt"
exit $rc
