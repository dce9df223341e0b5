#pragma once
// Device templates of the small GEMMs (kernels/cuda/small_gemm.h), T = float or double,
// accumulated in T. D[i, j] = epilogue(sum_k A[i, k] B[k, j]) with every operand element read
// through its strides. The order of the sum depends on the shapes only (never on the launch
// shape or timing), so a call repeats its bits and the eager and lowered paths agree:
//  - SmallK (K <= 16): one thread per output, acc = fma(A[i,k], B[k,j], acc) for k = 0..K-1.
//  - SmallN (N <= 16): one warp per output row; lane l folds k = l, l+32, ... into N register
//    accumulators, then a xor butterfly sums the 32 partials. Each butterfly step adds the same
//    two values on both lanes of a pair (in either order: addition is commutative), so every
//    lane ends with the same bits and the lane that writes D[i, n] is immaterial.
// Reference: D = A B in float64 on the host (tests/kernels/test_small_gemm.cpp).
#include <cstdint>

namespace ember::kernels::cuda::dev {

inline constexpr int kSmallNWarps = 8;  // SmallN rows per 256-thread block
inline constexpr int kSmallNMaxN = 16;  // == kSmallGemmMaxN (small_gemm.h, checked there)

template <class T>
struct SmallGemmArgs {
  const T* a;
  int64_t a_rs, a_cs;  // A[i, k] at a[i * a_rs + k * a_cs]
  const T* b;
  int64_t b_rs, b_cs;  // B[k, j] at b[k * b_rs + j * b_cs]
  T* d;
  int64_t ld_d;   // D[i, j] at d[i * ld_d + j]
  const T* bias;  // [N] or null
  int64_t m, n, k;
  bool relu;
};

__device__ __forceinline__ float fma_t(float x, float y, float acc) { return fmaf(x, y, acc); }
__device__ __forceinline__ double fma_t(double x, double y, double acc) { return fma(x, y, acc); }
// Round-to-nearest adds the compiler may not contract into an FMA with a product before them.
__device__ __forceinline__ float add_rn(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double add_rn(double x, double y) { return __dadd_rn(x, y); }

// The eager add then relu (kernels/pointwise_functors.h): NaN passes, -0 and negatives give +0.
template <class T>
__device__ __forceinline__ T small_gemm_epilogue(T v, const T* __restrict__ bias, int64_t j,
                                                 bool relu) {
  if (bias) v = add_rn(v, bias[j]);
  if (relu && !(v > T(0) || v != v)) v = T(0);
  return v;
}

// Grid-stride over the M*N outputs in row-major order; Index is uint32_t when M*N fits (the
// division by N is several times cheaper than a 64-bit one).
template <class T, class Index>
__global__ void small_k_gemm_kernel(SmallGemmArgs<T> p) {
  const Index total = static_cast<Index>(p.m * p.n), n = static_cast<Index>(p.n);
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index idx = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += step) {
    const Index i = idx / n, j = idx - i * n;
    const T* __restrict__ ar = p.a + static_cast<int64_t>(i) * p.a_rs;
    const T* __restrict__ bc = p.b + static_cast<int64_t>(j) * p.b_cs;
    T acc = T(0);
#pragma unroll 4
    for (int64_t k = 0; k < p.k; ++k) acc = fma_t(ar[k * p.a_cs], bc[k * p.b_rs], acc);
    p.d[static_cast<int64_t>(i) * p.ld_d + j] = small_gemm_epilogue(acc, p.bias, j, p.relu);
  }
}

// blockDim.x == 32 * kSmallNWarps; warp w of block b takes rows b * kSmallNWarps + w, then
// strides by the grid's warps. A row's loop bounds are the same for all 32 lanes, so the
// shuffles always see the full warp.
template <class T>
__global__ void __launch_bounds__(32 * kSmallNWarps) small_n_gemm_kernel(SmallGemmArgs<T> p) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kSmallNWarps;
  const int nn = static_cast<int>(p.n);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSmallNWarps + (threadIdx.x >> 5); i < p.m;
       i += warps) {
    T acc[kSmallNMaxN];
#pragma unroll
    for (int c = 0; c < kSmallNMaxN; ++c) acc[c] = T(0);
    const T* __restrict__ ar = p.a + i * p.a_rs;
    // Unrolling issues several iterations' loads together; each accumulator still folds its k
    // in increasing order, so the bits do not depend on it.
#pragma unroll 4
    for (int64_t k = lane; k < p.k; k += 32) {
      const T x = ar[k * p.a_cs];
      const T* __restrict__ bk = p.b + k * p.b_rs;
#pragma unroll
      for (int c = 0; c < kSmallNMaxN; ++c)
        if (c < nn) acc[c] = fma_t(x, bk[c * p.b_cs], acc[c]);
    }
#pragma unroll
    for (int c = 0; c < kSmallNMaxN; ++c) {
      if (c < nn) {
        T v = acc[c];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v = add_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
        acc[c] = v;
      }
    }
    // Lane c writes column c (a static register index per unrolled step: no local memory).
#pragma unroll
    for (int c = 0; c < kSmallNMaxN; ++c)
      if (c < nn && lane == c) p.d[i * p.ld_d + c] = small_gemm_epilogue(acc[c], p.bias, c, p.relu);
  }
}

}  // namespace ember::kernels::cuda::dev
