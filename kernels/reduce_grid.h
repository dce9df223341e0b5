#pragma once
// How many blocks a reduction aims for, shared by the eager planner (kernels/cuda/reduce.cu) and
// the JIT's fused reductions (jit/reduction_codegen.cpp): both split a reduction the same way, so
// a column sum comes out bitwise the same from either. Host-only and dependency-free.
//
// Why 8 per multiprocessor: a reduction block is 256 threads and an SM holds 2048, so 8 blocks
// per SM is one full wave. Fewer blocks leave a tall reduction (a [8192, 512] bias gradient, say)
// with a fraction of the GPU's threads, each folding many rows one dependent load after
// another, far below memory bandwidth.
#include <cstdint>

namespace ember::kernels {

inline constexpr int64_t kReduceBlocksPerSm = 8;

inline int64_t reduce_target_blocks(int sm_count) {
  return kReduceBlocksPerSm * static_cast<int64_t>(sm_count < 1 ? 1 : sm_count);
}

}  // namespace ember::kernels
