#!/usr/bin/env bash
# Builds on this machine, ahead of a GPU call, what tools/gpu_ab.sh would otherwise build on the
# GPU machine (sm_90, Release): the checked-out tree's cuda tests and ember_bench, and a base
# commit's ember_bench. A call spends 4-5 of its minutes building two trees on 16 cores; here
# the build takes longer but costs no device time and can run while device requests are refused.
#   bash tools/gpu_prebuild.sh [BASE_COMMIT]     (default main; from the repository root)
# leaves .device/prebuilt.tar.xz (the binaries and the after tree's ctest files, about 14 MB),
# then, with carry [".device"] (no .device/base or deps needed):
#   PREBUILT=1 ROWS="..." bash tools/gpu_ab.sh
# The build directories are build/gpu-after and build/gpu-before under this checkout's path,
# which the binaries carry (test fixtures, the NVRTC worker): gpu_ab.sh links that path to the
# copy on the GPU machine. Gloo is left out (the GPU machine has no libgloo, so there too the
# multi-process tests are not registered).
set -euo pipefail
root=$PWD
base=${1:-main}
after=$root/build/gpu-after
before=$root/build/gpu-before
jobs=${JOBS:-$(nproc)}
configure() {  # source, build dir, extra arguments
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DEMBER_CUDA=ON -DEMBER_GLOO=OFF -DEMBER_BUILD_EXAMPLES=OFF "${@:3}" >"$2.configure.log"
}
mkdir -p "$root/build" "$root/.device"
configure "$root" "$after"
nice cmake --build "$after" -j"$jobs" --target ember_tests ember_bench ember-nvrtc-worker
# The base's sources: only files whose content changed are rewritten (stamped now, whatever the
# commit's date), so an unchanged file keeps its time stamp and the base rebuilds only what the
# new base commit changed.
src=$root/build/gpu-before-src fresh=$root/build/gpu-before-fresh
rm -rf "$fresh" && mkdir -p "$fresh" "$src"
git archive "$base" | tar -x -C "$fresh"
(cd "$fresh" && find . -type f) | while IFS= read -r f; do
  cmp -s "$fresh/$f" "$src/$f" || { mkdir -p "$(dirname "$src/$f")" && cp "$fresh/$f" "$src/$f"; }
done
(cd "$src" && find . -type f) | while IFS= read -r f; do [ -e "$fresh/$f" ] || rm -f "$src/$f"; done
rm -rf "$fresh"
configure "$src" "$before" -DEMBER_BUILD_TESTS=OFF
nice cmake --build "$before" -j"$jobs" --target ember_bench ember-nvrtc-worker
{
  echo "path $root"
  echo "after $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes')"
  echo "before $(git rev-parse "$base")"
} >"$after/PREBUILT"
cd "$root"
files=(build/gpu-after/PREBUILT build/gpu-after/tests/ember_tests build/gpu-after/bench/ember_bench
  build/gpu-after/libexec build/gpu-before/bench/ember_bench build/gpu-before/libexec)
# ctest's files, with the test lists catch_discover_tests wrote beside them.
while IFS= read -r f; do files+=("$f"); done < <(find build/gpu-after -name CTestTestfile.cmake \
  -o -name '*_include-*.cmake' -o -name '*_tests-*.cmake')
tar -cf - "${files[@]}" | xz -T"$jobs" -9 >.device/prebuilt.tar.xz
ls -la .device/prebuilt.tar.xz
cat "$after/PREBUILT"
