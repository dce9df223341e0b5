#pragma once
// The ordered list of what a replay runs: prebuilt kernel calls (their tensors are the slots'
// own, so they see every binding), chunked CPU groups and lowered CUDA groups. A CUDA-graph
// capture runs the same list with hooks around each step (jit/graph_replay.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/collective.h"
#include "jit/binding.h"
#include "jit/graph.h"
#include "jit/passes.h"

namespace ember::cuda {
class Timeline;  // kernels/cuda/timeline.h
}

namespace ember::jit {

class CpuGroupRunner;  // jit/cpu_group.h
class LoweredGroup;    // jit/lower.h

// A collective runs as two steps: its start, where the node stands, and its wait, just before
// the first later step that touches its tensor (or at the end), so the steps in between run
// while the other ranks communicate.
enum class StepKind : uint8_t {
  Kernel,
  Random,
  Transfer,
  Update,
  CpuGroup,
  Lowered,
  CollectiveStart,
  CollectiveWait
};
struct Step {
  StepKind kind = StepKind::Kernel;
  OpId op = OpId::neg;
  Attrs attrs;
  std::vector<Tensor> args;
  Tensor out;
  Device device;
  uint64_t rng_delta = 0;
  int32_t cpu_group = -1;  // CpuGroup: index into the CPU groups; Lowered: into lowered();
                           // Collective*: the in-flight slot
};

// What a capture queues around the steps; a plain replay runs them with none. A virtual
// interface rather than callbacks: only captures pay for it, once per step.
class StepHooks {
 public:
  virtual void before_steps() = 0;
  virtual void before_step(int32_t i) = 0;
  virtual void after_step(int32_t i) = 0;
  virtual void after_steps() = 0;

 protected:
  ~StepHooks() = default;
};

class StepList {
 public:
  StepList();
  ~StepList();
  StepList(const StepList&) = delete;
  StepList& operator=(const StepList&) = delete;

  // One step per unit of work, in node order: on CUDA the groups with a lowering (`storage`:
  // what the memory plan gave each group) run lowered, on the CPU pointwise groups run chunked.
  // `g`, `plan` and `bind` must outlive the list.
  void build(const Graph& g, const MemoryPlan& plan, const Binding& bind,
             const std::vector<GroupStorage>& storage, bool cuda);

  // Runs every step. `capture` set: a CUDA-graph capture, which only records, so random steps
  // take their key from the device (use_rng_state) and the generator does not advance.
  void run(StepHooks* capture = nullptr, cuda::Timeline* timeline = nullptr);
  // EMBER_LOGS=perf: the device time of every step of one replay, the steps queued behind a
  // hold so they run back to back (what a CUDA graph of this replay approaches).
  void run_profiled(int device);
  // Random steps read their key and base counter from `state` (device memory) from now on;
  // null: from the generator again, at each run.
  void use_rng_state(const uint64_t* state);

  const std::vector<Step>& steps() const { return steps_; }
  size_t size() const { return steps_.size(); }
  // Whether step i may run beside unrelated steps (LoweredGroup::self_contained).
  bool self_contained(size_t i) const;
  // The arena bytes step i's lowering uses as its workspace, as they lie now ({nullptr, 0}).
  std::pair<void*, int64_t> workspace_range(size_t i) const;
  const std::vector<int32_t>& node_step() const { return node_step_; }  // per node: its step
  // Per node: the step after which its effect is complete (its wait for a collective, else
  // node_step()).
  const std::vector<int32_t>& node_done() const { return node_done_; }
  uint64_t rng_counters() const { return rng_counters_; }  // Philox counters a replay draws
  int32_t kernels() const { return kernels_; }
  int32_t cpu_chunked_groups() const { return static_cast<int32_t>(cpu_groups_.size()); }
  // One line per lowered group ("pointwise x4 -> nvrtc kernel ..."), for logs and explain.
  std::vector<std::string> lowerings() const;

 private:
  std::string step_name(const Step& s) const;
  void run_steps(StepHooks* capture, cuda::Timeline* timeline, uint64_t rng_seed,
                 uint64_t rng_base);

  const Graph* g_ = nullptr;
  std::vector<Step> steps_;
  std::vector<std::unique_ptr<CpuGroupRunner>> cpu_groups_;
  // Per group (CUDA; null: op by op), then one per standalone GEMM (its group in solo_groups_).
  std::vector<std::unique_ptr<LoweredGroup>> lowered_;
  std::vector<std::unique_ptr<Group>> solo_groups_;
  std::vector<int32_t> node_step_;
  std::vector<int32_t> node_done_;
  std::vector<std::shared_ptr<CollectiveWork>> in_flight_;  // per collective slot
  uint64_t rng_counters_ = 0;
  int32_t kernels_ = 0;
};

}  // namespace ember::jit
