#pragma once
// Handwritten GEMMs for small products, where a cuBLASLt call's fixed cost (or a handful of
// output tiles on a GPU of 132 SMs) outweighs the work: the seed MLP's
// [B,512]x[512,10] forward and its K = 10 input gradient (SmallN, SmallK), and at batch 64 its
// [64,784]x[784,512] forward and both weight gradients (Tiled; bench/NOTES.md). The kernels sum
// in an order fixed by the shapes and the device alone, so the eager mm
// (kernels/cuda/matmul.cu) and the JIT's GEMM lowering (jit/lower_gemm_cuda.cpp), which both
// come here for such shapes, agree bit for bit. No CUDA types here, so jit/ can include it; the
// rule is inline so that host code (and its test) needs no CUDA build.
#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cuda/gemm_epilogue.h"

namespace ember::kernels::cuda {

inline constexpr int64_t kSmallGemmMaxK = 16;     // SmallK: at most this many products per output
inline constexpr int64_t kSmallGemmMaxN = 16;     // SmallN: accumulators per lane (registers)
inline constexpr int64_t kSmallGemmMaxNK = 4096;  // SmallN: one warp folds at most this K
// Tiled: at most this many multiply-adds (M N K): between the largest product it was measured
// to beat cuBLASLt on and the smallest it lost on (bench/NOTES.md).
inline constexpr int64_t kTiledGemmMaxMNK = int64_t{1} << 25;
inline constexpr int64_t kTiledGemmMaxDim = int64_t{1} << 20;  // grid.y = M / 16 stays < 65536

// Which handwritten kernel computes D = A B for these operands, or None (use cuBLASLt):
//  - SmallK: K <= 16 (any M, N and strides): one thread per output element, or per four
//    (float4) where B's and D's rows are contiguous and aligned;
//  - SmallN: N <= 16, K <= 4096 and A's rows contiguous (a.col_stride == 1 or K == 1): one warp
//    per output row, its lanes reading the row coalesced;
//  - Tiled: float32, M N K <= 2^25, M and N <= 2^20, each operand with a unit stride: tiles of
//    D in shared memory, k split over a thread-block cluster when the tiles are too few
//    (kernels/cuda/tile_gemm.cuh).
// SmallK and SmallN take float32 and float64, and float16 / bfloat16 where their rows move four
// elements at a time (the layouts below; a 16-bit product read element by element loses to
// cuBLASLt's tensor cores, bench/NOTES.md). SmallK wins when both apply, then SmallN. Cheap: no
// allocation, no CUDA call.
//  - Thin: float32 with M <= 16 where Tiled does not apply (more multiply-adds), B's rows
//    contiguous (b.col_stride == 1) and N and B's row stride multiples of 4, M N <= 2^18: k cut
//    into slices whose partial products a second kernel adds in a fixed order (such as the
//    [10,B]x[B,512] weight gradient of a 10-class layer at batch 8192, where cuBLASLt's tiles
//    are mostly padding). Also float16 / bfloat16, the partial products in float32.
// 16-bit layouts: SmallK with B's rows contiguous and N and B's row stride multiples of 4;
// SmallN with A's rows and B's columns contiguous and K and both strides multiples of 4 (both
// with fewer than kSmallGemm16MaxM rows: at 8192 rows cuBLASLt's tensor-core tiles were faster
// than the many-rows kernels, bench/NOTES.md); Thin as for float32 with K below
// kSmallGemm16MaxM (above it cuBLASLt's tensor cores were faster, bench/NOTES.md).
enum class SmallGemmKind : uint8_t { None, SmallK, SmallN, Tiled, Thin };
inline constexpr int64_t kThinGemmMaxM = 16;
inline constexpr int64_t kThinGemmMaxMN = int64_t{1} << 18;
inline constexpr int64_t kSmallGemm16MaxM = 4096;

// Whether kernel `k` can compute D = A B for these operands at all: its dtypes, layouts and the
// sizes its templates and grids hold (K or N a template constant, M a template constant for
// Thin, grid.y for Tiled), whether or not it would be faster than cuBLASLt. None always fits.
inline bool small_gemm_fits(SmallGemmKind k, DType dtype, const GemmMatrix& a,
                            const GemmMatrix& b) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  const bool f32 = dtype == kFloat32, f64 = dtype == kFloat64;
  const bool f16 = dtype == kFloat16 || dtype == kBFloat16;
  switch (k) {
    case SmallGemmKind::None:
      return true;
    case SmallGemmKind::SmallK:
      if (K > kSmallGemmMaxK) return false;
      return f32 || f64 || (f16 && b.col_stride == 1 && N % 4 == 0 && b.row_stride % 4 == 0);
    case SmallGemmKind::SmallN:
      if (N > kSmallGemmMaxN) return false;
      if (f32 || f64) return a.col_stride == 1 || K == 1;
      return f16 && K % 4 == 0 && a.col_stride == 1 && a.row_stride % 4 == 0 && b.row_stride == 1 &&
             b.col_stride % 4 == 0;
    case SmallGemmKind::Tiled:
      return f32 && M <= kTiledGemmMaxDim && N <= kTiledGemmMaxDim &&
             (a.col_stride == 1 || a.row_stride == 1) && (b.row_stride == 1 || b.col_stride == 1);
    case SmallGemmKind::Thin:
      return (f32 || f16) && M <= kThinGemmMaxM && M * N <= kThinGemmMaxMN && N % 4 == 0 &&
             b.col_stride == 1 && (b.row_stride % 4 == 0 || K == 1);
  }
  return false;
}

// The kernel to use: the first of SmallK, SmallN, Tiled, Thin that fits and is within the size
// where it was measured to beat cuBLASLt (bench/NOTES.md), else None.
inline SmallGemmKind small_gemm_kind(DType dtype, const GemmMatrix& a, const GemmMatrix& b) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  const bool f16 = dtype == kFloat16 || dtype == kBFloat16;
  if (!(f16 && M >= kSmallGemm16MaxM) && small_gemm_fits(SmallGemmKind::SmallK, dtype, a, b))
    return SmallGemmKind::SmallK;
  if (!(f16 && M >= kSmallGemm16MaxM) && K <= kSmallGemmMaxNK &&
      small_gemm_fits(SmallGemmKind::SmallN, dtype, a, b))
    return SmallGemmKind::SmallN;
  if (M * N <= kTiledGemmMaxMNK / std::max<int64_t>(K, 1) &&
      small_gemm_fits(SmallGemmKind::Tiled, dtype, a, b))
    return SmallGemmKind::Tiled;
  if (!(f16 && K >= kSmallGemm16MaxM) && small_gemm_fits(SmallGemmKind::Thin, dtype, a, b))
    return SmallGemmKind::Thin;
  return SmallGemmKind::None;
}

inline const char* small_gemm_name(SmallGemmKind k) {
  switch (k) {
    case SmallGemmKind::SmallK:
      return "small-K";
    case SmallGemmKind::SmallN:
      return "small-N";
    case SmallGemmKind::Tiled:
      return "tiled";
    case SmallGemmKind::Thin:
      return "thin";
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
// (safe under CUDA-graph capture); Thin keeps its partial products in the cuBLASLt workspace
// (kernels/cuda/runtime.h), which its first call creates if no GEMM did before.
void small_gemm(const GemmCall& call);
// The same with kernel `kind` instead of small_gemm_kind's choice (tools/small_gemm_time times
// every kernel that fits against cuBLASLt): an ember::Error unless small_gemm_fits(kind, ...).
void small_gemm(const GemmCall& call, SmallGemmKind kind);

}  // namespace ember::kernels::cuda
