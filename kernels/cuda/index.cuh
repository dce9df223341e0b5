#pragma once
// gather, index_select, one_hot and scatter_add on contiguous inputs with int64 indices (a
// scatter_add's index may have any strides).
// gather and index_select move elements as unsigned words of their size, so one instantiation
// per width serves every dtype. An index outside its dimension raises the device error flag and
// the element becomes 0, or (scatter_add) is skipped: no trap, so the context survives and the
// host reports the error at the next synchronize.
#include "core/macros.h"
#include "kernels/cuda/device_error.cuh"
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

inline constexpr int kIndexMaxDims = 8;

// gather: out and index share a shape; out[p] = in[p with coordinate `dim` := index[p]].
// Sizes are the index's, innermost first; in_stride are the input's (contiguous) strides.
struct GatherShape {
  int ndim;
  int dim;  // position of the gathered dim in the innermost-first arrays
  int64_t size[kIndexMaxDims];
  int64_t in_stride[kIndexMaxDims];
  int64_t dim_size;
};

template <class W>
__global__ void gather_kernel(const W* __restrict__ in, const int64_t* __restrict__ index,
                              W* __restrict__ out, int64_t n, GatherShape g,
                              DeviceErrorFlag* flag) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    int64_t pos = e, off = 0;
    for (int d = 0; d < g.ndim; ++d) {
      const int64_t q = pos / g.size[d];
      if (d != g.dim) off += (pos - q * g.size[d]) * g.in_stride[d];
      pos = q;
    }
    const int64_t v = index[e];
    if (v < 0 || v >= g.dim_size) {
      raise_device_error(flag, kGatherIndex, v, g.dim_size);
      out[e] = W{};
    } else {
      out[e] = in[off + v * g.in_stride[g.dim]];
    }
  }
}

// index_select: in is [outer, in_dim, inner], out is [outer, n_index, inner] (inner counted in
// words W, which may hold several elements).
template <class W>
__global__ void index_select_kernel(const W* __restrict__ in, const int64_t* __restrict__ index,
                                    W* __restrict__ out, int64_t n, int64_t n_index, int64_t in_dim,
                                    int64_t inner, DeviceErrorFlag* flag) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    const int64_t r = e / inner, i = e - r * inner;
    const int64_t o = r / n_index, j = r - o * n_index;
    const int64_t v = index[j];
    if (v < 0 || v >= in_dim) {
      raise_device_error(flag, kIndexSelectIndex, v, in_dim);
      out[e] = W{};
    } else {
      out[e] = in[(o * in_dim + v) * inner + i];
    }
  }
}

// one_hot: out[i, k] = (in[i] == k) for k in [0, classes).
__global__ void one_hot_kernel(const int64_t* __restrict__ in, int64_t* __restrict__ out, int64_t n,
                               int64_t classes, DeviceErrorFlag* flag) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    const int64_t i = e / classes, k = e - i * classes;
    const int64_t v = in[i];
    if ((v < 0 || v >= classes) && k == 0) raise_device_error(flag, kOneHotClass, v, classes);
    out[e] = v == k ? 1 : 0;
  }
}

// scatter_add: out (contiguous, zero-filled beforehand) += src at the source's positions with
// coordinate `dim` := index[p]. Sizes are the source's, innermost first; out_stride are the
// output's contiguous strides, index_stride the index's own (any, such as the zero strides of
// a 1-D index expanded over the other dims, which then needs no copy). Duplicate indices meet
// in atomicAdd, so the order of the adds (and, for floats, the rounding) varies from run to
// run, as in PyTorch.
struct ScatterShape {
  int ndim;
  int dim;  // position of the scattered dim in the innermost-first arrays
  int64_t size[kIndexMaxDims];
  int64_t out_stride[kIndexMaxDims];
  int64_t index_stride[kIndexMaxDims];
  int64_t dim_size;
};

// atomicAdd for every numeric storage type (16-bit floats natively: sm_70 for __half, sm_80 for
// __nv_bfloat16; int64 as unsigned long long, whose wrap-around is two's complement addition).
__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__half* p, __half v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int32_t* p, int32_t v) {
  atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v));
}
__device__ __forceinline__ void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

template <class T>
__global__ void scatter_add_kernel(const T* __restrict__ src, const int64_t* __restrict__ index,
                                   T* __restrict__ out, int64_t n, ScatterShape g,
                                   DeviceErrorFlag* flag) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    int64_t pos = e, off = 0, ioff = 0;
    for (int d = 0; d < g.ndim; ++d) {
      const int64_t q = pos / g.size[d];
      const int64_t c = pos - q * g.size[d];
      if (d != g.dim) off += c * g.out_stride[d];
      ioff += c * g.index_stride[d];
      pos = q;
    }
    const int64_t v = index[ioff];
    if (v < 0 || v >= g.dim_size) {
      raise_device_error(flag, kScatterAddIndex, v, g.dim_size);
    } else {
      atomic_add(out + off + v * g.out_stride[g.dim], src[e]);
    }
  }
}

}  // namespace ember::kernels::cuda::dev
