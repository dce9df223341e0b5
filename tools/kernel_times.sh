#!/usr/bin/env bash
# Per-kernel device times of the MLP's compiled step, from Nsight Compute, for one GPU call
# (../shared/gpu/README.md): builds the project (no benchmarks), then for each batch size runs
# examples/mlp under ncu (clocks and caches left alone, as METHOD.md asks) and prints one line
# per kernel of a few steady-state steps: µs, grid, block, name. With DETAIL set (a regex of
# kernel names), also the Speed Of Light, occupancy, warp-state and launch sections of those
# kernels at the last batch size.
#   BATCHES="64 8192" bash tools/kernel_times.sh
#   DETAIL="small_n_gemm_rows|ember_fused_reduce" bash tools/kernel_times.sh
# A call returns at most 8 files: keep what is printed to a few summaries.
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
B=${BUILD_DIR:-/tmp/build}
EMBER_CMAKE_ARGS="-DEMBER_BUILD_BENCH=OFF ${EMBER_CMAKE_ARGS:-}" BUILD_ONLY=1 bash .device/run.sh \
  >"$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
last=""
for b in ${BATCHES:-64 8192}; do
  last=$b
  echo "== batch $b: µs per kernel (ncu gpu__time_duration), ${LAUNCHES:-24} launches after the first 600"
  ncu --clock-control none --cache-control none --launch-skip 600 --launch-count "${LAUNCHES:-24}" \
    --metrics gpu__time_duration.sum --csv "$B/examples/mlp" --batch "$b" --steps 100 \
    --mode compiled --log-every 1000 >/tmp/kernel_times.csv 2>&1
  python3 tools/ncu_table.py /tmp/kernel_times.csv | tee "$out/kernels_$b.txt"
done
if [ -n "${DETAIL:-}" ]; then
  ncu --clock-control none --cache-control none -k "regex:$DETAIL" --launch-skip 30 \
    --launch-count "${DETAIL_COUNT:-8}" --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats "$B/examples/mlp" --batch "$last" --steps 40 \
    --mode compiled --log-every 1000 >/tmp/kernel_detail.txt 2>&1
  grep -E "Context [0-9]|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|SM Active Cycles|Elapsed Cycles|Achieved Occupancy|Registers Per|Theoretical Occupancy|Block Limit Reg|Warp Cycles Per Issued" \
    /tmp/kernel_detail.txt | cut -c1-160 | tee "$out/kernel_detail.txt"
fi
