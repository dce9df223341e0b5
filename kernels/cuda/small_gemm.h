#pragma once
// Handwritten GEMMs for products with a dimension of at most 16, where a cuBLASLt call costs
// 6-20 us of fixed overhead for under 1 us of work (the seed MLP's [B,512]x[512,10] forward and
// its K = 10 input gradient; bench/NOTES.md). Both kernels read every operand element through
// its strides (no staging copies) and sum in an order fixed by the shapes alone, so the eager
// mm (kernels/cuda/matmul.cu) and the JIT's GEMM lowering (jit/lower_gemm_cuda.cpp), which
// both come here for such shapes, agree bit for bit. No CUDA types here, so jit/ can include it;
// the rule is inline so that host code (and its test) needs no CUDA build.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemm_epilogue.h"

namespace ember::kernels::cuda {

inline constexpr int64_t kSmallGemmMaxK = 16;     // SmallK: at most this many products per output
inline constexpr int64_t kSmallGemmMaxN = 16;     // SmallN: accumulators per lane (registers)
inline constexpr int64_t kSmallGemmMaxNK = 4096;  // SmallN: one warp folds at most this K

// Which handwritten kernel computes D = A B for these operands, or None (use cuBLASLt):
//  - SmallK: K <= 16 (any M, N and strides): one thread per output element, or per four
//    (float4) where B's and D's rows are contiguous and aligned;
//  - SmallN: N <= 16, K <= 4096 and A's rows contiguous (a.col_stride == 1 or K == 1): one warp
//    per output row, its lanes reading the row coalesced;
// float32 and float64 only. SmallK wins when both apply. Cheap: no allocation, no CUDA call.
enum class SmallGemmKind : uint8_t { None, SmallK, SmallN };

inline SmallGemmKind small_gemm_kind(DType dtype, const GemmMatrix& a, const GemmMatrix& b) {
  if (dtype != kFloat32 && dtype != kFloat64) return SmallGemmKind::None;
  const int64_t K = a.cols, N = b.cols;
  if (K <= kSmallGemmMaxK) return SmallGemmKind::SmallK;
  if (N <= kSmallGemmMaxN && K <= kSmallGemmMaxNK && (a.col_stride == 1 || K == 1))
    return SmallGemmKind::SmallN;
  return SmallGemmKind::None;
}

inline const char* small_gemm_name(SmallGemmKind k) {
  switch (k) {
    case SmallGemmKind::SmallK:
      return "small-K";
    case SmallGemmKind::SmallN:
      return "small-N";
    case SmallGemmKind::None:
      break;
  }
  return "none";
}

// Runs the kernel small_gemm_kind picks on stream(call.device). Epilogues None, Bias and
// ReluBias only, rounded as the eager ops round: v = A B (accumulated in the dtype), then
// v + bias[n] (one rounding, never contracted into an FMA), then Ember's relu (NaN passes, -0
// becomes +0). Throws ember::Error (queuing nothing) for another epilogue or dtype, operands
// that do not multiply, a problem no small kernel takes, or missing pointers. Allocates nothing
// (safe under CUDA-graph capture).
void small_gemm(const GemmCall& call);

}  // namespace ember::kernels::cuda
