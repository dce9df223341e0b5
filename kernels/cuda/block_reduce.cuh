#pragma once
// Reduction building blocks shared by the reduce, softmax and cross-entropy kernels: the
// accumulator conversions of the storage types, the reduction operators (each a State with
// identity / step / combine / project) and warp- and block-wide all-reduces over them.
// Device code only, written so NVRTC can compile it too (no host-only headers).
#include "core/macros.h"
#if defined(__CUDACC_RTC__)
// NVRTC has no <cstdint>; the same typedefs as kernels/cuda/pointwise.cuh (LP64 Linux).
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
#else
#include <cstdint>
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ember::kernels::cuda::dev {

// ---- storage <-> accumulator conversions ------------------------------------------------------
// 16-bit floats accumulate in float; everything else converts with a plain cast.
template <class Acc, class T>
__device__ __forceinline__ Acc to_acc(T v) {
  return static_cast<Acc>(v);
}
template <>
__device__ __forceinline__ float to_acc<float, __half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_acc<float, __nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <class T, class Acc>
__device__ __forceinline__ T from_acc(Acc v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __half from_acc<__half, float>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16, float>(float v) {
  return __float2bfloat16_rn(v);
}

// ---- limits without <limits> (NVRTC) ------------------------------------------------------------
template <class T>
struct Limits;
template <>
struct Limits<float> {
  __device__ static float lowest() { return -__int_as_float(0x7f800000); }
  __device__ static float highest() { return __int_as_float(0x7f800000); }
};
template <>
struct Limits<double> {
  __device__ static double lowest() { return -__longlong_as_double(0x7ff0000000000000ll); }
  __device__ static double highest() { return __longlong_as_double(0x7ff0000000000000ll); }
};
template <>
struct Limits<int32_t> {
  __device__ static int32_t lowest() { return -2147483647 - 1; }
  __device__ static int32_t highest() { return 2147483647; }
};
template <>
struct Limits<int64_t> {
  __device__ static int64_t lowest() { return -9223372036854775807ll - 1; }
  __device__ static int64_t highest() { return 9223372036854775807ll; }
};

template <class T>
__device__ __forceinline__ bool is_nan(T v) {
  return v != v;
}
__device__ __forceinline__ float exp_acc(float v) { return ::expf(v); }
__device__ __forceinline__ double exp_acc(double v) { return ::exp(v); }
__device__ __forceinline__ float log_acc(float v) { return ::logf(v); }
__device__ __forceinline__ double log_acc(double v) { return ::log(v); }
__device__ __forceinline__ bool is_finite(float v) { return ::isfinite(v); }
__device__ __forceinline__ bool is_finite(double v) { return ::isfinite(v); }

// ---- reduction operators ---------------------------------------------------------------------
// step(s, x, i) folds element x at reduced position i into s; combine merges two partial states
// and must be commutative and exact-order independent so every lane of an all-reduce ends with
// bitwise the same state.

// sum and mean (mean divides by the count when projecting).
template <class Acc>
struct SumOp {
  using State = Acc;
  bool mean = false;
  __device__ State identity() const { return Acc(0); }
  __device__ void step(State& s, Acc x, int64_t) const { s += x; }
  __device__ State combine(State a, State b) const { return a + b; }
  template <class Out>
  __device__ Out project(State s, int64_t count) const {
    return from_acc<Out>(mean ? static_cast<Acc>(s / static_cast<Acc>(count)) : s);
  }
};

// amax / amin; NaN wins.
template <class Acc>
struct MinMaxOp {
  using State = Acc;
  bool is_min = false;
  __device__ State identity() const {
    return is_min ? Limits<Acc>::highest() : Limits<Acc>::lowest();
  }
  __device__ State pick(State a, State b) const {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return is_min ? (b < a ? b : a) : (b > a ? b : a);
  }
  __device__ void step(State& s, Acc x, int64_t) const { s = pick(s, x); }
  __device__ State combine(State a, State b) const { return pick(a, b); }
  template <class Out>
  __device__ Out project(State s, int64_t) const {
    return from_acc<Out>(s);
  }
};

// argmax: the first position of the maximum; NaN counts as the maximum (first NaN wins).
template <class Acc>
struct ArgState {
  Acc v;
  int64_t i;
};
template <class Acc>
struct ArgMaxOp {
  using State = ArgState<Acc>;
  __device__ State identity() const { return {Limits<Acc>::lowest(), Limits<int64_t>::highest()}; }
  // Whether b should replace a.
  __device__ static bool better(const State& b, const State& a) {
    const bool bn = is_nan(b.v), an = is_nan(a.v);
    if (an || bn) return an && bn ? b.i < a.i : bn;
    return b.v > a.v || (b.v == a.v && b.i < a.i);
  }
  __device__ void step(State& s, Acc x, int64_t i) const {
    const State c{x, i};
    if (better(c, s)) s = c;
  }
  __device__ State combine(State a, State b) const { return better(b, a) ? b : a; }
  template <class Out>
  __device__ Out project(State s, int64_t) const {
    return static_cast<Out>(s.i);
  }
};

// logsumexp as a running (max, sum of exp(x - max)): one exp per element. A non-finite max
// (all -inf, any +inf, NaN) is the answer by itself.
template <class Acc>
struct LseState {
  Acc m;
  Acc s;
};
template <class Acc>
struct LseOp {
  using State = LseState<Acc>;
  __device__ State identity() const { return {Limits<Acc>::lowest(), Acc(0)}; }
  __device__ void step(State& st, Acc x, int64_t) const {
    if (is_nan(x) || is_nan(st.m)) {
      st.m = x + st.m;  // NaN
    } else if (x > st.m) {
      st.s = st.s * exp_acc(st.m - x) + Acc(1);
      st.m = x;
    } else if (is_finite(st.m)) {
      st.s += exp_acc(x - st.m);
    }
  }
  __device__ State combine(State a, State b) const {
    if (is_nan(a.m) || is_nan(b.m)) return {a.m + b.m, Acc(0)};
    const Acc m = a.m > b.m ? a.m : b.m;
    if (!is_finite(m)) return {m, a.s + b.s};
    return {m, a.s * exp_acc(a.m - m) + b.s * exp_acc(b.m - m)};
  }
  // log(sum exp(x)) = m + log(s).
  __device__ Acc value(State st) const { return is_finite(st.m) ? st.m + log_acc(st.s) : st.m; }
  template <class Out>
  __device__ Out project(State st, int64_t) const {
    return from_acc<Out>(value(st));
  }
};

// ---- shuffles of states ------------------------------------------------------------------------
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
template <class Acc>
__device__ __forceinline__ ArgState<Acc> shfl_xor(ArgState<Acc> v, int mask) {
  return {shfl_xor(v.v, mask), shfl_xor(v.i, mask)};
}
template <class Acc>
__device__ __forceinline__ LseState<Acc> shfl_xor(LseState<Acc> v, int mask) {
  return {shfl_xor(v.m, mask), shfl_xor(v.s, mask)};
}

// ---- folding a contiguous run -------------------------------------------------------------------
// Folds x[r] for r in [r0, r1) into s, thread `tid` of `nt` taking its share. The bulk moves in
// 16-byte vectors (8 halves, 4 floats, ...) so 16-bit types reach full bandwidth; a scalar head
// reaches 16-byte alignment first and a scalar tail finishes. Each element is stepped with its
// own position r, so the result does not depend on which thread saw it.
template <class Op, class Acc, class T, class State>
__device__ __forceinline__ void fold_contiguous(const Op& op, State& s, const T* x, int64_t r0,
                                                int64_t r1, int tid, int nt) {
  constexpr int kVec = 16 / sizeof(T);
  const auto addr = reinterpret_cast<unsigned long long>(x + r0);
  int64_t head = static_cast<int64_t>((16 - addr % 16) % 16 / sizeof(T));
  if (addr % sizeof(T) != 0 || head > r1 - r0) head = r1 - r0;  // (misaligned T: all scalar)
  if (tid < head) op.step(s, to_acc<Acc>(x[r0 + tid]), r0 + tid);
  const int64_t a = r0 + head;
  const int64_t nvec = (r1 - a) / kVec;
  const uint4* v = reinterpret_cast<const uint4*>(x + a);
#pragma unroll 2
  for (int64_t i = tid; i < nvec; i += nt) {
    const uint4 w = v[i];
    const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
    for (int j = 0; j < kVec; ++j) op.step(s, to_acc<Acc>(e[j]), a + i * kVec + j);
  }
  for (int64_t r = a + nvec * kVec + tid; r < r1; r += nt) op.step(s, to_acc<Acc>(x[r]), r);
}

// Folds partial states k = first, first + step, ... below `splits` into s, in increasing k, with
// kBatch loads issued before the first of them is combined: a finishing lane's partials come
// back in one trip to memory instead of one trip each. load(k) returns partial k.
template <int kBatch, class Index, class Op, class Load>
__device__ __forceinline__ void fold_partials(const Op& op, typename Op::State& s, const Load& load,
                                              Index first, Index step, Index splits) {
  using State = typename Op::State;
  for (Index k = first; k < splits; k += kBatch * step) {
    State v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const Index ku = k + static_cast<Index>(u) * step;
      v[u] = ku < splits ? load(ku) : op.identity();
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (k + static_cast<Index>(u) * step < splits) s = op.combine(s, v[u]);
  }
}

// Every lane of the warp ends with the combination of all 32 lanes' states.
template <class Op, class State>
__device__ __forceinline__ State warp_allreduce(const Op& op, State s) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) s = op.combine(s, shfl_xor(s, mask));
  return s;
}

// All-reduce across the `width` threads x = 0 .. width-1 of each row y of the block, thread
// (x, y) being linear thread y * width + x: first within each warp, then across the row's warps.
// `width` must be a multiple of 32 (one or more whole warps per row) and the block at most 1024
// threads. Every thread of the block must call it (it synchronizes when a row spans several
// warps).
template <class Op, class State>
__device__ State row_allreduce(const Op& op, State s, unsigned x, unsigned y, unsigned width) {
  s = warp_allreduce(op, s);
  const unsigned warps = width / 32;
  if (warps == 1) return s;
  __shared__ State partial[32];
  const unsigned lane = x % 32, row_base = y * warps;
  if (lane == 0) partial[row_base + x / 32] = s;
  __syncthreads();
  s = lane < warps ? partial[row_base + lane] : op.identity();
  s = warp_allreduce(op, s);
  __syncthreads();  // `partial` may be reused by the next call
  return s;
}

// The same over a 2-D block's threadIdx.x.
template <class Op, class State>
__device__ State row_allreduce(const Op& op, State s) {
  return row_allreduce(op, s, threadIdx.x, threadIdx.y, blockDim.x);
}

// All-reduce across threadIdx.y for each threadIdx.x column of the block (blockDim.y a power of
// two, at most 1024 threads). Every thread of the block must call it.
template <class Op, class State>
__device__ State column_allreduce(const Op& op, State s) {
  __shared__ State cell[1024];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  cell[tid] = s;
  __syncthreads();
  for (int half = blockDim.y / 2; half > 0; half >>= 1) {
    if (threadIdx.y < half) cell[tid] = op.combine(cell[tid], cell[tid + half * blockDim.x]);
    __syncthreads();
  }
  s = cell[threadIdx.x];
  __syncthreads();
  return s;
}

}  // namespace ember::kernels::cuda::dev
