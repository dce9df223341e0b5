#!/usr/bin/env bash
# Before/after in one GPU call (../shared/gpu/README.md): the working tree and another commit,
# both built on the GPU machine, each row timed alternately (after, before, after, before, ...)
# so the two sides share the card, its clocks and the call. First, on this machine:
#   git archive <commit> | (rm -rf .device/base && mkdir -p .device/base && tar -x -C .device/base)
# then, on the GPU machine with .device carried:
#   bash tools/gpu_ab.sh
#   ROWS="mlp:64 gpt_small:32 gpt_base:16:bf16" ROUNDS=2 MODE=reduce-overhead SKIP_TESTS=1 TORCH=1 bash tools/gpu_ab.sh
# The cuda tests run on the working tree's build unless SKIP_TESTS is set; TORCH=1 adds PyTorch's
# one-graph step for each row. Lines are ember_bench's table rows, prefixed "after" / "before".
# PREBUILT=1: both trees were built on this machine by tools/gpu_prebuild.sh (no build there,
# no .device/base; carry .device with .device/prebuilt.tar.xz in it).
set -uo pipefail
root=$PWD; out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONPATH=$root/.device/deps/usr/lib/python3/dist-packages:${PYTHONPATH:-}
export LD_LIBRARY_PATH=$root/.device/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
if [ -n "${PREBUILT:-}" ]; then  # both trees built ahead by tools/gpu_prebuild.sh
  [ -f .device/prebuilt.tar.xz ] || { echo "no .device/prebuilt.tar.xz: see tools/gpu_prebuild.sh"; exit 2; }
  tar -xJf .device/prebuilt.tar.xz || exit 1
  built=$(sed -n 's/^path //p' build/gpu-after/PREBUILT)
  # The binaries name the checkout they were built in (fixtures, the NVRTC worker).
  if [ "$built" != "$root" ]; then
    mkdir -p "$(dirname "$built")"
    [ -e "$built" ] || ln -s "$root" "$built" || exit 1
  fi
  N=$built/build/gpu-after; A=$built/build/gpu-before
  cat build/gpu-after/PREBUILT
else
  [ -d .device/base ] || { echo "no .device/base: see the header of tools/gpu_ab.sh"; exit 2; }
  N=${BUILD_DIR:-$root/build/gpu}; A=/tmp/build-base
  BUILD_DIR=$N BUILD_ONLY=1 OUT=/tmp/ab-logs bash .device/run.sh >/tmp/ab-build.txt 2>&1 ||
    { tail -20 /tmp/ab-build.txt; grep -m20 error /tmp/ab-logs/build.log; exit 1; }
  ( cd .device/base && cmake -S . -B $A -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_PREFIX_PATH=$root/.device/deps/usr \
      -DEMBER_BUILD_TESTS=OFF >/tmp/ab-base-cfg.txt 2>&1 &&
    cmake --build $A -j"$(nproc)" --target ember_bench ember-nvrtc-worker >/tmp/ab-base.txt 2>&1 ) ||
    { tail -5 /tmp/ab-base-cfg.txt; grep -m10 error /tmp/ab-base.txt; exit 1; }
fi
echo "== both built at ${SECONDS}s"
if [ -z "${SKIP_TESTS:-}" ]; then
  ( cd "$N" && timeout 300 ctest -L cuda -j4 --timeout 150 --output-on-failure ) >"$out/ctest.txt" 2>&1
  grep -E "tests passed|tests failed|\(Failed\)|Timeout|SEGFAULT" "$out/ctest.txt" | head -20
fi
R="run --no-first-step --no-kernel-count --repeats 5 --steps 20 --modes ${MODE:-reduce-overhead}"
for row in ${ROWS:-mlp:64 gpt_small:32}; do  # workload:batch or workload:batch:amp
  w=${row%%:*}; rest=${row#*:}; b=${rest%%:*}; amp=none
  [ "$rest" != "$b" ] && amp=${rest#*:}
  for i in $(seq "${ROUNDS:-2}"); do
    for side in after before; do
      [ $side = after ] && E=$N || E=$A
      echo "$side $(timeout 120 $E/bench/ember_bench $R --amp "$amp" --workloads "$w" --batches "$b" 2>&1 | tail -1)"
    done
  done
  [ -n "${TORCH:-}" ] && timeout 120 python3 bench/torch_mlp.py --no-first-step --no-kernel-count \
    --repeats 5 --steps 20 --modes cuda-graph --amp "$amp" --workloads "$w" --batches "$b" 2>&1 | tail -1
done
echo "== done at ${SECONDS}s"
