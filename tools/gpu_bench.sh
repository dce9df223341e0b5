#!/usr/bin/env bash
# The README's performance figures in GPU calls (../shared/gpu/README.md): Ember's benchmark and
# the identical PyTorch workloads on the same machine, then one merged report.
#   bash tools/gpu_bench.sh ember    build, every test, the perf profile, bench/ember_bench
#   bash tools/gpu_bench.sh torch    bench/torch_mlp.py with PYTORCH_ARGS (and a second part with
#                                    PYTORCH_ARGS2, merged into one file)
# Results land in $OUT (ember.json, pytorch.json and the logs); the merged report is made from
# them anywhere: ember_bench report ember.json --torch pytorch.json --svg ... --markdown ...
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
phase=${1:-ember}
B=${BUILD_DIR:-/tmp/build}
export OUT=/tmp/device-logs  # .device/run.sh's configure/build logs stay on the machine
if [ "$phase" = ember ]; then
  BUILD_ONLY=1 bash .device/run.sh >/tmp/build.txt 2>&1 || { tail -40 /tmp/build.txt; exit 1; }
  ( cd "$B" && ctest -j8 --timeout 300 --output-on-failure ) >"$out/ctest.txt" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|\(Timeout\)|Skipped\)" "$out/ctest.txt" | tail -12
  for b in 64 8192; do
    EMBER_LOGS=perf "$B/examples/mlp" --batch $b --steps 200 --mode compiled 2>&1 |
      grep -v "^\[ember\] \[+[0-9.]* ms\] \[perf\] fn: group\|gemm:" >>"$out/perf.txt"
  done
  "$B/tools/first_call_parts" 64 >>"$out/perf.txt" 2>&1
  "$B/bench/ember_bench" run --json "$out/ember.json" ${EMBER_BENCH_ARGS:-} >"$out/ember.txt" 2>&1
  echo "ember_bench exit $?"; tail -40 "$out/ember.txt"
  if [ -n "${PYTORCH_SMOKE:-}" ]; then
    timeout 200 python3 bench/torch_mlp.py $PYTORCH_SMOKE --json /tmp/smoke.json >"$out/pytorch_smoke.txt" 2>&1
    echo "torch smoke exit $?"; tail -30 "$out/pytorch_smoke.txt"
  fi
else
  python3 bench/torch_mlp.py --json "$out/pytorch.json" ${PYTORCH_ARGS:-} >"$out/pytorch.txt" 2>&1
  echo "torch_mlp exit $?"; tail -40 "$out/pytorch.txt"
  if [ -n "${PYTORCH_ARGS2:-}" ]; then
    timeout "${PART2_TIMEOUT:-400}" python3 bench/torch_mlp.py --json /tmp/pytorch2.json $PYTORCH_ARGS2 >>"$out/pytorch.txt" 2>&1
    echo "torch_mlp (second part) exit $?"; tail -12 "$out/pytorch.txt"
    python3 bench/torch_mlp.py --merge "$out/pytorch.json" /tmp/pytorch2.json --json /tmp/merged.json &&
      mv /tmp/merged.json "$out/pytorch.json"
  fi
fi
