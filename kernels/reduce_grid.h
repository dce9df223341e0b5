#pragma once
// How a CUDA reduction is cut into blocks, shared by the eager planner (kernels/cuda/reduce.cu)
// and the JIT's fused reductions (jit/reduction_codegen.cpp). A reduction's result depends on
// the cut (which lane folds which positions, how lanes and chunks are combined), so both take it
// from here: a sum fused into its producer comes out bitwise the same as the eager sum of the
// producer's output. Host-only and dependency-free.
#include <algorithm>
#include <cstdint>

namespace ember::kernels {

// Why 8 per multiprocessor: a reduction block is 256 threads and an SM holds 2048, so 8 blocks
// per SM is one full wave. Fewer blocks leave a tall reduction (a [8192, 512] bias gradient, say)
// with a fraction of the GPU's threads, each folding many rows one dependent load after
// another, far below memory bandwidth.
inline constexpr int64_t kReduceBlocksPerSm = 8;
inline constexpr int64_t kReduceThreads = 256;  // per block

inline int64_t reduce_target_blocks(int sm_count) {
  return kReduceBlocksPerSm * static_cast<int64_t>(sm_count < 1 ? 1 : sm_count);
}

// One reduction's launch.
//  - columns (a kept dim innermost in memory): a block is `bx` consecutive outputs by `by` lanes
//    splitting the reduced positions;
//  - rows (a reduced dim innermost): a block is `bx` lanes by `by` outputs.
// The reduced positions of each output are cut into `splits` chunks of `chunk` positions
// (blockIdx.y, or the fused kernels' second grid index); with splits > 1 each chunk's state is
// a partial that a finishing step combines. The finish has the tile's shape: the lane that
// folded positions r = lane, lane + L, ... of a chunk folds partials k = lane, lane + L, ... in
// increasing k, and the lanes combine as the tile's do (columns: a halving tree; rows: within
// each warp, then across warps). All of a lane's partials are loads in flight at once, where
// one warp per output folding partials lane, lane + 32, ... took a trip per output.
struct ReduceTile {
  int64_t bx = 32, by = 8;
  int64_t blocks_x = 1;
  int64_t chunk = 0, splits = 1;
};

inline ReduceTile plan_reduce_tile(bool columns, int64_t num_out, int64_t count, int sm_count) {
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto pow2_ceil = [](int64_t v) {
    int64_t p = 1;
    while (p < v) p *= 2;
    return p;
  };
  const int64_t target = reduce_target_blocks(sm_count);
  ReduceTile t;
  int64_t per_block_work = 0;
  if (columns) {
    t.bx = std::min<int64_t>(32, pow2_ceil(num_out));
    t.by = std::max<int64_t>(1, std::min(kReduceThreads / t.bx, pow2_ceil(count)));
    t.blocks_x = ceil_div(num_out, t.bx);
    // Four positions per lane: a lane loads them together (one trip to memory), and a column
    // sum that fills few tiles, such as a [4096, 128] bias gradient, spreads over enough blocks
    // to keep every multiprocessor's loads in flight. With sixteen per lane the same sum ran on
    // one block per SM, four dependent trips each.
    per_block_work = t.by * 4;
  } else {
    // A whole block per output only when the rows are long and too few to fill the GPU a warp
    // each.
    const bool few_long = count > 1024 && ceil_div(num_out, 8) < target;
    t.bx = few_long ? kReduceThreads : 32;
    t.by = kReduceThreads / t.bx;
    t.blocks_x = ceil_div(num_out, t.by);
    per_block_work = t.bx * 8;
  }
  // Split the reduction only when the outputs alone give too few blocks. A rows chunk is a
  // multiple of four lanes' worth so that each chunk of a contiguous row starts 16-byte aligned
  // wherever the row does.
  t.chunk = std::max<int64_t>(count, 1);
  if (t.blocks_x < target && count > 2 * per_block_work) {
    const int64_t splits =
        std::min({ceil_div(target, t.blocks_x), ceil_div(count, per_block_work), int64_t{65535}});
    const int64_t align = columns ? t.by : t.bx * 4;
    t.chunk = ceil_div(ceil_div(count, splits), align) * align;
  }
  t.splits = ceil_div(std::max<int64_t>(count, 1), t.chunk);
  return t;
}

}  // namespace ember::kernels
