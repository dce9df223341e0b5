#pragma once
// The handwritten part of the JIT's fused pointwise kernels. jit/pointwise_codegen.cpp writes,
// per fused group, a `body` composing the members' functors (through ComputeOp / CastOp /
// WhereOp of pointwise.cuh, exactly as the eager kernels apply them) and the indexing of each
// operand with the group's shapes as constants; NVRTC compiles that source with this header.
// What lives here: the grid-stride loop, element and 16-byte vector loads/stores, and the
// rounding barrier between fused members. Device code only (see pointwise.cuh).
#include "kernels/cuda/pointwise.cuh"

namespace ember::kernels::cuda::fused {

namespace ew = ::ember::kernels::cuda::elementwise;

inline constexpr int kThreads = ew::kThreads;  // threads per block of every fused kernel

// Eager runs each member as its own kernel, so every member's result is rounded to its dtype
// before the next member reads it. Fused, a float product feeding an addition would be
// contracted into one FMA (nvcc's and NVRTC's default, which the eager kernels are built with
// and which must stay on inside each functor for the results to match). `keep` ends that: an
// add of -0.0 with an explicit rounding mode, in inline PTX, is exact for every value (x + -0 is
// x, -0 included) and is never contracted or folded away by NVVM or ptxas.
template <class T>
__device__ __forceinline__ T keep(T v) {
  return v;
}
template <>
__device__ __forceinline__ float keep<float>(float v) {
  float r;
  asm("add.rn.f32 %0, %1, 0f80000000;" : "=f"(r) : "f"(v));
  return r;
}
template <>
__device__ __forceinline__ double keep<double>(double v) {
  double r;
  asm("add.rn.f64 %0, %1, 0d8000000000000000;" : "=d"(r) : "d"(v));
  return r;
}
// Integers: eager's kernels wrap on overflow; fused, the optimizer could reason across members
// from signed overflow being undefined (e.g. fold n * 2 > 0 into n > 0). An opaque move stops it
// and costs nothing after register allocation.
template <>
__device__ __forceinline__ int32_t keep<int32_t>(int32_t v) {
  int32_t r;
  asm("mov.b32 %0, %1;" : "=r"(r) : "r"(v));
  return r;
}
template <>
__device__ __forceinline__ int64_t keep<int64_t>(int64_t v) {
  int64_t r;
  asm("mov.b64 %0, %1;" : "=l"(r) : "l"(v));
  return r;
}

// A double from its bits: attribute constants (clamp bounds) in the generated source, exact.
__device__ __forceinline__ double f64_bits(unsigned long long b) {
  return __longlong_as_double(static_cast<long long>(b));
}

// ---- loads and stores (offsets in elements) ----------------------------------------------------
template <class T, class I>
__device__ __forceinline__ T load(const char* base, I off) {
  return reinterpret_cast<const T*>(base)[off];
}
template <class T, class I>
__device__ __forceinline__ void store(char* base, I off, T v) {
  reinterpret_cast<T*>(base)[off] = v;
}

// V consecutive elements from `off`, as one access of V * sizeof(T) bytes (the host checked
// that the address is aligned to it).
template <int V, class T, class I>
__device__ __forceinline__ void load_vec(T (&dst)[V], const char* base, I off) {
  const ew::Vec<T, V> v =
      *reinterpret_cast<const ew::Vec<T, V>*>(reinterpret_cast<const T*>(base) + off);
#pragma unroll
  for (int j = 0; j < V; ++j) dst[j] = v.v[j];
}
template <int V, class T, class I>
__device__ __forceinline__ void store_vec(char* base, I off, const T (&src)[V]) {
  ew::Vec<T, V> v;
#pragma unroll
  for (int j = 0; j < V; ++j) v.v[j] = src[j];
  *reinterpret_cast<ew::Vec<T, V>*>(reinterpret_cast<T*>(base) + off) = v;
}
// V elements `stride` apart (an operand whose innermost dim is not contiguous, e.g. transposed).
template <int V, class T, class I>
__device__ __forceinline__ void load_strided(T (&dst)[V], const char* base, I off, I stride) {
#pragma unroll
  for (int j = 0; j < V; ++j) dst[j] = reinterpret_cast<const T*>(base)[off + j * stride];
}
template <int V, class T, class I>
__device__ __forceinline__ void store_strided(char* base, I off, I stride, const T (&src)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) reinterpret_cast<T*>(base)[off + j * stride] = src[j];
}
// One value for all V lanes (an operand broadcast along the innermost dim, an inline scalar).
template <int V, class T>
__device__ __forceinline__ void fill(T (&dst)[V], T value) {
#pragma unroll
  for (int j = 0; j < V; ++j) dst[j] = value;
}

// One element of a product with K <= 16 folded into its consumers (a 10-class layer's input
// gradient feeding the relu backward): A's row and B's column from their offsets, stepping by
// their k strides, summed as the eager SmallK kernels sum (kernels/cuda/small_gemm.cuh:
// acc = fma(A[i,k], B[k,j], acc) for k = 0..K-1, from 0), so the fused value has eager's bits.
__device__ __forceinline__ float fma_of(float x, float y, float acc) { return fmaf(x, y, acc); }
__device__ __forceinline__ double fma_of(double x, double y, double acc) { return fma(x, y, acc); }
template <int K, class T, class I>
__device__ __forceinline__ T small_k_dot(const char* a, I a_off, I a_step, const char* b, I b_off,
                                         I b_step) {
  const T* pa = reinterpret_cast<const T*>(a) + a_off;
  const T* pb = reinterpret_cast<const T*>(b) + b_off;
  T acc = T(0);
#pragma unroll
  for (int k = 0; k < K; ++k) acc = fma_of(pa[k * a_step], pb[k * b_step], acc);
  return acc;
}

// ---- the loop ---------------------------------------------------------------------------------
// Calls f(i) for every work item i in [0, n), grid-stride. Index is unsigned 32-bit when the
// generator proved every offset fits (cheaper division by the shape constants), else 64-bit.
template <class Index, class F>
__device__ __forceinline__ void grid_stride(Index n, const F& f) {
  const Index step = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + threadIdx.x;
       i < n; i += step)
    f(i);
}

}  // namespace ember::kernels::cuda::fused
