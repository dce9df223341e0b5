#pragma once
// Runs a fused pointwise (or pointwise + reduction) group on the CPU chunk by chunk along its
// outermost dim, so the group's intermediates live in a few KB of scratch that stays in cache
// instead of full tensors in memory. Each member is the eager CPU kernel applied to a chunk.
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
  void set_chunk(int64_t r0, int64_t n);

  Shape shape_;
  int64_t rows_ = 1, rows_per_chunk_ = 1;
  std::vector<Chunked> chunked_;
  std::vector<Member> members_;
  StoragePtr scratch_;
  // The trailing reduction, when the group has one.
  bool has_reduce_ = false;
  bool reduce_rows_ = false;  // dim 0 is reduced: chunks give partials to combine
  OpId reduce_op_ = OpId::sum, combine_op_ = OpId::add;
  OpId empty_op_ = OpId::sum;  // the group's own reduction (a mean stays a mean)
  Attrs reduce_attrs_;
  Tensor reduce_in_;   // chunk view of the reduction's input
  Tensor reduce_out_;  // the full output, or its row chunk when rows are not reduced
  int32_t reduce_out_chunk_ = -1;
  Tensor partial_;         // scratch for one chunk's partial result (reduce_rows_)
  double mean_scale_ = 0;  // mean over rows: sum the chunks, then scale
  Tensor scale_;
};

}  // namespace ember::jit
