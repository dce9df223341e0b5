#pragma once
// The handwritten driver of the JIT's fused reduction kernels. jit/reduction_codegen.cpp writes,
// per Reduction group, an `Element` computing the pointwise members at one (output o, reduced
// position r) of the group's shape (writing the members' results that are group outputs) and
// returning the value the reduction folds, and a `Store` writing one projected result; this
// driver walks the space and reduces, with the reduction operators of block_reduce.cuh (the
// eager reductions' SumOp / MinMaxOp and accumulate types).
//
// Launch: a 1-D grid of kBlocksX * kSplits blocks of kBX * kBY (<= 256) threads, each block a
// kBX x kBY tile (thread t: tx = t % kBX, ty = t / kBX):
//  - columns (a kept dim innermost in memory, e.g. the bias gradient's column sums): tx picks
//    one of kBX consecutive outputs, ty one of kBY lanes splitting r;
//  - rows (a reduced dim innermost): ty picks one of kBY outputs, tx one of kBX lanes.
// Block (bx, by) covers outputs of tile bx and reduced positions [by * kChunk, (by + 1) * kChunk).
//
// Order of summation, fixed by the constants alone (the same result on every run), and the
// eager reduction kernels' order (kernels/cuda/reduce.cuh) given the same cut, which the host
// takes from the eager planner (kernels/reduce_grid.h):
//  1. each lane folds its positions r = r0 + lane, r0 + lane + L, ... (L lanes) in increasing r,
//     or, for contiguous rows, 16 bytes' worth at a time as eager's vector loads do (kVec);
//  2. the block combines its lanes' states: columns by a halving tree in shared memory (lane i
//     with lane i + h for h = L/2, L/4, ..., 1), rows within each warp and then across warps;
//  3. with kSplits > 1, each block stores its state as partial[by][o], and the block that takes
//     the last ticket of tile bx (an atomic counter, one per tile) combines each output's
//     partials like the eager reduce_partials_kernel (in the same tile, lane l folds partials
//     l, l + L, ... from the identity, then the lanes combine as in step 2), projects and
//     stores, then resets the ticket to 0 for the next launch (so replays, CUDA-graph replays
//     included, need no memset).
// So a reduction fused into its producer comes out bitwise equal to the eager reduction of the
// producer's output: bias and batch-norm gradients, statistics, sums of a loss.
// Device code only (NVRTC).
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/fused_pointwise.cuh"

namespace ember::kernels::cuda::fused {

template <class State>
__device__ __forceinline__ State load_partial(const State* p) {
  // Written by other blocks of this launch: bypass the (incoherent) L1.
  return *static_cast<const volatile State*>(p);
}

// Folds positions r = first, first + kLanes, ... below end, in increasing r.
template <int kLanes, class Index, class Op, class Elem>
__device__ __forceinline__ void fold_strided(const Op& op, typename Op::State& s, const Elem& elem,
                                             Index o, Index first, Index end) {
  // kBatch positions are loaded before the first is computed, then computed and folded in
  // order (the fold's order is unchanged). One position at a time, the members' stores would
  // keep each next load waiting: a round trip to memory per position.
  constexpr int kBatch = 4;
  using Loads = typename Elem::Loads;
  Index r = first;
  for (; r + (kBatch - 1) * kLanes < end; r += kBatch * kLanes) {
    Loads l[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) elem.load(o, r + u * kLanes, l[u]);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      op.step(s, elem(o, r + u * kLanes, l[u]), static_cast<int64_t>(r + u * kLanes));
  }
  for (; r < end; r += kLanes) {
    Loads l;
    elem.load(o, r, l);
    op.step(s, elem(o, r, l), static_cast<int64_t>(r));
  }
}

// kVec > 0: the rows are contiguous rows of `count` elements in eager's materialized input, which
// eager folds 16 bytes (kVec elements) at a time (dev::fold_contiguous): a scalar head up to the
// 16-byte boundary, vector i taken by lane i % kLanes, a scalar tail. The same positions are
// folded here in that order, so the sum is eager's bit for bit.
template <bool kColumns, int kBX, int kBY, int kVec, class Index, class Op, class Elem, class Store>
__device__ __forceinline__ void reduce_tiles(const Op& op, Index num_out, Index count, Index chunk,
                                             unsigned blocks_x, unsigned splits,
                                             typename Op::State* partial, unsigned* tickets,
                                             const Elem& elem, const Store& store) {
  using State = typename Op::State;
  static_assert(kBX * kBY <= kThreads, "a tile is one block");
  static_assert(kVec == 0 || !kColumns, "the vector order is the rows kernel's");
  constexpr int kLanes = kColumns ? kBY : kBX;     // threads splitting r per output
  constexpr int kPerBlock = kColumns ? kBX : kBY;  // outputs per block
  const unsigned t = threadIdx.x;
  const unsigned tx = t % kBX, ty = t / kBX;
  const unsigned bx = blockIdx.x % blocks_x, by = blockIdx.x / blocks_x;
  const unsigned lane = kColumns ? ty : tx;
  const Index o = static_cast<Index>(bx) * kPerBlock + (kColumns ? tx : ty);

  State s = op.identity();
  if (o < num_out) {
    const Index r0 = static_cast<Index>(by) * chunk;
    const Index r1 = r0 + chunk < count ? r0 + chunk : count;
    if constexpr (kVec == 0) {
      fold_strided<kLanes>(op, s, elem, o, r0 + lane, r1);
    } else {
      // Eager's row starts 16-byte aligned (a fresh allocation); position o * count + r0 of it.
      Index head = (kVec - (o * count + r0) % kVec) % kVec;
      if (head > r1 - r0) head = r1 - r0;
      if (lane < head) fold_strided<kLanes>(op, s, elem, o, r0 + lane, r0 + lane + 1);
      const Index a = r0 + head;
      const Index nvec = (r1 - a) / kVec;
      using Loads = typename Elem::Loads;
      for (Index i = lane; i < nvec; i += kLanes) {
        Loads l[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) elem.load(o, a + i * kVec + j, l[j]);
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          op.step(s, elem(o, a + i * kVec + j, l[j]), static_cast<int64_t>(a + i * kVec + j));
      }
      fold_strided<kLanes>(op, s, elem, o, a + nvec * kVec + lane, r1);
    }
  }

  // The lanes' states combined as the eager kernels combine them: rows like row_allreduce
  // (within each warp, then across the warps), columns like column_allreduce (a halving tree).
  // Every thread of the block calls it.
  auto combine_lanes = [&](State v) {
    if constexpr (kColumns) {
      __shared__ State cell[kBX * kBY];
      cell[t] = v;
      __syncthreads();
#pragma unroll
      for (int h = kLanes / 2; h > 0; h >>= 1) {
        if (lane < static_cast<unsigned>(h)) cell[t] = op.combine(cell[t], cell[t + h * kBX]);
        __syncthreads();
      }
      return cell[t];
    } else {
      static_assert(kBX % 32 == 0, "a row is whole warps");
      return dev::row_allreduce(op, v, tx, ty, kBX);
    }
  };
  s = combine_lanes(s);
  const bool leader = lane == 0 && o < num_out;
  if (splits == 1) {
    if (leader) store(o, s);
    return;
  }
  if (leader) partial[static_cast<Index>(by) * num_out + o] = s;
  __threadfence();  // this block's partials are visible before its ticket is taken
  __syncthreads();
  __shared__ bool last;
  if (t == 0) last = atomicAdd(&tickets[bx], 1u) == splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last block of tile bx finishes its outputs as the eager reduce_partials_kernel does, in
  // the same tile: lane l folds partials l, l + kLanes, ... from the identity, then the lanes
  // combine as above.
  State f = op.identity();
  if (o < num_out)
    dev::fold_partials<8>(
        op, f, [&](Index k) { return load_partial(&partial[k * num_out + o]); },
        static_cast<Index>(lane), static_cast<Index>(kLanes), static_cast<Index>(splits));
  f = combine_lanes(f);
  if (leader) store(o, f);
  if (t == 0) tickets[bx] = 0;  // every block of tile bx is done with it
}

}  // namespace ember::kernels::cuda::fused
