#pragma once
// cat along one dim into a contiguous output. The output is [outer, out_dim * inner] row-major;
// input i fills, in every outer row, the run [offset_i * inner, (offset_i + size_i) * inner).
// Contiguous inputs go in batches, one launch for many (blockIdx.y picks the input); strided
// inputs get a launch each that decomposes the flat position with their strides. Elements
// move as unsigned words of their size, so each width serves every dtype.
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

namespace ember::kernels::cuda::dev {

inline constexpr int kCatBatch = 48;  // inputs per launch (kernel parameters stay < 4 KB)
inline constexpr int kCatMaxDims = 8;

struct CatPiece {
  const void* src;
  int64_t run;     // elements per outer row: size_i * inner
  int64_t offset;  // offset_i * inner within an output row
  int64_t numel;   // outer * run
};
struct CatBatch {
  CatPiece piece[kCatBatch];
};

// I: the index type of the flat position (32-bit division is several times cheaper than 64-bit
// division, so launches whose pieces fit use uint32_t).
template <class W, class I>
__global__ void cat_contiguous_kernel(CatBatch batch, W* __restrict__ out, int64_t out_row) {
  const CatPiece p = batch.piece[blockIdx.y];
  const W* src = static_cast<const W*>(p.src);
  const I run = static_cast<I>(p.run), numel = static_cast<I>(p.numel);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I e = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; e < numel; e += step) {
    const I row = e / run;
    out[static_cast<int64_t>(row) * out_row + p.offset + (e - row * run)] = src[e];
  }
}

// One strided input: sizes and element strides innermost first.
struct CatStrided {
  int ndim;
  int64_t size[kCatMaxDims];
  int64_t stride[kCatMaxDims];
};

template <class W>
__global__ void cat_strided_kernel(const W* __restrict__ src, CatStrided in, CatPiece p,
                                   W* __restrict__ out, int64_t out_row) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < p.numel;
       e += step) {
    int64_t pos = e, off = 0;
    for (int d = 0; d < in.ndim; ++d) {
      const int64_t q = pos / in.size[d];
      off += (pos - q * in.size[d]) * in.stride[d];
      pos = q;
    }
    const int64_t row = e / p.run;
    out[row * out_row + p.offset + (e - row * p.run)] = src[off];
  }
}

}  // namespace ember::kernels::cuda::dev
