#pragma once
// Runs an optimized Graph: every stored value has a fixed place (the memory plan's arena), every
// step is a prebuilt kernel call, so a replay binds the inputs, launches, applies the effects and
// allocates nothing but the tensors it returns.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jit/graph.h"
#include "jit/passes.h"
#include "kernels/cuda/early_read.h"
#include "kernels/cuda/graph.h"

namespace ember::cuda {
class Timeline;  // kernels/cuda/timeline.h
}

namespace ember::jit {

class CpuGroupRunner;  // jit/cpu_group.h
class LoweredGroup;    // jit/lower.h

// The arenas of the executables of one compiled function, shared: its calls run one at a time,
// so the executable of one signature (a batch size) can keep its intermediates in the same
// bytes as another's. Without sharing, a function that serves four batch sizes held four
// arenas (dynamic shapes at batch 8192: 2.2x eager's peak, bench/NOTES.md). Arena k of every
// executable on a device is the same Storage object, grown when a plan needs more: the slots
// read its data pointer at run time, and a captured CUDA graph, which holds the old pointer, is
// captured again (generation() tells an executor the memory moved).
class ArenaPool {
 public:
  // The shared storage of arena `index` on `device` (empty until reserve()).
  StoragePtr storage(size_t index, Device device);
  // Makes that storage at least `bytes` long; a larger one replaces the old memory.
  void reserve(size_t index, Device device, size_t bytes);
  uint64_t generation() const { return generation_; }
  // Whether `s` is one of the pool's arenas (a gradient an executable left there, say).
  bool owns(const Storage* s) const {
    for (const Slot& slot : slots_)
      if (slot.storage.get() == s) return true;
    return false;
  }

 private:
  struct Slot {
    size_t index;
    Device device;
    StoragePtr storage;
  };
  std::vector<Slot> slots_;
  uint64_t generation_ = 0;
};

struct ExecutorOptions {
  // CUDA: capture the replay as a CUDA graph (after one plain replay warmed the libraries up)
  // and launch that graph from then on. Ignored where capture cannot work (see graph_note()).
  bool cuda_graph = false;
  // Shared with the other executables of the same compiled function; null: arenas of its own.
  std::shared_ptr<ArenaPool> arena_pool;
};

struct ExecutorStats {
  int32_t steps = 0;    // units launched per replay
  int32_t kernels = 0;  // device kernels per replay (CUDA) or kernel calls (CPU)
  int32_t cpu_chunked_groups = 0;
  int64_t arena_bytes = 0;
  int64_t graph_nodes = 0;     // nodes of the captured CUDA graph (0: not captured)
  int32_t graph_captures = 0;  // CUDA graphs captured so far (one per argument addresses)
};

class Executor {
 public:
  explicit Executor(Graph graph, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Why this executable can no longer run (state reallocated, a parameter's requires_grad
  // changed), or empty when it can. Checked before every replay; cheap.
  std::string stale_reason() const;
  // One replay: `args` are the tensor arguments in order (already checked against the
  // signature); the returned tensors are fresh (nothing later overwrites them).
  void run(std::span<const Tensor> args, std::vector<Tensor>& outputs);

  const Graph& graph() const { return g_; }
  const MemoryPlan& plan() const { return plan_; }
  const ExecutorStats& stats() const { return stats_; }
  // Why a requested CUDA graph is not used (empty when it is, or was not asked for).
  const std::string& graph_note() const { return graph_note_; }
  // One line per lowered group ("pointwise x4 -> nvrtc kernel ..."), for logs and explain.
  std::vector<std::string> lowerings() const;

 private:
  enum class StepKind : uint8_t { Kernel, Random, Transfer, Update, CpuGroup, Lowered };
  struct Step {
    StepKind kind = StepKind::Kernel;
    OpId op = OpId::neg;
    Attrs attrs;
    std::vector<Tensor> args;
    Tensor out;
    Device device;
    uint64_t rng_delta = 0;
    int32_t cpu_group = -1;  // CpuGroup: index into cpu_groups_; Lowered: the group
  };

  void build_slots();
  void build_steps();
  void check_graph_support();
  void run_steps(bool capturing, cuda::Timeline* timeline = nullptr);
  void run_steps_profiled(int device);
  std::string step_name(const Step& s) const;
  struct BoundGraph;
  BoundGraph* find_graph(std::span<const Tensor> args);
  BoundGraph* capture_graph(std::span<const Tensor> args);
  void replay_graph(BoundGraph& bg, std::span<const Tensor> args, std::vector<Tensor>& outputs);
  void apply_effects();
  void drop_replaced_grads();
  void abandon_replay();
  void release_call_memory();
  void allocate_arenas();
  Tensor slot_tensor(ValueId v) const { return Tensor(slots_[v]); }

  Graph g_;
  MemoryPlan plan_;
  ExecutorStats stats_;
  std::vector<std::shared_ptr<TensorImpl>> slots_;  // per value id
  // The plan's arenas. Their memory is taken at the first replay, not when the executable is
  // built (see allocate_arenas), so arena_bytes_ keeps each one's size until then.
  std::vector<StoragePtr> arenas_;
  std::vector<size_t> arena_bytes_;
  bool arenas_allocated_ = false;
  std::shared_ptr<ArenaPool> pool_;
  uint64_t seen_generation_ = 0;  // the pool's generation when this plan's arenas last fit
  std::vector<Step> steps_;
  std::vector<std::unique_ptr<CpuGroupRunner>> cpu_groups_;
  // Per group (CUDA; null: op by op), then one per standalone GEMM (its group in solo_groups_).
  std::vector<std::unique_ptr<LoweredGroup>> lowered_;
  std::vector<std::unique_ptr<Group>> solo_groups_;
  // Per input argument: the values whose storage follows it (the root and its views).
  std::vector<std::vector<ValueId>> input_members_;
  // Roots allocated fresh per replay, and the values sharing each.
  std::vector<ValueId> fresh_roots_;
  std::vector<std::vector<ValueId>> fresh_members_;
  std::vector<Tensor> grad_tensors_;  // per grad effect (undefined: clears the grad)
  std::vector<const Storage*> state_storage_;
  std::vector<bool> state_requires_grad_;
  std::vector<ValueId> written_external_;  // roots whose version a replay bumps
  uint64_t rng_counters_ = 0;

  // CUDA-graph replay. A graph reads fixed addresses, so it is captured for the addresses of
  // its call's arguments and replayed while a call's arguments are at those addresses (a
  // training loop that makes each batch where the last one was freed keeps hitting one graph):
  // no copy of the batch, no memory beyond eager's. Calls whose arguments keep moving fall back,
  // after kMaxBoundCaptures captures, to one graph that copies each argument into a static
  // buffer first. Returned tensors are copied out of static buffers the graph writes, and
  // random kernels read their key and base counter from rng_state_ (written before each launch).
  struct BoundGraph {
    std::vector<const void*> args;  // each argument's data address (null: not bound)
    cuda::GraphPtr graph;
    std::vector<int> output_copy;  // per fresh root: its copy-out node (-1: none)
  };
  static constexpr int kMaxBoundGraphs = 4;    // kept at once, the least recently used replaced
  static constexpr int kMaxBoundCaptures = 8;  // captures for new addresses before copying
  ExecutorOptions options_;
  std::string graph_note_;
  bool graph_ok_ = false;
  int32_t plain_replays_ = 0;
  int profile_device_ = -1;  // the GPU a CUDA executable computes on (-1: CPU)
  int graph_device_ = 0;
  std::vector<BoundGraph> graphs_;         // most recently used first
  bool copy_args_ = false;                 // the fallback: graphs_ holds one graph that copies
  int32_t rebinds_ = 0;                    // captures made because the arguments moved
  std::vector<StoragePtr> static_inputs_;  // the fallback's argument buffers
  std::vector<int> input_copy_;            // the fallback's copy of each argument in (-1: none)
  std::vector<int> input_back_;            // ... and back out, for one the step writes (-1: none)
  std::vector<StoragePtr> static_fresh_;
  std::vector<StoragePtr> out_copies_;
  // Returned scalars (a loss) that the graphs also copy to pinned host memory right after the
  // step writing them, so item() need not wait for the rest of the replay (cuda::EarlyRead).
  struct EarlyOut {
    size_t fresh = 0;        // index into fresh_roots_
    int32_t after_step = 0;  // the last step writing it
    std::shared_ptr<cuda::EarlyRead> read;
  };
  std::vector<EarlyOut> early_outs_;
  bool early_planned_ = false;
  std::vector<int32_t> out_after_;  // per fresh root: the last step writing it (-1: none)
  // During a capture: where run_steps puts the output copies it queues.
  const std::vector<StoragePtr>* capture_placeholders_ = nullptr;
  std::vector<int>* capture_output_copy_ = nullptr;
  std::vector<int32_t> node_step_;  // per node: the step that runs it
  // Concurrent branches of the captured graph (plan_branches): per step, its branch (0: the
  // main stream), the steps whose events it waits for, and whether later steps wait for it.
  static constexpr int kSideBranches = 2;
  void plan_branches();
  std::vector<int8_t> step_branch_;
  std::vector<std::vector<int32_t>> step_waits_;
  std::vector<char> step_signals_;
  int32_t branch_sides_ = 0;  // side branches the plan uses
  Tensor rng_state_;
};

}  // namespace ember::jit
