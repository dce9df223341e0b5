#include "jit/steps.h"

#include <algorithm>
#include <sstream>

#include "core/dispatch.h"
#include "core/generator.h"
#include "core/philox.h"
#include "jit/cpu_group.h"
#include "jit/log.h"
#include "jit/lower.h"
#include "kernels/cuda/timeline.h"

namespace ember::jit {

StepList::StepList() = default;
StepList::~StepList() = default;

void StepList::build(const Graph& g, const MemoryPlan& plan, const Binding& bind,
                     const std::vector<GroupStorage>& storage, bool cuda) {
  g_ = &g;
  const std::vector<std::shared_ptr<TensorImpl>>& slots = bind.slots;
  lowered_.resize(g.groups.size());
  if (cuda) {
    std::vector<int32_t> lowerable;
    for (size_t i = 0; i < g.groups.size(); ++i)
      if (storage[i] != GroupStorage::Materialize || cuda_lowering_storage(g, g.groups[i]))
        lowerable.push_back(static_cast<int32_t>(i));
    // Their generated kernels compiled side by side first; each lowering then loads its own.
    struct Drop {
      ~Drop() { drop_precompiled_kernels(); }
    } drop;
    precompile_cuda_lowerings(g, lowerable);
    for (int32_t i : lowerable) {
      GroupWorkspace ws;
      if (const int32_t a = plan.workspace_arena[i]; a >= 0)
        ws = {bind.arena(a), plan.workspace_offset[i], plan.workspace_bytes[i]};
      lowered_[i] = lower_cuda_group({g, g.groups[i], slots, plan, ws});
    }
  }
  // The step that runs each node: a group's members run in the step pushed at its last member.
  node_step_.assign(g.nodes.size(), -1);
  auto covered = [&](size_t ni, bool whole_group) {
    const auto idx = static_cast<int32_t>(steps_.size()) - 1;
    const int32_t gi = g.nodes[ni].group;
    if (whole_group && gi >= 0)
      for (int32_t m : g.groups[gi].nodes) node_step_[m] = idx;
    node_step_[ni] = idx;
  };
  // Collectives started and not yet waited for, and where the waits went.
  struct Open {
    int32_t slot;
    ValueId root;
    size_t node;
  };
  std::vector<Open> open;
  std::vector<std::pair<size_t, int32_t>> waits;  // (node, its wait step)
  std::vector<ValueId> written;
  auto wait_for = [&](size_t k) {
    Step w;
    w.kind = StepKind::CollectiveWait;
    w.op = OpId::all_reduce;
    w.cpu_group = open[k].slot;
    steps_.push_back(std::move(w));
    waits.push_back({open[k].node, static_cast<int32_t>(steps_.size()) - 1});
    open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
  };
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    const OpKind kind = op_info(n.op).kind;
    // Before a node that touches a collective's tensor (a group's step comes at its last
    // member, later still): the collective's wait.
    g.writes(n, written);
    if (n.out != kNoValue) written.push_back(g.values[n.out].root);
    for (size_t k = open.size(); k-- > 0;) {
      bool touches = std::find(written.begin(), written.end(), open[k].root) != written.end();
      for (ValueId in : n.inputs) touches = touches || g.values[in].root == open[k].root;
      if (touches) wait_for(k);
    }
    // A CPU pointwise or pointwise+reduction group runs chunked, once, at its last member.
    // A GEMM epilogue: the GEMM runs as itself, its pointwise tail chunked like a pointwise group.
    if (!cuda && n.group >= 0) {
      const Group& grp = g.groups[n.group];
      const std::optional<Group> chunked = cpu_chunked_group(g, grp);
      const bool product =
          grp.kind == GroupKind::GemmEpilogue && static_cast<size_t>(grp.nodes.front()) == ni;
      if (chunked && !product) {
        if (static_cast<size_t>(grp.nodes.back()) != ni) continue;
        CpuGroupRunner::Workspace ws;
        if (const int32_t a = plan.workspace_arena[n.group]; a >= 0) {
          ws.storage = bind.arena(a);
          ws.offset = plan.workspace_offset[n.group];
          ws.bytes = plan.workspace_bytes[n.group];
        }
        Step s;
        s.kind = StepKind::CpuGroup;
        s.cpu_group = static_cast<int32_t>(cpu_groups_.size());
        cpu_groups_.push_back(std::make_unique<CpuGroupRunner>(g, *chunked, slots, plan, ws));
        kernels_ += cpu_groups_.back()->kernel_calls_per_run();
        steps_.push_back(std::move(s));
        covered(ni, true);
        continue;
      }
    }
    if (kind == OpKind::View) continue;  // prebuilt
    // A GEMM outside any group still goes through the GEMM lowering (MaxAutotune times it).
    if (cuda && n.group < 0 && op_info(n.op).kind == OpKind::Matmul) {
      auto solo = std::make_unique<Group>();
      solo->kind = GroupKind::GemmEpilogue;
      solo->nodes = {static_cast<int32_t>(ni)};
      solo->inputs = n.inputs;
      solo->outputs = {n.out};
      if (auto low = lower_cuda_group({g, *solo, slots, plan})) {
        Step s;
        s.kind = StepKind::Lowered;
        s.cpu_group = static_cast<int32_t>(lowered_.size());
        kernels_ += low->kernels();
        lowered_.push_back(std::move(low));
        solo_groups_.push_back(std::move(solo));
        steps_.push_back(std::move(s));
        covered(ni, false);
        continue;
      }
    }
    if (cuda && n.group >= 0 && lowered_[n.group]) {
      if (static_cast<size_t>(g.groups[n.group].nodes.back()) != ni) continue;
      Step s;
      s.kind = StepKind::Lowered;
      s.cpu_group = n.group;
      kernels_ += lowered_[n.group]->kernels();
      steps_.push_back(std::move(s));
      covered(ni, true);
      continue;
    }
    Step s;
    s.op = n.op;
    s.attrs = n.attrs;
    for (ValueId in : n.inputs) s.args.push_back(bind.slot_tensor(in));
    if (n.out != kNoValue) {
      s.out = bind.slot_tensor(n.out);
      s.device = g.values[n.out].device;
    } else {  // a multi-tensor update runs where its parameters live
      s.device = g.values[n.inputs[MultiTensorLayout::of(n.attrs).param(0)]].device;
    }
    if (kind == OpKind::Random) {
      s.kind = StepKind::Random;
      s.rng_delta = n.attrs.offset;
      rng_counters_ = std::max(
          rng_counters_,
          n.attrs.offset + philox::counters_for(static_cast<uint64_t>(g.values[n.out].numel())));
    } else if (kind == OpKind::Transfer) {
      s.kind = StepKind::Transfer;
    } else if (kind == OpKind::MultiTensor) {
      s.kind = StepKind::Update;
    } else if (kind == OpKind::Collective) {
      s.kind = StepKind::CollectiveStart;
      s.cpu_group = static_cast<int32_t>(in_flight_.size());
      in_flight_.emplace_back();
      open.push_back({s.cpu_group, g.values[n.out].root, ni});
    }
    // Every tensor a kernel touches must have memory by now (inputs are bound per call, fresh
    // outputs allocated per call); anything else is a planning bug, caught here, not in a kernel.
    auto placed = [&](ValueId v) {
      const ValueId r = g.values[v].root;
      return slots[v]->storage != nullptr || g.values[r].kind == ValueKind::Input ||
             plan.fresh[r] || g.values[v].numel() == 0;
    };
    for (ValueId in : n.inputs)
      EMBER_CHECK(placed(in), "jit executor: value %", in, " read by ", op_name(n.op),
                  " has no memory (internal error)");
    EMBER_CHECK(n.out == kNoValue || placed(n.out), "jit executor: output %", n.out, " of ",
                op_name(n.op), " has no memory (internal error)");
    ++kernels_;
    steps_.push_back(std::move(s));
    covered(ni, false);
  }
  while (!open.empty()) wait_for(open.size() - 1);  // what the replay returns or keeps
  node_done_ = node_step_;
  for (const auto& [node, step] : waits) node_done_[node] = step;
}

void StepList::use_rng_state(const uint64_t* state) {
  for (Step& s : steps_)
    if (s.kind == StepKind::Random) {
      s.attrs.rng_state = state;
      s.attrs.seed = 0;
      s.attrs.offset = s.rng_delta;
    }
}

bool StepList::self_contained(size_t i) const {
  const Step& s = steps_[i];
  return s.kind == StepKind::Lowered && lowered_[s.cpu_group] &&
         lowered_[s.cpu_group]->self_contained();
}

std::pair<void*, int64_t> StepList::workspace_range(size_t i) const {
  const Step& s = steps_[i];
  if (s.kind != StepKind::Lowered || !lowered_[s.cpu_group]) return {nullptr, 0};
  return lowered_[s.cpu_group]->workspace_range();
}

void StepList::run(StepHooks* capture, cuda::Timeline* timeline) {
  uint64_t rng_base = 0, rng_seed = 0;
  // A capture only records: its random kernels read the key from device memory at each
  // launch, and the generator advances then, not now.
  if (rng_counters_ > 0 && !capture) {
    const Generator::Reservation r = default_generator().reserve(rng_counters_);
    rng_seed = r.seed;
    rng_base = r.offset;
  }
  if (timeline) {
    timeline->hold(100.0);  // longer than queuing every step takes, see held_through()
    timeline->mark(0);
  }
  if (capture) capture->before_steps();
  const auto n = static_cast<int32_t>(steps_.size());
  try {
    run_steps(capture, timeline, rng_seed, rng_base);
  } catch (...) {
    // A collective still in flight writes into memory the replay is about to give back.
    for (std::shared_ptr<CollectiveWork>& w : in_flight_) {
      if (!w) continue;
      try {
        w->wait();
      } catch (...) {  // the first error is the one to report
      }
      w.reset();
    }
    throw;
  }
  if (capture) capture->after_steps();
  if (timeline) timeline->mark(n);
}

void StepList::run_steps(StepHooks* capture, cuda::Timeline* timeline, uint64_t rng_seed,
                         uint64_t rng_base) {
  const auto n = static_cast<int32_t>(steps_.size());
  for (int32_t i = 0; i < n; ++i) {
    Step& s = steps_[i];
    if (timeline && i > 0) timeline->mark(i);
    if (capture) capture->before_step(i);
    switch (s.kind) {
      case StepKind::Kernel:
      case StepKind::Update:
        run_kernel({s.op, s.args, s.attrs, s.out}, s.device);
        break;
      case StepKind::Random:
        if (s.attrs.rng_state == nullptr) {
          s.attrs.seed = rng_seed;
          s.attrs.offset = rng_base + s.rng_delta;
        }
        run_kernel({s.op, s.args, s.attrs, s.out}, s.device);
        break;
      case StepKind::Transfer:
        run_transfer(s.args[0], s.out);
        break;
      case StepKind::CpuGroup:
        cpu_groups_[s.cpu_group]->run();
        break;
      case StepKind::Lowered:
        lowered_[s.cpu_group]->run();
        break;
      case StepKind::CollectiveStart:
        in_flight_[s.cpu_group] = start_collective({s.op, s.args, s.attrs, s.out});
        break;
      case StepKind::CollectiveWait: {
        std::shared_ptr<CollectiveWork> w = std::move(in_flight_[s.cpu_group]);
        w->wait();
        break;
      }
    }
    if (capture) capture->after_step(i);
  }
}

std::string StepList::step_name(const Step& s) const {
  std::ostringstream os;
  switch (s.kind) {
    case StepKind::Lowered:
      os << lowered_[s.cpu_group]->describe();
      break;
    case StepKind::CpuGroup:
      os << "cpu group " << s.cpu_group;
      break;
    case StepKind::CollectiveWait:
      os << "wait for " << op_name(s.op) << " " << s.cpu_group;
      break;
    default:
      os << (s.kind == StepKind::Transfer ? std::string_view("transfer") : op_name(s.op));
      if (s.out.defined()) os << " -> " << s.out.sizes().str();
      break;
  }
  std::string line = os.str();
  if (line.size() > 110) line = line.substr(0, 107) + "...";
  return line;
}

void StepList::run_profiled(int device) {
  cuda::Timeline timeline(device, static_cast<int>(steps_.size()) + 1);
  run(nullptr, &timeline);
  const std::vector<double> us = timeline.elapsed_us();
  double total = 0;
  for (double u : us) total += u;
  std::ostringstream os;
  os << "device time per step of one replay, back to back (the host queued them in "
     << timeline.queued_us() << " us)"
     << (timeline.held_through() ? "" : " (the host fell behind the hold: gaps included)") << ": "
     << total << " us in " << steps_.size() << " steps";
  for (size_t i = 0; i < steps_.size(); ++i)
    os << "\n  " << i << ": " << us[i + 1] << " us  " << step_name(steps_[i]);
  log(Log::perf, os.str());
}

std::vector<std::string> StepList::lowerings() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < lowered_.size(); ++i) {
    if (!lowered_[i]) continue;
    if (i < g_->groups.size())
      out.push_back("group " + std::to_string(i) + " (" + group_kind_name(g_->groups[i].kind) +
                    "): " + lowered_[i]->describe());
    else
      out.push_back("gemm: " + lowered_[i]->describe());
  }
  return out;
}

}  // namespace ember::jit
