#pragma once
// Runs a fused pointwise (or pointwise + reduction) group on the CPU chunk by chunk along its
// outermost dim, so the group's intermediates live in a few KB of scratch that stays in cache
// instead of full tensors in memory. Each member is the eager CPU kernel applied to a chunk, so
// every element is computed exactly as eager computes it.
//
// Chunks are independent, so they run on the intra-op pool (core/parallel.h): each thread works
// through lanes of its own (chunk views and scratch), and results do not depend on the thread
// count.
//
// A reduction that keeps the rows runs per chunk too. One over the rows does not: summing chunk
// partials would add in another order than the eager kernel (which accumulates in double and
// rounds once), so the replay would drift from eager in the last bits. Its input is written
// whole instead and the eager kernel reduces it once, which also gives an empty batch eager's
// result (0 for a sum, NaN for a mean) rather than nothing.
#include <atomic>
#include <memory>
#include <vector>

#include "jit/graph.h"
#include "jit/passes.h"

namespace ember::jit {

class CpuGroupRunner {
 public:
  // `slots`: the executor's tensor per value (stored values already placed).
  CpuGroupRunner(const Graph& g, const Group& group,
                 const std::vector<std::shared_ptr<TensorImpl>>& slots, const MemoryPlan& plan);
  void run();
  int32_t kernel_calls_per_run() const;

  // Elements per chunk: ~32 KB of float32 per intermediate.
  static constexpr int64_t kChunkElems = 8192;

 private:
  struct Chunked {                      // a tensor seen one chunk of rows at a time
    std::shared_ptr<TensorImpl> full;   // null for scratch
    std::shared_ptr<TensorImpl> chunk;  // re-pointed at each chunk
    int64_t row_stride = 0;             // elements between rows (0: not sliced, e.g. broadcast)
    int64_t base_offset = 0;
  };
  struct Member {
    OpId op;
    Attrs attrs;
    std::vector<Tensor> args;  // chunk views of externals / earlier members
    Tensor out;                // chunk view of the member's output
  };
  // What one thread needs to run chunks: its own views and scratch.
  struct Lane {
    std::vector<Chunked> chunked;
    std::vector<Member> members;
    StoragePtr scratch;
    Tensor reduce_in;   // chunk view of the reduction's input (the whole input if reduce_rows_)
    Tensor reduce_out;  // the full output, or its row chunk when rows are not reduced
  };
  Lane build_lane(const Graph& g, const Group& group,
                  const std::vector<std::shared_ptr<TensorImpl>>& slots, const MemoryPlan& plan);
  void set_chunk(Lane& lane, int64_t r0, int64_t n) const;
  void run_chunks(Lane& lane, int64_t c0, int64_t c1) const;

  Shape shape_;
  int64_t rows_ = 1, rows_per_chunk_ = 1, chunk_elems_ = 1;
  std::vector<Lane> lanes_;
  std::atomic<int> next_lane_{0};
  // The trailing reduction, when the group has one.
  bool has_reduce_ = false;
  bool reduce_rows_ = false;  // dim 0 is reduced: once, over the whole input, after the chunks
  OpId reduce_op_ = OpId::sum;
  Attrs reduce_attrs_;
  std::shared_ptr<TensorImpl> reduce_full_;  // whole memory for a scratch input reduced over rows
};

}  // namespace ember::jit
