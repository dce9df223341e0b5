#!/usr/bin/env bash
# The recurrent workloads in one GPU call (../shared/gpu/README.md): build, the CUDA tests,
# Ember's lstm and gru2 rows beside PyTorch's, and optional probes.
#   bash tools/gpu_rnn_bench.sh
#   SKIP_TESTS=1 SKIP_TORCH=1 bash tools/gpu_rnn_bench.sh
#   PROBE_CNN=1    the compiled-CNN parity test repeated, serialized, and under initcheck
#   GEMM_TIMES=1   tools/small_gemm_time (the handwritten GEMMs against cuBLASLt)
#   SEQUENCE=1     examples/sequence --task add in both modes
#   RESNET_ND=1    resnet 128 with nondeterministic cuDNN algorithms admitted
#   PERF_LOG=lstm:64   device time of every step of one replay
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
B=${BUILD_DIR:-/tmp/build}
export PYTHONPATH=$PWD/.device/deps/usr/lib/python3/dist-packages:${PYTHONPATH:-}
OUT=/tmp/device-logs BUILD_ONLY=1 bash .device/run.sh >/tmp/build.txt 2>&1 ||
  { tail -30 /tmp/build.txt; grep -E "error" /tmp/device-logs/build.log | head -30; exit 1; }
echo "== built at ${SECONDS}s"
if [ -z "${SKIP_TESTS:-}" ]; then
  ( cd "$B" && timeout 300 ctest -L cuda -j4 --timeout 150 --output-on-failure ) >"$out/ctest.txt" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|Timeout|SEGFAULT" "$out/ctest.txt" | head -20
fi
if [ -n "${PROBE_CNN:-}" ]; then
  T="$B/tests/ember_tests"
  name="a compiled CNN training step equals eager on CUDA*"
  for i in 1 2 3; do timeout 60 $T "$name" 2>&1 | grep -E "test cases|after step" | head -3; done
  echo "-- serialized"
  CUDA_LAUNCH_BLOCKING=1 timeout 60 $T "$name" 2>&1 | grep -E "test cases|after step" | head -3
  echo "-- initcheck"
  timeout 200 compute-sanitizer --tool initcheck --print-limit 20 $T "$name" >"$out/initcheck.txt" 2>&1
  grep -E "Uninitialized|ERROR SUMMARY|at .*in " "$out/initcheck.txt" | sort | uniq -c | sort -rn | head -15
fi
echo "== benchmarks from ${SECONDS}s"
E="$B/bench/ember_bench run --no-first-step --repeats 5 --steps 30 --modes ${EMBER_MODES:-eager,default,reduce-overhead,max-autotune}"
timeout 240 $E --workloads lstm,gru2 --batches 64 --json "$out/ember_rnn.json" >/tmp/ember_rnn.txt 2>&1
tail -12 /tmp/ember_rnn.txt
if [ -z "${SKIP_TORCH:-}" ]; then
  timeout ${TORCH_TIMEOUT:-240} python3 bench/torch_mlp.py --no-first-step --repeats 5 --steps 30 \
    --modes ${TORCH_MODES:-eager,cuda-graph,default} --workloads lstm,gru2 --batches 64 \
    --json "$out/torch_rnn.json" >/tmp/torch_rnn.txt 2>&1
  tail -10 /tmp/torch_rnn.txt
fi
if [ -n "${GEMM_TIMES:-}" ]; then  # the small GEMMs against cuBLASLt, the lstm's products too
  timeout 60 $B/tools/small_gemm_time 2>&1 | tail -14
fi
if [ -n "${SEQUENCE:-}" ]; then  # the example on the GPU, both modes
  for m in compiled eager; do
    timeout 60 $B/examples/sequence --task add --steps 500 --mode $m 2>&1 | tail -3
  done
fi
if [ -n "${RESNET_ND:-}" ]; then
  timeout 120 $B/bench/ember_bench run --no-first-step --repeats 5 --steps 50 --nondeterministic \
    --modes default,reduce-overhead --workloads resnet --batches 128 >/tmp/resnet_nd.txt 2>&1
  tail -4 /tmp/resnet_nd.txt
fi
if [ -n "${PERF_LOG:-}" ]; then
  for wb in ${PERF_LOG//,/ }; do
    EMBER_LOGS=perf timeout 60 $B/bench/ember_bench run --no-first-step --no-kernel-count \
      --repeats 1 --steps 2 --modes default --workloads "${wb%%:*}" --batches "${wb##*:}" \
      >>"$out/perf.txt" 2>&1
  done
fi
echo "== done at ${SECONDS}s"
