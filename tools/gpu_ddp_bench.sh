#!/usr/bin/env bash
# The data-parallel rows in one GPU call on a machine of two GPUs (nvidia-h200-x2; see
# ../shared/gpu/README.md): build, the distributed tests, then Ember and PyTorch DDP on mlp and
# deep_mlp at a batch of 8192 per GPU on two ranks (DDP) and on one GPU alone, every mode, 1000
# timed steps per row (10 samples of 100), the ranks' parameters compared at the end of each row.
#   bash tools/gpu_ddp_bench.sh
#   SKIP_TESTS=1 SKIP_TORCH=1 BATCHES=1024 bash tools/gpu_ddp_bench.sh
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
B=${BUILD_DIR:-/tmp/build}
export PYTHONPATH=$PWD/.device/deps/usr/lib/python3/dist-packages:${PYTHONPATH:-}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}  # as the two-GPU machine has it (KINDS.md)
OUT=/tmp/device-logs BUILD_ONLY=1 bash .device/run.sh >/tmp/build.txt 2>&1 ||
  { tail -30 /tmp/build.txt; grep -E "error" /tmp/device-logs/build.log | head -30; exit 1; }
export LD_LIBRARY_PATH=$PWD/.device/deps/usr/lib/x86_64-linux-gnu:$PWD/.device/deps/usr/lib:${LD_LIBRARY_PATH:-}
echo "== built at ${SECONDS}s; $(nvidia-smi -L | wc -l) GPUs"
if [ -z "${SKIP_TESTS:-}" ]; then
  ( cd "$B" && timeout 240 ctest -L distributed -j2 --timeout 120 --output-on-failure ) \
    >"$out/ctest_distributed.txt" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|Timeout" "$out/ctest_distributed.txt" | head -20
fi
RUN="$B/distributed/launcher/ember-run --master-port 0"
BATCHES=${BATCHES:-8192}
E_ARGS="--workloads mlp,deep_mlp --batches $BATCHES --warmup 50 --steps 100 --repeats 10"
E_MODES=${EMBER_MODES:-eager,default,reduce-overhead,max-autotune}
T_MODES=${TORCH_MODES:-eager,default}
# Two ranks under DDP, then one GPU alone (no DDP: the baseline scaling is measured against).
echo "== ember, 2 ranks from ${SECONDS}s"
timeout 300 $RUN --nproc-per-node 2 $B/bench/ember_bench run --ddp $E_ARGS --modes $E_MODES \
  --json "$out/ember_ddp_2.json" >/tmp/e2.txt 2>&1
tail -${TAIL:-10} /tmp/e2.txt
echo "== ember, one GPU from ${SECONDS}s"
timeout 300 $B/bench/ember_bench run --no-first-step --no-kernel-count $E_ARGS --modes $E_MODES \
  --json "$out/ember_1.json" >/tmp/e1.txt 2>&1
tail -${TAIL:-10} /tmp/e1.txt
if [ -z "${SKIP_TORCH:-}" ]; then
  echo "== pytorch, 2 ranks from ${SECONDS}s"
  timeout 300 $RUN --nproc-per-node 2 python3 bench/torch_mlp.py --ddp $E_ARGS --modes $T_MODES \
    --json "$out/torch_ddp_2.json" >/tmp/t2.txt 2>&1
  tail -${TAIL:-8} /tmp/t2.txt
  echo "== pytorch, one GPU from ${SECONDS}s"
  timeout 300 python3 bench/torch_mlp.py --no-first-step --no-kernel-count $E_ARGS \
    --modes $T_MODES --json "$out/torch_1.json" >/tmp/t1.txt 2>&1
  tail -${TAIL:-8} /tmp/t1.txt
fi
echo "== done at ${SECONDS}s"
