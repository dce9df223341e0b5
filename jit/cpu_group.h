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
// The scratch (a chunk-sized buffer per intermediate and lane, and the whole input of a
// reduction over rows when no one else stores it) is a workspace the memory plan places in the
// arena, live only while the group runs: kept apart for the life of the executable, it would
// hold memory that eager frees after each op.
//
// A reduction that keeps the rows runs per chunk too. One over the rows does not: summing chunk
// partials would add in another order than the eager kernel (which accumulates in double and
// rounds once), so the replay would drift from eager in the last bits. Its input is written
// whole instead and the eager kernel reduces it once, which also gives an empty batch eager's
// result (0 for a sum, NaN for a mean) rather than nothing.
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "jit/graph.h"
#include "jit/lower.h"
#include "jit/passes.h"

namespace ember::jit {

// What a CPU executable runs chunked for `group`, if anything: the group itself (pointwise,
// reduction) or, for a contraction with a tail, the tail after the product.
std::optional<Group> cpu_chunked_group(const Graph& g, const Group& group);

class CpuGroupRunner {
 public:
  // Where the runner's scratch lives.
  using Workspace = GroupWorkspace;
  // The scratch bytes a runner of `group` needs, given where `plan` stores values (the values it
  // does not store are the group's intermediates, which live in the scratch).
  static int64_t workspace_bytes(const Graph& g, const Group& group, const MemoryPlan& plan);
  // `slots`: the executor's tensor per value (stored values already placed); `workspace` at
  // least workspace_bytes() long.
  CpuGroupRunner(const Graph& g, const Group& group,
                 const std::vector<std::shared_ptr<TensorImpl>>& slots, const MemoryPlan& plan,
                 const Workspace& workspace);
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
  // How `group` is cut: its shape, rows per chunk, chunks, and lanes (one per thread that can
  // get a chunk).
  struct Cut {
    Shape shape;
    int64_t rows = 1, rows_per_chunk = 1, chunk_elems = 1, chunks = 0, lanes = 1;
    int64_t slot_bytes(DType dtype) const;  // one intermediate's chunk buffer (256-aligned)
  };
  static Cut cut_of(const Graph& g, const Group& group);
  // What the scratch holds: per lane, a chunk buffer per intermediate; once, the whole input of
  // a reduction over rows when no one else stores it.
  struct Scratch {
    Cut cut;
    int64_t lane_bytes = 0, whole_bytes = 0;
    int64_t total() const { return cut.lanes * lane_bytes + whole_bytes; }
  };
  static Scratch scratch_of(const Graph& g, const Group& group, const MemoryPlan& plan);
  Lane build_lane(const Graph& g, const Group& group,
                  const std::vector<std::shared_ptr<TensorImpl>>& slots, const MemoryPlan& plan,
                  const Workspace& workspace, const Scratch& scratch, int64_t lane_index);
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
