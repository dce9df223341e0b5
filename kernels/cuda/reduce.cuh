#pragma once
// Reductions over any subset of the dims of a strided tensor (sum, mean, amax, amin, argmax,
// logsumexp). The input's dims split into kept dims, whose row-major position is the index of
// the contiguous output, and reduced dims, walked by a flat position r. Two kernels cover the
// layouts without copying the input:
//  - rows:    a group of threads along x (a warp, or a whole block for long rows) reduces one
//             output; used when a reduced dim is innermost in memory (sum over the last dim).
//  - columns: threads along x take consecutive outputs and threads along y split r; used when a
//             kept dim is innermost in memory (column sums of a row-major matrix, bias grads).
// When there are too few outputs to fill the GPU, both split r into chunks over blockIdx.y and
// write partial states; `reduce_partials_kernel`, in the same tiles, then combines the chunks of
// each output.
#include "kernels/cuda/block_reduce.cuh"

namespace ember::kernels::cuda::dev {

inline constexpr int kReduceMaxDims = 8;

// One group of dims (kept or reduced): sizes and element strides, innermost first, size-1 dims
// dropped and contiguous neighbours merged by the host.
struct DimGroup {
  int n;
  int64_t size[kReduceMaxDims];
  int64_t stride[kReduceMaxDims];
};

// Element offset of flat position `pos` (row-major over the group).
__device__ __forceinline__ int64_t group_offset(const DimGroup& g, int64_t pos) {
  if (g.n == 1) return pos * g.stride[0];
  int64_t off = 0;
  for (int d = 0; d < g.n; ++d) {
    const int64_t q = pos / g.size[d];
    off += (pos - q * g.size[d]) * g.stride[d];
    pos = q;
  }
  return off;
}

struct ReduceShape {
  DimGroup keep, red;
  int64_t num_out;  // outputs (product of kept sizes)
  int64_t count;    // reduced elements per output
  int64_t chunk;    // reduced elements per blockIdx.y
};

// Writes either the projected result (out) or, when splitting, the partial state.
template <class Op, class Out>
__device__ __forceinline__ void reduce_store(const Op& op, const typename Op::State& s,
                                             const ReduceShape& sh, int64_t o, Out* out,
                                             typename Op::State* partial) {
  if (partial) {
    partial[blockIdx.y * sh.num_out + o] = s;
  } else {
    out[o] = op.template project<Out>(s, sh.count);
  }
}

// blockDim = (threads per output: a multiple of 32, outputs per block).
template <class Op, class Acc, class T, class Out>
__global__ void reduce_rows_kernel(const T* __restrict__ in, ReduceShape sh, Op op,
                                   Out* __restrict__ out, typename Op::State* partial) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  typename Op::State s = op.identity();
  if (o < sh.num_out) {
    const T* base = in + group_offset(sh.keep, o);
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * sh.chunk;
    const int64_t r1 = r0 + sh.chunk < sh.count ? r0 + sh.chunk : sh.count;
    if (sh.red.n == 1 && sh.red.stride[0] == 1) {
      fold_contiguous<Op, Acc>(op, s, base, r0, r1, threadIdx.x, blockDim.x);
    } else if (sh.red.n <= 1) {
      const int64_t st = sh.red.n ? sh.red.stride[0] : 0;
#pragma unroll 4
      for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
        op.step(s, to_acc<Acc>(base[r * st]), r);
    } else {
      for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
        op.step(s, to_acc<Acc>(base[group_offset(sh.red, r)]), r);
    }
  }
  s = row_allreduce(op, s);
  if (threadIdx.x == 0 && o < sh.num_out) reduce_store(op, s, sh, o, out, partial);
}

// blockDim = (consecutive outputs, a power of two splitting r).
template <class Op, class Acc, class T, class Out>
__global__ void reduce_columns_kernel(const T* __restrict__ in, ReduceShape sh, Op op,
                                      Out* __restrict__ out, typename Op::State* partial) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  typename Op::State s = op.identity();
  if (o < sh.num_out) {
    const T* base = in + group_offset(sh.keep, o);
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * sh.chunk;
    const int64_t r1 = r0 + sh.chunk < sh.count ? r0 + sh.chunk : sh.count;
    if (sh.red.n <= 1) {
      const int64_t st = sh.red.n ? sh.red.stride[0] : 0;
#pragma unroll 4
      for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y)
        op.step(s, to_acc<Acc>(base[r * st]), r);
    } else {
      for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y)
        op.step(s, to_acc<Acc>(base[group_offset(sh.red, r)]), r);
    }
  }
  s = column_allreduce(op, s);
  if (threadIdx.y == 0 && o < sh.num_out) reduce_store(op, s, sh, o, out, partial);
}

// partial is [splits, num_out]. The block is the tile that wrote the partials (kColumns:
// (outputs, lanes), else (lanes, outputs)), one block per tile: lane l folds partials l, l + L,
// ... and the lanes combine as the tile's kernel combines them (kernels/reduce_grid.h).
template <bool kColumns, class Op, class Out>
__global__ void reduce_partials_kernel(const typename Op::State* __restrict__ partial,
                                       int64_t splits, int64_t num_out, int64_t count, Op op,
                                       Out* __restrict__ out) {
  const int64_t per_block = kColumns ? blockDim.x : blockDim.y;
  const int64_t lane = kColumns ? threadIdx.y : threadIdx.x;
  const int64_t lanes = kColumns ? blockDim.y : blockDim.x;
  const int64_t o =
      static_cast<int64_t>(blockIdx.x) * per_block + (kColumns ? threadIdx.x : threadIdx.y);
  typename Op::State s = op.identity();
  if (o < num_out)
    fold_partials<8>(
        op, s, [&](int64_t k) { return partial[k * num_out + o]; }, lane, lanes, splits);
  if constexpr (kColumns)
    s = column_allreduce(op, s);
  else
    s = row_allreduce(op, s);
  if (lane == 0 && o < num_out) out[o] = op.template project<Out>(s, count);
}

}  // namespace ember::kernels::cuda::dev
