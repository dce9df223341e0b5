#!/usr/bin/env bash
# The transformer workloads in one GPU call (../shared/gpu/README.md): build, the CUDA tests
# (or only the attention and JIT ones), Ember's gpt_small and gpt_base rows in float32 and bf16
# beside PyTorch's, and the first compiled step with an empty cache.
#   bash tools/gpu_gpt_bench.sh
#   TESTS=attention bash tools/gpu_gpt_bench.sh     only the ctest cases matching "attention|jit"
#   SKIP_TORCH=1 SKIP_AMP=1 bash tools/gpu_gpt_bench.sh
#   PERF_LOG=gpt_small:32,mlp:8192:bf16 SKIP_BENCH=1 SKIP_TESTS=1 ...   device time of every step of one replay
#   FIRST_STEP=1   the first compiled step with an empty cache, and its perf/cache log in $OUT
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
B=${BUILD_DIR:-/tmp/build}
export PYTHONPATH=$PWD/.device/deps/usr/lib/python3/dist-packages:${PYTHONPATH:-}
OUT=/tmp/device-logs BUILD_ONLY=1 bash .device/run.sh >/tmp/build.txt 2>&1 ||
  { tail -30 /tmp/build.txt; grep -E "error" /tmp/device-logs/build.log | head -30; exit 1; }
echo "== built at ${SECONDS}s"
if [ -n "${FIRST_STEP:-}" ]; then  # the first compiled step in a new process, empty cache
  EMBER_CACHE_DIR=$(mktemp -d) timeout 120 $B/bench/ember_bench run --repeats 1 --steps 2 \
    --modes default --workloads gpt_small --batches 32 >/tmp/e4.txt 2>&1
  tail -3 /tmp/e4.txt
  # Where it goes: the traced calls, the precompile, each kernel's origin and the build, with
  # an empty cache and then the cache that run filled (one probe process each).
  cache=$(mktemp -d)
  for phase in cold warm; do
    echo "##### $phase cache" >>"$out/first_step.txt"
    EMBER_CACHE_DIR=$cache EMBER_LOGS=perf,cache timeout 100 $B/bench/ember_bench probe \
      --device cuda --workload gpt_small --batch 32 --mode reduce-overhead \
      >>"$out/first_step.txt" 2>&1
  done
  grep -E "precompiled|built in|traced call|^[0-9.]+$" "$out/first_step.txt" | head -12
fi
if [ -z "${SKIP_TESTS:-}" ]; then
  sel=(-L cuda); [ -n "${TESTS:-}" ] && sel=(-L cuda -R "attention|jit|slice_sums|sum_products|reduction|clip|amp|op table")
  ( cd "$B" && timeout 300 ctest "${sel[@]}" -j4 --timeout 150 --output-on-failure ) >"$out/ctest.txt" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|Timeout|SEGFAULT" "$out/ctest.txt" | head -20
fi
if [ -n "${PERF_LOG:-}" ]; then
  for row in ${PERF_LOG//,/ }; do  # workload:batch or workload:batch:amp
    w=${row%%:*}; rest=${row#*:}; b=${rest%%:*}; amp=none
    [ "$rest" != "$b" ] && amp=${rest#*:}
    echo "##### $row" >>"$out/perf.txt"
    EMBER_LOGS=perf timeout 90 $B/bench/ember_bench run --no-first-step --no-kernel-count \
      --repeats 1 --steps 2 --modes default --amp "$amp" --workloads "$w" --batches "$b" \
      >>"$out/perf.txt" 2>&1
  done
fi
[ -n "${SKIP_BENCH:-}" ] && { echo "== done at ${SECONDS}s"; exit 0; }
E="$B/bench/ember_bench run --no-first-step --repeats 5 --steps 20 --modes ${EMBER_MODES:-eager,default,reduce-overhead}"
timeout 240 $E --workloads gpt_small --batches 32 --json "$out/ember_gpt_small.json" >/tmp/e1.txt 2>&1
tail -5 /tmp/e1.txt
timeout 240 $E --workloads gpt_base --batches 16 --json "$out/ember_gpt_base.json" >/tmp/e2.txt 2>&1
tail -5 /tmp/e2.txt
if [ -z "${SKIP_AMP:-}" ]; then
  timeout 200 $E --workloads gpt_base --batches 16 --amp bf16 >/tmp/e3.txt 2>&1
  tail -5 /tmp/e3.txt
fi
if [ -z "${SKIP_TORCH:-}" ]; then
  T="python3 bench/torch_mlp.py --no-first-step --repeats 5 --steps 20 --modes ${TORCH_MODES:-eager,cuda-graph}"
  timeout 200 $T --workloads gpt_small --batches 32 --json "$out/torch_gpt_small.json" >/tmp/t1.txt 2>&1
  tail -4 /tmp/t1.txt
  timeout 200 $T --workloads gpt_base --batches 16 --json "$out/torch_gpt_base.json" >/tmp/t2.txt 2>&1
  tail -4 /tmp/t2.txt
  if [ -z "${SKIP_AMP:-}" ]; then
    timeout 200 $T --workloads gpt_base --batches 16 --amp bf16 >/tmp/t3.txt 2>&1
    tail -4 /tmp/t3.txt
  fi
fi
echo "== done at ${SECONDS}s"
