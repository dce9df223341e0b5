#pragma once
// CUDA-graph replay of an executable (ExecutorOptions::cuda_graph). A graph reads fixed
// addresses, so it is captured for the addresses of its call's arguments and replayed while a
// call's arguments are at those addresses (a training loop that makes each batch where the last
// one was freed keeps hitting one graph): no copy of the batch, no memory beyond eager's. Calls
// whose arguments keep moving fall back, after kMaxBoundCaptures captures, to one graph that
// copies each argument into a static buffer first. Returned tensors are copied out of static
// buffers the graph writes, and random kernels read their key and base counter from device
// memory written before each launch. A returned tensor's static bytes are in the arena where
// the memory plan found them dead (MemoryPlan::static_arena_of), so a replay holds no buffer
// beside the arena for it but the copy it returns.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jit/binding.h"
#include "jit/capture_branches.h"
#include "jit/graph.h"
#include "jit/passes.h"
#include "jit/steps.h"
#include "kernels/cuda/early_read.h"
#include "kernels/cuda/graph.h"

namespace ember::jit {

// Why `g` cannot be captured as one CUDA graph (empty when it can; `device` is then its GPU).
std::string graph_support(const Graph& g, bool computes_on_cuda, int& device);

class GraphReplay final : private StepHooks {
 public:
  struct Bound {
    std::vector<const void*> args;  // each argument's data address (null: not bound)
    cuda::GraphPtr graph;
    std::vector<int> output_copy;  // per fresh root: its copy-out node (-1: none)
  };

  // `g`, `plan`, `bind` and `steps` must outlive it. Nothing is allocated before the first
  // capture.
  GraphReplay(Graph& g, const MemoryPlan& plan, Binding& bind, StepList& steps, int device);

  bool captured() const { return !graphs_.empty(); }
  // The arenas moved: every graph holds their old addresses.
  void forget() { graphs_.clear(); }
  // The graph captured for these arguments' addresses, moved to the front; null if none is.
  // No allocation: a linear search over at most kMaxBoundGraphs keys.
  Bound* find(std::span<const Tensor> args);
  // Captures a graph for these arguments. A capture that fails throws, keeping none, and
  // leaves the steps ready for plain replays.
  Bound& capture(std::span<const Tensor> args);
  // Launches `bg` for this call: points its copies at the call's memory, applies the effects
  // and returns fresh tensors (nothing a later replay overwrites).
  void replay(Bound& bg, std::span<const Tensor> args, std::vector<Tensor>& outputs);

  int64_t nodes() const { return nodes_; }        // of the latest capture
  int32_t captures() const { return captures_; }  // made so far

 private:
  void plan_early_reads(const std::vector<StoragePtr>& placeholders);
  void unbind_args();
  // Where fresh root f's static bytes are for this capture (its own buffer, or the arena's).
  void place_statics();
  // The fresh members' slots back at their trace offsets (what plain replays expect).
  void restore_fresh_offsets();
  void* static_data(size_t f) const {
    return static_cast<char*>(static_fresh_[f].storage->data) + static_fresh_[f].byte_offset;
  }
  // StepHooks: the branches, early reads and output copies a capture queues around the steps.
  void before_steps() override;
  void before_step(int32_t i) override;
  void after_step(int32_t i) override;
  void after_steps() override;

  static constexpr int kMaxBoundGraphs = 4;    // kept at once, the least recently used replaced
  static constexpr int kMaxBoundCaptures = 8;  // captures for new addresses before copying

  Graph& g_;
  const MemoryPlan& plan_;
  Binding& bind_;
  StepList& steps_;
  const int device_;
  std::vector<Bound> graphs_;              // most recently used first
  bool copy_args_ = false;                 // the fallback: graphs_ holds one graph that copies
  int32_t rebinds_ = 0;                    // captures made because the arguments moved
  std::vector<StoragePtr> static_inputs_;  // the fallback's argument buffers
  std::vector<int> input_copy_;            // the fallback's copy of each argument in (-1: none)
  std::vector<int> input_back_;            // ... and back out, for one the step writes (-1: none)
  struct Static {
    StoragePtr storage;  // a buffer of its own, or the arena holding it
    int64_t byte_offset = 0;
    size_t nbytes = 0;
  };
  std::vector<Static> static_fresh_;  // per fresh root
  std::vector<StoragePtr> out_copies_;
  // Returned scalars (a loss) that the graphs also copy to pinned host memory right after the
  // step writing them, so item() need not wait for the rest of the replay.
  struct EarlyOut {
    size_t fresh = 0;        // index into the binding's fresh roots
    int32_t after_step = 0;  // the last step writing it
    std::shared_ptr<cuda::EarlyRead> read;
  };
  std::vector<EarlyOut> early_outs_;
  bool early_planned_ = false;
  std::vector<int32_t> out_after_;  // per fresh root: the last step writing it (-1: none)
  // During a capture: where the output copies it queues point, and their indices.
  const std::vector<StoragePtr>* capture_placeholders_ = nullptr;
  std::vector<int>* capture_output_copy_ = nullptr;
  BranchPlan branches_;
  Tensor rng_state_;
  int64_t nodes_ = 0;
  int32_t captures_ = 0;
};

}  // namespace ember::jit
