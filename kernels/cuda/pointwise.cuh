#pragma once
// Elementwise CUDA kernels as templates over (op, output storage type, input storage types).
// The eager launcher (pointwise.cu) instantiates them with nvcc; the JIT will compile this same
// header with NVRTC, so it holds device code only: no host-only headers, no std library.
//
// Two kernels:
//  - flat: every operand is dense in one run (or a single broadcast value); each thread moves
//    V elements per operand with one aligned load/store of up to 16 bytes, in a grid-stride
//    loop, plus a scalar tail.
//  - strided: any broadcast/strided layout after kernels::Iter coalesced it (innermost dim
//    first, byte strides); a linear index is split into per-dim coordinates with fast 32-bit
//    division when the iteration space allows it.
// Inputs that are 0-dim host tensors travel inside the kernel arguments ("inline scalars"), so
// no copy to the device is needed for `x * 2`.
//
// Storage types on the device: float, double, __half, __nv_bfloat16, int32_t, int64_t, bool.
// 16-bit floats compute in float.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/macros.h"
#include "kernels/pointwise_functors.h"
#if defined(__CUDACC_RTC__)
// NVRTC has no <cstdint>. These match glibc's on LP64 Linux, the only host Ember targets, and
// an identical typedef elsewhere (core/philox.h's users) is harmless.
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
#else
#include <cstdint>
#endif

namespace ember::kernels::cuda::elementwise {

inline constexpr int kMaxDims = 8;      // ember::kMaxDims (checked where the host includes both)
inline constexpr int kMaxOperands = 4;  // the output and up to three inputs
inline constexpr int kThreads = 256;    // threads per block of both kernels

// ---- types -----------------------------------------------------------------------------------
template <class S>
struct ComputeType {
  using type = S;
};
template <>
struct ComputeType<__half> {
  using type = float;
};
template <>
struct ComputeType<__nv_bfloat16> {
  using type = float;
};
template <class S>
using compute_t = typename ComputeType<S>::type;

// Conversion between any two of the storage and compute types. 16-bit floats convert through
// float in both directions, as the host's Half/BFloat16 do, so both devices round alike.
template <class To>
struct Convert {
  template <class From>
  static __device__ __forceinline__ To from(From v) {
    return static_cast<To>(v);
  }
  static __device__ __forceinline__ To from(__half v) { return static_cast<To>(__half2float(v)); }
  static __device__ __forceinline__ To from(__nv_bfloat16 v) {
    return static_cast<To>(__bfloat162float(v));
  }
};
template <>
struct Convert<bool> {
  template <class From>
  static __device__ __forceinline__ bool from(From v) {
    return v != From(0);
  }
  static __device__ __forceinline__ bool from(__half v) { return __half2float(v) != 0.0f; }
  static __device__ __forceinline__ bool from(__nv_bfloat16 v) {
    return __bfloat162float(v) != 0.0f;
  }
};
template <>
struct Convert<__half> {
  template <class From>
  static __device__ __forceinline__ __half from(From v) {
    return __float2half_rn(static_cast<float>(v));
  }
  static __device__ __forceinline__ __half from(__half v) { return v; }
  static __device__ __forceinline__ __half from(__nv_bfloat16 v) {
    return __float2half_rn(__bfloat162float(v));
  }
};
template <>
struct Convert<__nv_bfloat16> {
  template <class From>
  static __device__ __forceinline__ __nv_bfloat16 from(From v) {
    return __float2bfloat16_rn(static_cast<float>(v));
  }
  static __device__ __forceinline__ __nv_bfloat16 from(__nv_bfloat16 v) { return v; }
  static __device__ __forceinline__ __nv_bfloat16 from(__half v) {
    return __float2bfloat16_rn(__half2float(v));
  }
};
template <class To, class From>
__device__ __forceinline__ To convert(From v) {
  return Convert<To>::from(v);
}

// An inline scalar arrives as the bytes of its storage type in the low bits of a uint64.
template <class S>
struct FromBits {
  static __device__ __forceinline__ S get(uint64_t b) { return static_cast<S>(b); }
};
template <>
struct FromBits<float> {
  static __device__ __forceinline__ float get(uint64_t b) {
    return __uint_as_float(static_cast<unsigned>(b));
  }
};
template <>
struct FromBits<double> {
  static __device__ __forceinline__ double get(uint64_t b) {
    return __longlong_as_double(static_cast<long long>(b));
  }
};
template <>
struct FromBits<__half> {
  static __device__ __forceinline__ __half get(uint64_t b) {
    return __ushort_as_half(static_cast<unsigned short>(b));
  }
};
template <>
struct FromBits<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 get(uint64_t b) {
    return __ushort_as_bfloat16(static_cast<unsigned short>(b));
  }
};
template <>
struct FromBits<int32_t> {
  static __device__ __forceinline__ int32_t get(uint64_t b) {
    return static_cast<int32_t>(static_cast<uint32_t>(b));
  }
};
template <>
struct FromBits<bool> {
  static __device__ __forceinline__ bool get(uint64_t b) { return (b & 0xffu) != 0; }
};

// ---- the per-element operations ----------------------------------------------------------------
// Applies functor F (kernels/pointwise_functors.h) in compute type C; stores as Out.
template <class F, class C, class Out>
struct ComputeOp {
  F f;
  template <class... S>
  __device__ __forceinline__ Out operator()(S... s) const {
    return convert<Out>(f(convert<C>(s)...));
  }
};
// cast and fill: a conversion, nothing to compute.
template <class Out>
struct CastOp {
  template <class S>
  __device__ __forceinline__ Out operator()(S s) const {
    return convert<Out>(s);
  }
};
// where(cond, a, b): the condition stays bool.
template <class C, class Out>
struct WhereOp {
  template <class S>
  __device__ __forceinline__ Out operator()(bool c, S a, S b) const {
    return convert<Out>(::ember::pw::where{}(c, convert<C>(a), convert<C>(b)));
  }
};

// ---- kernel arguments --------------------------------------------------------------------------
template <int N>
struct Operands {
  char* data[N];             // operand 0 is the output
  uint64_t scalar_bits[N];   // values of inline scalars
  unsigned scalar_mask = 0;  // bit k: operand k is an inline scalar (data[k] unused)
};

// Division by a runtime constant with a multiply and a shift (Granlund & Montgomery): for
// d < 2^32, s = ceil(log2 d) and m = floor(2^32 (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s
// for every 32-bit n.
struct FastDivmod {
  uint32_t divisor = 1, multiplier = 1, shift = 0;
  EMBER_HD static FastDivmod make(uint32_t d) {
    FastDivmod r;
    r.divisor = d;
    uint32_t s = 0;
    while (s < 32 && (uint64_t{1} << s) < d) ++s;
    r.shift = s;
    r.multiplier = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
    return r;
  }
  EMBER_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    return static_cast<uint32_t>((uint64_t{hi} + n) >> shift);
  }
};

template <int N>
struct StridedArgs {
  Operands<N> ops;
  int ndim = 0;
  bool index32 = true;  // numel < 2^31: coordinates via FastDivmod
  int64_t numel = 0;
  FastDivmod div[kMaxDims];
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];  // bytes, innermost dim first
};

template <int N>
struct FlatArgs {
  Operands<N> ops;
  unsigned bcast_mask = 0;  // bit k: operand k is one value in device memory (stride 0)
  int64_t numel = 0;
};

// ---- small metaprogramming (no <utility> under NVRTC) ------------------------------------------
template <int... I>
struct Seq {};
template <int N, int... I>
struct MakeSeq {
  using type = typename MakeSeq<N - 1, N - 1, I...>::type;
};
template <int... I>
struct MakeSeq<0, I...> {
  using type = Seq<I...>;
};

template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
// One Vec per input, addressed by the input's position.
template <int I, class T, int V>
struct Slot {
  Vec<T, V> vec;
};
template <int V, class Idx, class... T>
struct Slots;
template <int V, int... I, class... T>
struct Slots<V, Seq<I...>, T...> : Slot<I, T, V>... {};
template <int I, int V, class T>
__device__ __forceinline__ Vec<T, V>& slot(Slot<I, T, V>& s) {
  return s.vec;
}

template <class T, int K, int N>
__device__ __forceinline__ T load_at(const Operands<N>& ops, int64_t byte_offset) {
  if ((ops.scalar_mask >> K) & 1u) return FromBits<T>::get(ops.scalar_bits[K]);
  return *reinterpret_cast<const T*>(ops.data[K] + byte_offset);
}

// ---- flat kernel -------------------------------------------------------------------------------
template <int V, class T>
__device__ __forceinline__ void load_vec(Vec<T, V>& dst, bool is_const, T value, const char* base,
                                         int64_t i) {
  if (is_const) {
#pragma unroll
    for (int j = 0; j < V; ++j) dst.v[j] = value;
  } else {
    dst = reinterpret_cast<const Vec<T, V>*>(base)[i];
  }
}

template <int V, class Out, class... In, class Op, int... I>
__device__ __forceinline__ void flat_body(const FlatArgs<1 + sizeof...(In)>& a, const Op& op,
                                          Seq<I...>) {
  const int64_t n = a.numel;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const unsigned const_mask = a.ops.scalar_mask | a.bcast_mask;
  // Inputs that are one value (inline or broadcast from device memory): read once.
  Slots<1, Seq<I...>, In...> consts;
  ((slot<I>(consts).v[0] = ((const_mask >> (I + 1)) & 1u) ? load_at<In, I + 1>(a.ops, 0) : In()),
   ...);
  Out* out = reinterpret_cast<Out*>(a.ops.data[0]);
  const int64_t nvec = n / V;
  for (int64_t i = start; i < nvec; i += step) {
    Slots<V, Seq<I...>, In...> in;
    (load_vec<V, In>(slot<I>(in), (const_mask >> (I + 1)) & 1u, slot<I>(consts).v[0],
                     a.ops.data[I + 1], i),
     ...);
    Vec<Out, V> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.v[j] = op(slot<I>(in).v[j]...);
    reinterpret_cast<Vec<Out, V>*>(out)[i] = r;
  }
  for (int64_t k = nvec * V + start; k < n; k += step) {
    out[k] =
        op((((const_mask >> (I + 1)) & 1u) ? slot<I>(consts).v[0]
                                           : reinterpret_cast<const In*>(a.ops.data[I + 1])[k])...);
  }
}

template <int V, class Op, class Out, class... In>
__global__ void __launch_bounds__(kThreads)
    flat_kernel(const FlatArgs<1 + sizeof...(In)> a, const Op op) {
  flat_body<V, Out, In...>(a, op, typename MakeSeq<sizeof...(In)>::type{});
}

// ---- strided kernel ----------------------------------------------------------------------------
template <int N>
__device__ __forceinline__ void element_offsets(const StridedArgs<N>& a, int64_t linear,
                                                int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  if (a.index32) {
    uint32_t idx = static_cast<uint32_t>(linear);
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == a.ndim) break;
      uint32_t coord = idx;
      if (d + 1 < a.ndim) {  // the outermost dim needs no division
        const uint32_t q = a.div[d].div(idx);
        coord = idx - q * a.div[d].divisor;
        idx = q;
      }
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(coord) * a.strides[k][d];
    }
  } else {
    int64_t idx = linear;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == a.ndim) break;
      int64_t coord = idx;
      if (d + 1 < a.ndim) {
        coord = idx % a.sizes[d];
        idx = idx / a.sizes[d];
      }
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += coord * a.strides[k][d];
    }
  }
}

template <class Out, class... In, class Op, int... I>
__device__ __forceinline__ void strided_body(const StridedArgs<1 + sizeof...(In)>& a, const Op& op,
                                             Seq<I...>) {
  constexpr int N = 1 + sizeof...(In);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel;
       i += step) {
    int64_t off[N];
    element_offsets(a, i, off);
    const Out r = op(load_at<In, I + 1>(a.ops, off[I + 1])...);
    *reinterpret_cast<Out*>(a.ops.data[0] + off[0]) = r;
  }
}

template <class Op, class Out, class... In>
__global__ void __launch_bounds__(kThreads)
    strided_kernel(const StridedArgs<1 + sizeof...(In)> a, const Op op) {
  strided_body<Out, In...>(a, op, typename MakeSeq<sizeof...(In)>::type{});
}

}  // namespace ember::kernels::cuda::elementwise
