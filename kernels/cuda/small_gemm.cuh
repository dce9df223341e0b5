#pragma once
// Device templates of the small GEMMs (kernels/cuda/small_gemm.h), T = float or double,
// accumulated in T, or float16 / bfloat16, accumulated in float and rounded once at the end. D[i,
// j] = epilogue(sum_k A[i, k] B[k, j]) with every operand element read through its strides. The
// order of the sum depends on the shapes only (never on the launch shape or timing), so a call
// repeats its bits and the eager and lowered paths agree:
//  - SmallK (K <= 16): one thread per output, acc = fma(A[i,k], B[k,j], acc) for k = 0..K-1.
//  - SmallN (N <= 16): one warp per output row; lane l folds the quads k = 4q..4q+3 for
//    q = l, l+32, ... into N register accumulators, then a xor butterfly sums the 32 partials. Each
//    butterfly step adds the same two values on both lanes of a pair (in either order: addition is
//    commutative), so every lane ends with the same bits and the lane that writes D[i, n] is
//    immaterial.
// Reference: D = A B in float64 on the host (tests/kernels/test_small_gemm.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace ember::kernels::cuda::dev {

// The accumulate type of a storage type: float for the 16-bit floats, else the type itself.
template <class T>
struct SmallGemmAcc {
  using type = T;
};
template <>
struct SmallGemmAcc<__half> {
  using type = float;
};
template <>
struct SmallGemmAcc<__nv_bfloat16> {
  using type = float;
};
template <class T>
using acc_t = typename SmallGemmAcc<T>::type;

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T narrow(acc_t<T> v) {
  return v;
}
template <>
__device__ __forceinline__ __half narrow<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Four consecutive elements, widened: one 16-byte load of float, one 8-byte load of a 16-bit
// type (p aligned to four elements).
__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
template <class T16>
__device__ __forceinline__ float4 load4_16(const T16* p) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  const T16* e = reinterpret_cast<const T16*>(&w);
  return make_float4(widen(e[0]), widen(e[1]), widen(e[2]), widen(e[3]));
}
__device__ __forceinline__ float4 load4(const __half* p) { return load4_16(p); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) { return load4_16(p); }

// Four consecutive outputs, already rounded to the storage type.
__device__ __forceinline__ void store4(float* p, float x, float y, float z, float w) {
  *reinterpret_cast<float4*>(p) = make_float4(x, y, z, w);
}
template <class T16>
__device__ __forceinline__ void store4_16(T16* p, T16 x, T16 y, T16 z, T16 w) {
  uint2 v;
  T16* e = reinterpret_cast<T16*>(&v);
  e[0] = x;
  e[1] = y;
  e[2] = z;
  e[3] = w;
  *reinterpret_cast<uint2*>(p) = v;
}
__device__ __forceinline__ void store4(__half* p, __half x, __half y, __half z, __half w) {
  store4_16(p, x, y, z, w);
}
__device__ __forceinline__ void store4(__nv_bfloat16* p, __nv_bfloat16 x, __nv_bfloat16 y,
                                       __nv_bfloat16 z, __nv_bfloat16 w) {
  store4_16(p, x, y, z, w);
}

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
// A 16-bit product is rounded once, after the bias and relu (as the cuBLASLt epilogues do).
template <class T>
__device__ __forceinline__ T small_gemm_epilogue(acc_t<T> v, const T* __restrict__ bias, int64_t j,
                                                 bool relu) {
  using A = acc_t<T>;
  if (bias) v = add_rn(v, widen(bias[j]));
  if (relu && !(v > A(0) || v != v)) v = A(0);
  return narrow<T>(v);
}

// Both kernels take K (SmallK) or N (SmallN) as a template constant: with a runtime bound every
// load sits behind its own branch, so each of a row's loads waits out the memory latency alone.
// With the constant the loads of an iteration issue together.

// SmallK, one thread per output, grid-stride over the M*N outputs in row-major order; Index is
// uint32_t when M*N fits (the division by N is several times cheaper than a 64-bit one).
template <class T, int kK, class Index>
__global__ void small_k_gemm_kernel(SmallGemmArgs<T> p) {
  const Index total = static_cast<Index>(p.m * p.n), n = static_cast<Index>(p.n);
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index idx = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += step) {
    const Index i = idx / n, j = idx - i * n;
    const T* __restrict__ ar = p.a + static_cast<int64_t>(i) * p.a_rs;
    const T* __restrict__ bc = p.b + static_cast<int64_t>(j) * p.b_cs;
    acc_t<T> acc = 0;
#pragma unroll
    for (int k = 0; k < kK; ++k) acc = fma_t(widen(ar[k * p.a_cs]), widen(bc[k * p.b_rs]), acc);
    p.d[static_cast<int64_t>(i) * p.ld_d + j] = small_gemm_epilogue(acc, p.bias, j, p.relu);
  }
}

// SmallK for float32 and the 16-bit floats with B's rows contiguous and every row of B and D
// aligned to four elements: one thread per 4 consecutive outputs of a row, B and D moved four
// elements at a time. Each output is the same
// FMA chain as in small_k_gemm_kernel (k = 0..K-1), so the two kernels agree bit for bit; this
// one issues a quarter of the loads, which bound the scalar kernel.
template <class T, int kK, class Index>
__global__ void small_k_gemm_vec4_kernel(SmallGemmArgs<T> p) {
  const Index quads = static_cast<Index>(p.n / 4);
  const Index total = static_cast<Index>(p.m) * quads;
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index idx = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += step) {
    const Index i = idx / quads, q = idx - i * quads;
    const T* __restrict__ ar = p.a + static_cast<int64_t>(i) * p.a_rs;
    const T* __restrict__ bq = p.b + static_cast<int64_t>(q) * 4;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const float x = widen(ar[k * p.a_cs]);
      const float4 w = load4(bq + k * p.b_rs);
      acc.x = fmaf(x, w.x, acc.x);
      acc.y = fmaf(x, w.y, acc.y);
      acc.z = fmaf(x, w.z, acc.z);
      acc.w = fmaf(x, w.w, acc.w);
    }
    const int64_t j = static_cast<int64_t>(q) * 4;
    store4(p.d + static_cast<int64_t>(i) * p.ld_d + j,
           small_gemm_epilogue(acc.x, p.bias, j, p.relu),
           small_gemm_epilogue(acc.y, p.bias, j + 1, p.relu),
           small_gemm_epilogue(acc.z, p.bias, j + 2, p.relu),
           small_gemm_epilogue(acc.w, p.bias, j + 3, p.relu));
  }
}

// SmallN: blockDim.x == 32 * kSmallNWarps; warp w of block b takes rows b * kSmallNWarps + w,
// then strides by the grid's warps. A row's loop bounds are the same for all 32 lanes, so the
// shuffles always see the full warp. The order of the sum, the same in both kernels below:
// the row's k split into quads 4q..4q+3; lane l folds the quads q = l, l + 32, ... in turn, each
// quad's four products in k order, into accumulator c; then a xor butterfly over the warp adds
// the 32 lane sums (every lane ends with the same bits: addition is commutative).
template <class T, int kN>
__device__ __forceinline__ void small_n_finish(const SmallGemmArgs<T>& p, int64_t i, int lane,
                                               acc_t<T> (&acc)[kN]) {
#pragma unroll
  for (int c = 0; c < kN; ++c) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      acc[c] = add_rn(acc[c], __shfl_xor_sync(0xffffffffu, acc[c], off));
  }
  // Lane c writes column c (a static register index per unrolled step: no local memory).
#pragma unroll
  for (int c = 0; c < kN; ++c)
    if (lane == c) p.d[i * p.ld_d + c] = small_gemm_epilogue(acc[c], p.bias, c, p.relu);
}

// Any strides.
template <class T, int kN>
__global__ void __launch_bounds__(32 * kSmallNWarps) small_n_gemm_kernel(SmallGemmArgs<T> p) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kSmallNWarps;
  const int64_t full = p.k / 4, rest = p.k % 4;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSmallNWarps + (threadIdx.x >> 5); i < p.m;
       i += warps) {
    acc_t<T> acc[kN];
#pragma unroll
    for (int c = 0; c < kN; ++c) acc[c] = 0;
    const T* __restrict__ ar = p.a + i * p.a_rs;
#pragma unroll 2
    for (int64_t q = lane; q < full; q += 32) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t k = 4 * q + r;
        const acc_t<T> x = widen(ar[k * p.a_cs]);
        const T* __restrict__ bk = p.b + k * p.b_rs;
#pragma unroll
        for (int c = 0; c < kN; ++c) acc[c] = fma_t(x, widen(bk[c * p.b_cs]), acc[c]);
      }
    }
    if (rest != 0 && lane == static_cast<int>(full % 32)) {  // the last, partial quad
      for (int64_t k = 4 * full; k < p.k; ++k) {
        const acc_t<T> x = widen(ar[k * p.a_cs]);
        const T* __restrict__ bk = p.b + k * p.b_rs;
#pragma unroll
        for (int c = 0; c < kN; ++c) acc[c] = fma_t(x, widen(bk[c * p.b_cs]), acc[c]);
      }
    }
    small_n_finish(p, i, lane, acc);
  }
}

// float32 or a 16-bit float with A's rows and B's columns contiguous along k (the Linear
// layer's x and W^T), K a multiple of 4 and every row aligned to four elements: each quad is one
// vector load of A and one of each B column, without the strided kernel's 64-bit address
// arithmetic per load.
template <class T, int kN>
__global__ void __launch_bounds__(32 * kSmallNWarps) small_n_gemm_vec4_kernel(SmallGemmArgs<T> p) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kSmallNWarps;
  const int quads = static_cast<int>(p.k / 4);
  const T* __restrict__ bcol[kN];
#pragma unroll
  for (int c = 0; c < kN; ++c) bcol[c] = p.b + c * p.b_cs;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSmallNWarps + (threadIdx.x >> 5); i < p.m;
       i += warps) {
    float acc[kN];
#pragma unroll
    for (int c = 0; c < kN; ++c) acc[c] = 0.f;
    const T* __restrict__ ar = p.a + i * p.a_rs;
#pragma unroll 4
    for (int q = lane; q < quads; q += 32) {
      const float4 x = load4(ar + 4 * q);
#pragma unroll
      for (int c = 0; c < kN; ++c) {
        const float4 w = load4(bcol[c] + 4 * q);
        acc[c] = fmaf(x.x, w.x, acc[c]);
        acc[c] = fmaf(x.y, w.y, acc[c]);
        acc[c] = fmaf(x.z, w.z, acc[c]);
        acc[c] = fmaf(x.w, w.w, acc[c]);
      }
    }
    small_n_finish(p, i, lane, acc);
  }
}

// SmallK, float32 as small_k_gemm_vec4_kernel, for many rows: a 128-thread block covers 128
// column quads (blockIdx.x) of kSmallKRows rows (blockIdx.y); each thread loads its quad of B's
// K rows once into registers and walks the rows, where the grid-stride kernel reloads B for every
// output quad. The same FMA chain per output (k = 0..K-1), so the same bits. It pays only with
// many rows (kSmallGemmRowsMinM).
inline constexpr int kSmallKRows = 8;
inline constexpr int kSmallKRowsThreads = 128;
template <class T, int kK>
__global__ void __launch_bounds__(kSmallKRowsThreads) small_k_gemm_rows_kernel(SmallGemmArgs<T> p) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * kSmallKRowsThreads + threadIdx.x;
  if (q >= p.n / 4) return;
  float4 w[kK > 0 ? kK : 1];
#pragma unroll
  for (int k = 0; k < kK; ++k) w[k] = load4(p.b + q * 4 + k * p.b_rs);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kSmallKRows;
  const int64_t j = q * 4;
#pragma unroll 2
  for (int r = 0; r < kSmallKRows; ++r) {
    const int64_t i = i0 + r;
    if (i >= p.m) break;
    const T* __restrict__ ar = p.a + i * p.a_rs;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const float x = widen(ar[k * p.a_cs]);
      acc.x = fmaf(x, w[k].x, acc.x);
      acc.y = fmaf(x, w[k].y, acc.y);
      acc.z = fmaf(x, w[k].z, acc.z);
      acc.w = fmaf(x, w[k].w, acc.w);
    }
    store4(p.d + i * p.ld_d + j, small_gemm_epilogue(acc.x, p.bias, j, p.relu),
           small_gemm_epilogue(acc.y, p.bias, j + 1, p.relu),
           small_gemm_epilogue(acc.z, p.bias, j + 2, p.relu),
           small_gemm_epilogue(acc.w, p.bias, j + 3, p.relu));
  }
}

// SmallN, float32 as small_n_gemm_vec4_kernel, for many rows: a warp folds kSmallNRows rows at
// once, so each float4 of B serves all of them. Every row's quads and butterfly are those of the
// one-row kernel, so the same bits. It pays only with many rows (kSmallGemmRowsMinM).
inline constexpr int kSmallNRows = 4;
template <class T, int kN>
__global__ void __launch_bounds__(32 * kSmallNWarps) small_n_gemm_rows_kernel(SmallGemmArgs<T> p) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kSmallNWarps;
  const int quads = static_cast<int>(p.k / 4);
  const T* __restrict__ bcol[kN];
#pragma unroll
  for (int c = 0; c < kN; ++c) bcol[c] = p.b + c * p.b_cs;
  for (int64_t i0 =
           (static_cast<int64_t>(blockIdx.x) * kSmallNWarps + (threadIdx.x >> 5)) * kSmallNRows;
       i0 < p.m; i0 += warps * kSmallNRows) {
    float acc[kSmallNRows][kN];
    const T* __restrict__ ar[kSmallNRows];
#pragma unroll
    for (int r = 0; r < kSmallNRows; ++r) {
#pragma unroll
      for (int c = 0; c < kN; ++c) acc[r][c] = 0.f;
      // Rows past the end read the last row (in bounds) and are never written.
      const int64_t i = i0 + r < p.m ? i0 + r : p.m - 1;
      ar[r] = p.a + i * p.a_rs;
    }
#pragma unroll 2
    for (int q = lane; q < quads; q += 32) {
      float4 x[kSmallNRows];
#pragma unroll
      for (int r = 0; r < kSmallNRows; ++r) x[r] = load4(ar[r] + 4 * q);
#pragma unroll
      for (int c = 0; c < kN; ++c) {
        const float4 w = load4(bcol[c] + 4 * q);
#pragma unroll
        for (int r = 0; r < kSmallNRows; ++r) {
          acc[r][c] = fmaf(x[r].x, w.x, acc[r][c]);
          acc[r][c] = fmaf(x[r].y, w.y, acc[r][c]);
          acc[r][c] = fmaf(x[r].z, w.z, acc[r][c]);
          acc[r][c] = fmaf(x[r].w, w.w, acc[r][c]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kSmallNRows; ++r)
      if (i0 + r < p.m) small_n_finish(p, i0 + r, lane, acc[r]);
  }
}

// Thin (M <= 16 rows, large K; small_gemm.h), float32 or a 16-bit float (partial products in
// float32), B's rows contiguous, N a multiple of 4.
// k is cut into gridDim.x slices of `slice` (a multiple of kThinLanes). In a block, thread
// (x, y) owns column quad blockIdx.y * kThinQuads + x and folds k = k0 + y, k0 + y + 4, ... of
// its slice, for each of the M rows: acc = fma(A[m,k], B[k,j], acc), k ascending. The block
// adds its four lanes in order ((y0 + y1) + y2) + y3 and writes the slice's partial product
// P[slice][m][j] (the cuBLASLt workspace holds P). thin_gemm_finish_kernel then adds the slices:
// lane l of a warp folds slices l, l + 32, ... in turn, a xor butterfly adds the 32 lane sums,
// and the epilogue rounds as small_gemm_epilogue. The order depends on the shapes alone.
inline constexpr int kThinQuads = 128;  // column quads per block
inline constexpr int kThinLanes = 4;    // k lanes per block
template <class T, int kM, bool kVec>
__global__ void __launch_bounds__(kThinQuads* kThinLanes)
    thin_gemm_partial_kernel(SmallGemmArgs<T> p, int64_t slice, float* __restrict__ partial) {
  const int64_t quads = p.n / 4;
  const int64_t q = static_cast<int64_t>(blockIdx.y) * kThinQuads + threadIdx.x;
  const int lane = static_cast<int>(threadIdx.y);
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * slice;
  const int64_t k1 = k0 + slice < p.k ? k0 + slice : p.k;
  float4 acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (q < quads) {
    const T* __restrict__ bq = p.b + q * 4;
#pragma unroll 4
    for (int64_t k = k0 + lane; k < k1; k += kThinLanes) {
      float4 w;
      if constexpr (kVec) {
        w = load4(bq + k * p.b_rs);
      } else {
        const T* r = bq + k * p.b_rs;
        w = make_float4(widen(r[0]), widen(r[1]), widen(r[2]), widen(r[3]));
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const float x = widen(p.a[m * p.a_rs + k * p.a_cs]);
        acc[m].x = fmaf(x, w.x, acc[m].x);
        acc[m].y = fmaf(x, w.y, acc[m].y);
        acc[m].z = fmaf(x, w.z, acc[m].z);
        acc[m].w = fmaf(x, w.w, acc[m].w);
      }
    }
  }
  __shared__ float4 lanes[kThinLanes][kThinQuads];
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    lanes[lane][threadIdx.x] = acc[m];
    __syncthreads();
    if (lane == 0 && q < quads) {
      float4 v = lanes[0][threadIdx.x];
#pragma unroll
      for (int l = 1; l < kThinLanes; ++l) {
        const float4 u = lanes[l][threadIdx.x];
        v.x = add_rn(v.x, u.x);
        v.y = add_rn(v.y, u.y);
        v.z = add_rn(v.z, u.z);
        v.w = add_rn(v.w, u.w);
      }
      *reinterpret_cast<float4*>(partial + (static_cast<int64_t>(blockIdx.x) * kM + m) * p.n +
                                 q * 4) = v;
    }
    __syncthreads();
  }
}

// One warp per output quad (m, j..j+3) of D, over `slices` partial products.
template <class T>
__global__ void __launch_bounds__(256)
    thin_gemm_finish_kernel(SmallGemmArgs<T> p, int slices, const float* __restrict__ partial) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t quads = p.n / 4;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (w >= p.m * quads) return;  // whole warps: w is the same on all 32 lanes
  const int64_t m = w / quads, j = (w - m * quads) * 4;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = lane; s < slices; s += 32) {
    const float4 u =
        *reinterpret_cast<const float4*>(partial + (static_cast<int64_t>(s) * p.m + m) * p.n + j);
    v.x = add_rn(v.x, u.x);
    v.y = add_rn(v.y, u.y);
    v.z = add_rn(v.z, u.z);
    v.w = add_rn(v.w, u.w);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    v.x = add_rn(v.x, __shfl_xor_sync(0xffffffffu, v.x, off));
    v.y = add_rn(v.y, __shfl_xor_sync(0xffffffffu, v.y, off));
    v.z = add_rn(v.z, __shfl_xor_sync(0xffffffffu, v.z, off));
    v.w = add_rn(v.w, __shfl_xor_sync(0xffffffffu, v.w, off));
  }
  if (lane < 4) {
    const float e = lane == 0 ? v.x : lane == 1 ? v.y : lane == 2 ? v.z : v.w;
    p.d[m * p.ld_d + j + lane] = small_gemm_epilogue(e, p.bias, j + lane, p.relu);
  }
}

}  // namespace ember::kernels::cuda::dev
