#pragma once
// How many blocks a reduction aims for, shared by the eager planner (kernels/cuda/reduce.cu) and
// the JIT's fused reductions (jit/reduction_codegen.cpp): both split a reduction the same way, so
// a column sum comes out bitwise the same from either. Host-only and dependency-free.
//
// Why 8 per multiprocessor: a reduction block is 256 threads and an SM holds 2048, so 8 blocks
// per SM is one full wave. Two blocks per SM (the first choice) left the [8192, 512] bias
// gradient of the seed MLP at 16 x 17 blocks of 256 threads: a quarter of the GPU's threads,
// each folding 61 rows one dependent load after another, 0.86 TB/s (bench/NOTES.md).
#include <cstdint>

namespace ember::kernels {

inline constexpr int64_t kReduceBlocksPerSm = 8;

inline int64_t reduce_target_blocks(int sm_count) {
  return kReduceBlocksPerSm * static_cast<int64_t>(sm_count < 1 ? 1 : sm_count);
}

}  // namespace ember::kernels
