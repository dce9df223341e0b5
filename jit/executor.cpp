#include "jit/executor.h"

#include "jit/cpu_group.h"
#include "jit/graph_replay.h"
#include "jit/log.h"
#include "jit/lower.h"

namespace ember::jit {
namespace {

bool computes_on_cuda(const Graph& g) {
  for (const Node& n : g.nodes)
    if (n.out != kNoValue && g.values[n.out].device.is_cuda()) return true;
  return false;
}

}  // namespace

Executor::Executor(Graph graph, ExecutorOptions options) : g_(std::move(graph)), options_(options) {
  // CPU groups run chunked; CUDA groups run lowered where a lowering exists, else op by op.
  const bool cuda = computes_on_cuda(g_);
  std::vector<GroupStorage> storage = default_group_storage(g_, cuda);
  if (cuda)
    for (size_t i = 0; i < g_.groups.size(); ++i)
      if (auto how = cuda_lowering_storage(g_, g_.groups[i])) storage[i] = *how;
  // Scratch the groups need while they run, placed where the plan has dead bytes at each
  // group's position: on CUDA split reductions' partial states, known from the graph; on the
  // CPU the chunked groups' intermediates, which follow from what a first plan stores.
  std::vector<int64_t> workspace(g_.groups.size(), 0);
  bool any = false;
  if (cuda)
    for (size_t i = 0; i < g_.groups.size(); ++i)
      if (storage[i] == GroupStorage::None) {
        workspace[i] = cuda_lowering_workspace(g_, g_.groups[i]);
        any = any || workspace[i] > 0;
      }
  // A CUDA graph writes what a call returns into fixed bytes before copying it out: those
  // bytes are planned in the arena, where the value is dead otherwise.
  const bool graph_statics = options_.cuda_graph && cuda;
  plan_ = plan_memory(g_, storage, any ? workspace : std::vector<int64_t>{}, graph_statics);
  if (!cuda) {
    for (size_t i = 0; i < g_.groups.size(); ++i)
      if (const std::optional<Group> chunked = cpu_chunked_group(g_, g_.groups[i])) {
        workspace[i] = CpuGroupRunner::workspace_bytes(g_, *chunked, plan_);
        any = any || workspace[i] > 0;
      }
    if (any) plan_ = plan_memory(g_, storage, workspace, graph_statics);
  }
  for (const MemoryPlan::Arena& a : plan_.arenas) {
    stats_.arena_bytes += a.bytes;
    stats_.arena_live_bound += a.live_bound;
  }
  bind_.build(g_, plan_, options_.arena_pool);
  steps_.build(g_, plan_, bind_, storage, cuda);
  stats_.steps = static_cast<int32_t>(steps_.size());
  stats_.kernels = steps_.kernels();
  stats_.cpu_chunked_groups = steps_.cpu_chunked_groups();
  if (options_.cuda_graph) {
    int device = 0;
    const std::string why = graph_support(g_, cuda, device);
    if (why.empty()) {
      graph_ = std::make_unique<GraphReplay>(g_, plan_, bind_, steps_, device);
      graph_ok_ = true;
    } else {
      graph_note_ = "CUDA graph not used: " + why;
    }
  }
  if (cuda)
    for (const Value& v : g_.values)
      if (v.device.is_cuda()) {
        profile_device_ = v.device.index;
        break;
      }
}

Executor::~Executor() = default;

void Executor::run(std::span<const Tensor> args, std::vector<Tensor>& outputs) {
  // Moved shared arenas: the captured graphs hold the old addresses, so capture again.
  if (bind_.prepare_arenas() && graph_) graph_->forget();
  if (graph_ok_ && (graph_->captured() || plain_replays_ >= 1)) {
    run_graph(args, outputs);
    return;
  }
  ++plain_replays_;
  bind_.bind_args(args);
  bind_.make_fresh();
  // The first plain replay loads kernels (cuBLASLt's lazily): profile the second, or the first
  // where a CUDA graph is captured after it.
  const int32_t profiled_replay = graph_ok_ ? 1 : 2;
  try {
    if (plain_replays_ == profiled_replay && log_enabled(Log::perf) && profile_device_ >= 0) {
      steps_.run_profiled(profile_device_);
    } else {
      steps_.run();
    }
  } catch (...) {
    bind_.abandon_replay();
    throw;
  }
  bind_.apply_effects();
  outputs.clear();
  for (ValueId o : g_.outputs) {
    const Value& v = g_.values[o];
    if (g_.values[v.root].kind == ValueKind::Constant) {
      outputs.push_back(bind_.slot_tensor(o).clone());  // never hand out the frozen constant
    } else {
      outputs.push_back(bind_.slot_tensor(o).detach());
    }
  }
  bind_.release_call_memory();
}

void Executor::run_graph(std::span<const Tensor> args, std::vector<Tensor>& outputs) {
  GraphReplay::Bound* bg = graph_->find(args);
  if (!bg) {
    try {
      bg = &graph_->capture(args);
    } catch (...) {
      graph_ok_ = false;
      graph_note_ = "CUDA graph not used: capture failed";
      throw;
    }
    stats_.graph_nodes = graph_->nodes();
    stats_.graph_captures = graph_->captures();
  }
  graph_->replay(*bg, args, outputs);
}

}  // namespace ember::jit
