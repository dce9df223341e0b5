#!/usr/bin/env bash
# The conv workloads in one GPU call (../shared/gpu/README.md): build, the CUDA tests, Ember's
# cnn and resnet rows, the same on PyTorch, and per-kernel times of one compiled cnn step.
#   bash tools/gpu_conv_bench.sh            everything
#   SKIP_TESTS=1 SKIP_TORCH=1 bash tools/gpu_conv_bench.sh
#   KERNELS=cnn KERNEL_BATCH=64 bash tools/gpu_conv_bench.sh     also ncu times of one cnn step
#   AUTOTUNE_LOG=cnn:64 PERF_LOG=cnn:64   cuDNN's candidates; device time of every step of a replay
#   RESNET_ND=1    also resnet 128 with nondeterministic cuDNN algorithms admitted (PyTorch's default)
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
echo "== benchmarks from ${SECONDS}s"
E="$B/bench/ember_bench run --no-first-step --repeats 5 --steps 50 --modes ${EMBER_MODES:-eager,default,reduce-overhead,max-autotune}"
timeout 200 $E --workloads cnn --batches 64,256 --json "$out/ember_cnn.json" >/tmp/ember_cnn.txt 2>&1
tail -8 /tmp/ember_cnn.txt
timeout 120 $E --workloads resnet --batches 128 --json "$out/ember_resnet.json" >/tmp/ember_resnet.txt 2>&1
tail -5 /tmp/ember_resnet.txt
T="python3 bench/torch_mlp.py --no-first-step --repeats 5 --steps 50 --modes ${TORCH_MODES:-eager,cuda-graph,default}"
if [ -z "${SKIP_TORCH:-}" ]; then
  timeout 200 $T --workloads cnn --batches 64,256 --json "$out/torch_cnn.json" >/tmp/torch_cnn.txt 2>&1
  tail -8 /tmp/torch_cnn.txt
  timeout 150 $T --workloads resnet --batches 128 --json "$out/torch_resnet.json" >/tmp/torch_resnet.txt 2>&1
  tail -5 /tmp/torch_resnet.txt
fi
if [ -n "${RESNET_ND:-}" ]; then
  timeout 120 $E --nondeterministic --workloads resnet --batches 128 \
    --json "$out/ember_resnet_nd.json" >/tmp/ember_resnet_nd.txt 2>&1
  tail -5 /tmp/ember_resnet_nd.txt
fi
if [ -n "${KERNELS:-}" ]; then
  timeout 120 ncu --clock-control none --cache-control none --launch-skip 400 --launch-count 40 \
    --metrics gpu__time_duration.sum --csv $B/bench/ember_bench run --no-first-step \
    --no-kernel-count --repeats 1 --steps 5 --modes default --workloads "$KERNELS" \
    --batches "${KERNEL_BATCH:-64}" ${KERNEL_ARGS:-} >/tmp/k.csv 2>&1
  python3 tools/ncu_table.py /tmp/k.csv | tee "$out/kernels.txt" | head -${KERNEL_LINES:-50}
fi
if [ -n "${AMP_ROWS:-}" ]; then  # the bf16 MLP rows of both sides, e.g. AMP_ROWS=8192
  timeout 100 $B/bench/ember_bench run --no-first-step --no-kernel-count --repeats 5 --steps 50 \
    --workloads mlp,deep_mlp --modes reduce-overhead --batches "$AMP_ROWS" --amp bf16 \
    >/tmp/ember_amp.txt 2>&1
  tail -4 /tmp/ember_amp.txt
  timeout 120 python3 bench/torch_mlp.py --no-first-step --no-kernel-count --repeats 5 --steps 50 \
    --workloads mlp,deep_mlp --modes eager,cuda-graph --batches "$AMP_ROWS" --amp bf16 \
    >/tmp/torch_amp.txt 2>&1
  tail -6 /tmp/torch_amp.txt
fi
if [ -n "${AUTOTUNE_LOG:-}" ]; then  # cuDNN's candidates per problem, e.g. AUTOTUNE_LOG=cnn:64,resnet:128
  for wb in ${AUTOTUNE_LOG//,/ }; do
    EMBER_LOGS=autotune timeout 60 $B/bench/ember_bench run --no-first-step --no-kernel-count \
      --repeats 1 --steps 2 --modes default --workloads "${wb%%:*}" --batches "${wb##*:}" \
      >>"$out/autotune.txt" 2>&1
  done
  grep -c "cuDNN" "$out"/autotune.txt
fi
if [ -n "${PERF_LOG:-}" ]; then  # device time of every step of one replay, e.g. PERF_LOG=cnn:64
  for wb in ${PERF_LOG//,/ }; do
    EMBER_LOGS=perf timeout 60 $B/bench/ember_bench run --no-first-step --no-kernel-count \
      --repeats 1 --steps 2 --modes default --workloads "${wb%%:*}" --batches "${wb##*:}" \
      >>"$out/perf.txt" 2>&1
  done
fi
if [ -n "${TORCH_KERNELS:-}" ]; then  # ncu times of PyTorch's eager step, e.g. TORCH_KERNELS=cnn
  timeout 150 ncu --clock-control none --cache-control none --launch-skip 300 --launch-count 40 \
    --metrics gpu__time_duration.sum --csv python3 bench/torch_mlp.py --no-first-step \
    --no-kernel-count --repeats 1 --steps 5 --warmup 3 --modes eager --workloads "$TORCH_KERNELS" \
    --batches "${KERNEL_BATCH:-64}" >/tmp/tk.csv 2>&1
  python3 tools/ncu_table.py /tmp/tk.csv | tee "$out/torch_kernels.txt" | head -${KERNEL_LINES:-50}
fi
echo "== done at ${SECONDS}s"
