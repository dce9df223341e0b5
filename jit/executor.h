#pragma once
// Runs an optimized Graph: every stored value has a fixed place (the memory plan's arena), every
// step is a prebuilt kernel call, so a replay binds the inputs, launches, applies the effects and
// allocates nothing but the tensors it returns. The parts, one file each: where values live
// (jit/binding.h, jit/arena_pool.h), what a replay runs (jit/steps.h), and the CUDA-graph
// capture and replay of it (jit/graph_replay.h, jit/capture_branches.h).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jit/arena_pool.h"
#include "jit/binding.h"
#include "jit/graph.h"
#include "jit/passes.h"
#include "jit/steps.h"

namespace ember::jit {

class GraphReplay;  // jit/graph_replay.h

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
  int64_t arena_live_bound = 0;  // the most of it live at one node (no layout needs less)
  int64_t graph_nodes = 0;       // nodes of the captured CUDA graph (0: not captured)
  int32_t graph_captures = 0;    // CUDA graphs captured so far (one per argument addresses)
};

class Executor {
 public:
  explicit Executor(Graph graph, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Why this executable can no longer run (state reallocated, a parameter's requires_grad
  // changed), or empty when it can. Checked before every replay; cheap.
  std::string stale_reason() const { return bind_.stale_reason(); }
  // One replay: `args` are the tensor arguments in order (already checked against the
  // signature); the returned tensors are fresh (nothing later overwrites them).
  void run(std::span<const Tensor> args, std::vector<Tensor>& outputs);

  const Graph& graph() const { return g_; }
  const MemoryPlan& plan() const { return plan_; }
  const ExecutorStats& stats() const { return stats_; }
  // Why a requested CUDA graph is not used (empty when it is, or was not asked for).
  const std::string& graph_note() const { return graph_note_; }
  // One line per lowered group ("pointwise x4 -> nvrtc kernel ..."), for logs and explain.
  std::vector<std::string> lowerings() const { return steps_.lowerings(); }

 private:
  void run_graph(std::span<const Tensor> args, std::vector<Tensor>& outputs);

  Graph g_;
  MemoryPlan plan_;
  ExecutorStats stats_;
  ExecutorOptions options_;
  Binding bind_;
  StepList steps_;
  std::unique_ptr<GraphReplay> graph_;  // null unless a CUDA graph was asked for and can work
  bool graph_ok_ = false;               // false again once a capture failed
  std::string graph_note_;
  int32_t plain_replays_ = 0;
  int profile_device_ = -1;  // the GPU a CUDA executable computes on (-1: CPU)
};

}  // namespace ember::jit
