#include "jit/executor.h"

#include <algorithm>
#include <sstream>

#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/dispatch.h"
#include "core/generator.h"
#include "core/philox.h"
#include "jit/cpu_group.h"
#include "jit/log.h"
#include "jit/lower.h"
#include "kernels/blas_layout.h"
#include "kernels/cuda/timeline.h"

namespace ember::jit {
namespace {

std::shared_ptr<TensorImpl> impl_for(const Value& v) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = v.shape;
  impl->strides = v.strides;
  impl->offset = v.offset;
  impl->dtype = v.dtype;
  impl->device = v.device;
  return impl;
}

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
  lowered_.resize(g_.groups.size());
  if (cuda)
    for (size_t i = 0; i < g_.groups.size(); ++i)
      if (auto how = cuda_lowering_storage(g_, g_.groups[i])) storage[i] = *how;
  plan_ = plan_memory(g_, storage);
  build_slots();
  if (cuda)
    for (size_t i = 0; i < g_.groups.size(); ++i)
      if (storage[i] != GroupStorage::Materialize || cuda_lowering_storage(g_, g_.groups[i]))
        lowered_[i] = lower_cuda_group({g_, g_.groups[i], slots_, plan_});
  build_steps();
  if (options_.cuda_graph) check_graph_support();
  if (cuda)
    for (const Value& v : g_.values)
      if (v.device.is_cuda()) {
        profile_device_ = v.device.index;
        break;
      }
}

// Capture needs every kernel on one device's stream, arguments whose layout a contiguous static
// copy reproduces, and GEMM operands cuBLAS reads in place (a staging copy would allocate).
void Executor::check_graph_support() {
  auto fail = [&](std::string why) { graph_note_ = "CUDA graph not used: " + std::move(why); };
  if (!computes_on_cuda(g_)) return fail("the executable computes on the CPU");
  int dev = -1;
  // Only values the plan touches: passes leave replaced names behind (e.g. a host tensor whose
  // move to the GPU was folded into a device constant).
  std::vector<bool> used(g_.values.size(), false);
  for (const Node& n : g_.nodes) {
    for (ValueId in : n.inputs) used[in] = true;
    if (n.out != kNoValue) used[n.out] = true;
  }
  for (ValueId o : g_.outputs) used[o] = true;
  for (size_t i = 0; i < g_.values.size(); ++i) {
    if (!used[i]) continue;
    const Value& v = g_.values[i];
    if (v.device.is_cpu()) {
      if (v.kind == ValueKind::Constant && v.shape.empty()) continue;  // inline scalars
      return fail("it touches a CPU tensor");
    }
    if (dev >= 0 && v.device.index != dev) return fail("it spans several GPUs");
    dev = v.device.index;
  }
  for (ValueId in : g_.inputs) {
    const Value& v = g_.values[in];
    if (v.strides != contiguous_strides(v.shape)) return fail("an argument is not contiguous");
  }
  auto gemm_ready = [&](ValueId id) {
    const Value& v = g_.values[id];
    const int nd = v.shape.size();
    return nd >= 2 && kernels::blas_readable(v.shape[nd - 2], v.shape[nd - 1], v.strides[nd - 2],
                                             v.strides[nd - 1]);
  };
  for (const Node& n : g_.nodes) {
    if (op_info(n.op).kind == OpKind::Matmul &&
        !(gemm_ready(n.inputs[0]) && gemm_ready(n.inputs[1])))
      return fail("a GEMM operand needs a staging copy");
    if (op_info(n.op).kind == OpKind::Transfer) return fail("it copies between devices");
  }
  graph_device_ = dev;
  graph_ok_ = true;
}

Executor::~Executor() = default;

void Executor::build_slots() {
  const size_t nv = g_.values.size();
  slots_.assign(nv, nullptr);
  // Empty storages for now, shared by the slots that live in them: allocate_arenas() gives them
  // memory at the first replay.
  pool_ = options_.arena_pool;
  for (size_t k = 0; k < plan_.arenas.size(); ++k) {
    const MemoryPlan::Arena& a = plan_.arenas[k];
    arenas_.push_back(
        pool_ ? pool_->storage(k, a.device)
              : std::make_shared<Storage>(size_t{0}, a.device, allocator_for(a.device)));
    arena_bytes_.push_back(static_cast<size_t>(std::max<int64_t>(a.bytes, 1)));
    stats_.arena_bytes += a.bytes;
  }
  input_members_.assign(g_.inputs.size(), {});
  std::vector<int32_t> fresh_index(nv, -1);
  // Roots first: passes can leave a name aliasing a root made after it (constant folding
  // points a replaced value at its constant).
  for (size_t i = 0; i < nv; ++i) {
    const auto id = static_cast<ValueId>(i);
    const Value& v = g_.values[i];
    if (v.root != id) continue;
    switch (v.kind) {
      case ValueKind::State:
        slots_[i] = g_.state[v.slot].impl_ptr();
        break;
      case ValueKind::Constant:
        slots_[i] = g_.constants[v.slot].impl_ptr();
        break;
      case ValueKind::Input:
        slots_[i] = impl_for(v);
        break;
      case ValueKind::Node: {
        slots_[i] = impl_for(v);
        if (plan_.arena_of[i] >= 0) {
          slots_[i]->storage = arenas_[plan_.arena_of[i]];
          slots_[i]->offset = plan_.offset_of[i] / element_size(v.dtype);
        } else if (plan_.fresh[i]) {
          fresh_index[i] = static_cast<int32_t>(fresh_roots_.size());
          fresh_roots_.push_back(id);
          fresh_members_.push_back({id});
        }
        break;
      }
    }
  }
  for (size_t i = 0; i < nv; ++i) {
    const auto id = static_cast<ValueId>(i);
    const Value& v = g_.values[i];
    if (v.root == id) continue;
    // A view or in-place version: the root's memory, at the same distance from the root's
    // first element as in the trace.
    const Value& r = g_.values[v.root];
    slots_[i] = impl_for(v);
    slots_[i]->storage = slots_[v.root]->storage;
    slots_[i]->offset = slots_[v.root]->offset + (v.offset - r.offset);
    if (fresh_index[v.root] >= 0) fresh_members_[fresh_index[v.root]].push_back(id);
  }
  // Arguments: the values following each argument's memory.
  for (size_t a = 0; a < g_.inputs.size(); ++a) {
    const ValueId root = g_.inputs[a];
    if (g_.values[root].slot != static_cast<int32_t>(a)) continue;  // an aliased argument
    for (size_t i = 0; i < nv; ++i)
      if (g_.values[i].root == root) input_members_[a].push_back(static_cast<ValueId>(i));
  }
  for (const GradEffect& e : g_.grad_effects) {
    if (e.value == kNoValue || plan_.fresh[g_.values[e.value].root]) {
      grad_tensors_.emplace_back();  // cleared, or rebuilt per replay
    } else {
      grad_tensors_.push_back(Tensor(slots_[e.value]).detach());
    }
  }
  for (const Tensor& s : g_.state) {
    state_storage_.push_back(s.impl()->storage.get());
    state_requires_grad_.push_back(s.requires_grad());
  }
}

void Executor::build_steps() {
  std::vector<ValueId> roots;
  std::vector<bool> bump(g_.values.size(), false);
  const bool cuda = computes_on_cuda(g_);
  std::vector<int32_t> group_done(g_.groups.size(), 0);
  // The step that runs each node: a group's members run in the step pushed at its last member.
  node_step_.assign(g_.nodes.size(), -1);
  auto covered = [&](size_t ni, bool whole_group) {
    const auto idx = static_cast<int32_t>(steps_.size()) - 1;
    const int32_t gi = g_.nodes[ni].group;
    if (whole_group && gi >= 0)
      for (int32_t m : g_.groups[gi].nodes) node_step_[m] = idx;
    node_step_[ni] = idx;
  };
  for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
    const Node& n = g_.nodes[ni];
    g_.writes(n, roots);
    for (ValueId r : roots)
      if (g_.values[r].kind == ValueKind::State || g_.values[r].kind == ValueKind::Input)
        bump[r] = true;
    const OpKind kind = op_info(n.op).kind;
    // A CPU pointwise or pointwise+reduction group runs chunked, once, at its last member.
    // A GEMM epilogue: the GEMM runs as itself, its pointwise tail chunked like a pointwise group.
    if (!cuda && n.group >= 0) {
      const Group& grp = g_.groups[n.group];
      const bool epilogue = grp.kind == GroupKind::GemmEpilogue && grp.nodes.size() > 1 &&
                            static_cast<size_t>(grp.nodes.front()) != ni;
      if (grp.kind == GroupKind::Pointwise || grp.kind == GroupKind::Reduction || epilogue) {
        if (static_cast<size_t>(grp.nodes.back()) != ni) continue;
        Group chunked = grp;
        if (epilogue) {
          chunked.kind = GroupKind::Pointwise;
          chunked.nodes.erase(chunked.nodes.begin());
        }
        Step s;
        s.kind = StepKind::CpuGroup;
        s.cpu_group = static_cast<int32_t>(cpu_groups_.size());
        cpu_groups_.push_back(std::make_unique<CpuGroupRunner>(g_, chunked, slots_, plan_));
        stats_.kernels += cpu_groups_.back()->kernel_calls_per_run();
        ++stats_.cpu_chunked_groups;
        steps_.push_back(std::move(s));
        covered(ni, true);
        continue;
      }
    }
    if (kind == OpKind::View) continue;  // prebuilt
    // A GEMM outside any group still goes through the GEMM lowering (MaxAutotune times it).
    if (cuda && n.group < 0 && n.op == OpId::mm) {
      auto solo = std::make_unique<Group>();
      solo->kind = GroupKind::GemmEpilogue;
      solo->nodes = {static_cast<int32_t>(ni)};
      solo->inputs = n.inputs;
      solo->outputs = {n.out};
      if (auto low = lower_cuda_group({g_, *solo, slots_, plan_})) {
        Step s;
        s.kind = StepKind::Lowered;
        s.cpu_group = static_cast<int32_t>(lowered_.size());
        stats_.kernels += low->kernels();
        lowered_.push_back(std::move(low));
        solo_groups_.push_back(std::move(solo));
        steps_.push_back(std::move(s));
        covered(ni, false);
        continue;
      }
    }
    if (cuda && n.group >= 0 && lowered_[n.group]) {
      if (static_cast<size_t>(g_.groups[n.group].nodes.back()) != ni) continue;
      Step s;
      s.kind = StepKind::Lowered;
      s.cpu_group = n.group;
      stats_.kernels += lowered_[n.group]->kernels();
      steps_.push_back(std::move(s));
      covered(ni, true);
      continue;
    }
    Step s;
    s.op = n.op;
    s.attrs = n.attrs;
    for (ValueId in : n.inputs) s.args.push_back(slot_tensor(in));
    if (n.out != kNoValue) {
      s.out = slot_tensor(n.out);
      s.device = g_.values[n.out].device;
    } else {
      s.device = g_.values[n.inputs[2]].device;
    }
    if (kind == OpKind::Random) {
      s.kind = StepKind::Random;
      s.rng_delta = n.attrs.offset;
      rng_counters_ = std::max(
          rng_counters_,
          n.attrs.offset + philox::counters_for(static_cast<uint64_t>(g_.values[n.out].numel())));
    } else if (kind == OpKind::Transfer) {
      s.kind = StepKind::Transfer;
    } else if (kind == OpKind::MultiTensor) {
      s.kind = StepKind::Update;
    }
    // Every tensor a kernel touches must have memory by now (inputs are bound per call, fresh
    // outputs allocated per call); anything else is a planning bug, caught here, not in a kernel.
    auto placed = [&](ValueId v) {
      const ValueId r = g_.values[v].root;
      return slots_[v]->storage != nullptr || g_.values[r].kind == ValueKind::Input ||
             plan_.fresh[r] || g_.values[v].numel() == 0;
    };
    for (ValueId in : n.inputs)
      EMBER_CHECK(placed(in), "jit executor: value %", in, " read by ", op_name(n.op),
                  " has no memory (internal error)");
    EMBER_CHECK(n.out == kNoValue || placed(n.out), "jit executor: output %", n.out, " of ",
                op_name(n.op), " has no memory (internal error)");
    ++stats_.kernels;
    steps_.push_back(std::move(s));
    covered(ni, false);
  }
  for (size_t i = 0; i < bump.size(); ++i)
    if (bump[i]) written_external_.push_back(static_cast<ValueId>(i));
  stats_.steps = static_cast<int32_t>(steps_.size());
}

std::string Executor::stale_reason() const {
  for (size_t i = 0; i < g_.state.size(); ++i) {
    const TensorImpl& t = *g_.state[i].impl();
    if (t.storage.get() != state_storage_[i])
      return "state " + std::to_string(i) + " (shape " + t.sizes.str() +
             ") now lives in other memory (moved or reallocated)";
    if (g_.state[i].requires_grad() != state_requires_grad_[i])
      return "state " + std::to_string(i) + " (shape " + t.sizes.str() + ") changed requires_grad";
  }
  return {};
}

void Executor::run_steps(bool capturing, cuda::Timeline* timeline) {
  uint64_t rng_base = 0, rng_seed = 0;
  // A capture only records: its random kernels read the key from rng_state_ at each launch,
  // and the generator advances then, not now.
  if (rng_counters_ > 0 && !capturing) {
    Generator& gen = default_generator();
    rng_seed = gen.seed();
    rng_base = gen.advance(rng_counters_);
  }
  if (timeline) {
    timeline->hold(100.0);  // longer than queuing every step takes, see held_through()
    timeline->mark(0);
  }
  int done = 0;
  const bool branched = capturing && branch_sides_ > 0;
  if (branched) {
    // The side branches start after what the main stream queued so far (argument copies).
    const int fork = static_cast<int>(steps_.size()) + branch_sides_;
    cuda::capture_signal(graph_device_, 0, fork);
    for (int b = 1; b <= branch_sides_; ++b) cuda::capture_wait(graph_device_, b, fork);
  }
  for (Step& s : steps_) {
    if (timeline && done > 0) timeline->mark(done);
    if (branched) {
      const int b = step_branch_[done];
      cuda::use_capture_branch(graph_device_, b);
      for (int32_t e : step_waits_[done]) cuda::capture_wait(graph_device_, b, e);
    }
    ++done;
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
    }
    if (capturing) {
      for (const EarlyOut& e : early_outs_)
        if (e.after_step == done - 1) e.read->capture(static_fresh_[e.fresh]->data);
      if (capture_output_copy_)
        for (size_t f = 0; f < out_after_.size(); ++f)
          if (out_after_[f] == done - 1 && (*capture_placeholders_)[f])
            (*capture_output_copy_)[f] =
                cuda::capture_copy((*capture_placeholders_)[f]->data, static_fresh_[f]->data,
                                   static_fresh_[f]->nbytes, graph_device_, /*beside=*/true);
    }
    if (branched && step_signals_[done - 1])
      cuda::capture_signal(graph_device_, step_branch_[done - 1], done - 1);
  }
  if (branched) {
    // Join the side branches before what follows (the output copies read what they wrote).
    const auto n = static_cast<int32_t>(steps_.size());
    for (int b = 1; b <= branch_sides_; ++b) {
      cuda::capture_signal(graph_device_, b, n + b - 1);
      cuda::capture_wait(graph_device_, 0, n + b - 1);
    }
    cuda::use_capture_branch(graph_device_, 0);
  }
  if (timeline) timeline->mark(done);
}

std::string Executor::step_name(const Step& s) const {
  std::ostringstream os;
  switch (s.kind) {
    case StepKind::Lowered:
      os << lowered_[s.cpu_group]->describe();
      break;
    case StepKind::CpuGroup:
      os << "cpu group " << s.cpu_group;
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

// EMBER_LOGS=perf: the device time of every step of one replay, the steps queued behind a hold
// so they run back to back (what a CUDA graph of this replay approaches).
void Executor::run_steps_profiled(int device) {
  cuda::Timeline timeline(device, static_cast<int>(steps_.size()) + 1);
  run_steps(false, &timeline);
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

void Executor::apply_effects() {
  for (ValueId r : written_external_) ++slots_[r]->storage->version;
  for (size_t i = 0; i < g_.grad_effects.size(); ++i) {
    const GradEffect& e = g_.grad_effects[i];
    Tensor& param = g_.state[e.state];
    if (e.value == kNoValue) {
      param.set_grad(Tensor());
    } else if (grad_tensors_[i].defined()) {
      param.set_grad(grad_tensors_[i]);
    } else {
      param.set_grad(Tensor(slots_[e.value]).detach());
    }
  }
}

// Gradients this replay replaces wholesale (every grad effect sets the parameter's gradient,
// and a gradient the graph reads is state, never dropped here) are let go before the replay
// allocates: otherwise the last call's gradients and this call's new ones are alive together,
// a peak eager never has (its zero_grad frees them before backward). Nobody can observe the
// gap: apply_effects() sets every one of them before the call returns.
void Executor::drop_replaced_grads() {
  for (const GradEffect& e : g_.grad_effects) {
    Tensor& param = g_.state[e.state];
    const Tensor old = param.grad();
    if (!old.defined() || old.impl()->storage == nullptr) continue;
    const Storage* st = old.impl()->storage.get();
    bool ours = std::find(state_storage_.begin(), state_storage_.end(), st) != state_storage_.end();
    for (const StoragePtr& a : arenas_) ours = ours || a.get() == st;
    if (!ours) param.set_grad(Tensor());
  }
}

// A replay that throws (a kernel met bad input, e.g. an out-of-range target on the CPU) has
// applied none of its effects, but its kernels may already have written over arena memory that a
// parameter's gradient from the last call still points at. Such a gradient is dropped, as the
// step's zero_grad would have left it, rather than left holding another value's bytes; and the
// call's arguments and returned memory are let go as after a replay that finishes.
void Executor::abandon_replay() {
  for (const GradEffect& e : g_.grad_effects) {
    Tensor& param = g_.state[e.state];
    const Tensor old = param.grad();
    if (!old.defined() || old.impl()->storage == nullptr) continue;
    const Storage* st = old.impl()->storage.get();
    for (const StoragePtr& a : arenas_)
      if (a.get() == st) {
        param.set_grad(Tensor());
        break;
      }
  }
  release_call_memory();
}

// The arenas' memory, taken at the first replay rather than when the executable was built: the
// build happens inside the last traced call, whose eager gradients the caller holds until the
// next call replaces them, and arena + those gradients would be a peak above eager's.
void Executor::allocate_arenas() {
  drop_replaced_grads();
  for (size_t k = 0; k < arenas_.size(); ++k) {
    if (pool_) {
      pool_->reserve(k, plan_.arenas[k].device, arena_bytes_[k]);
      continue;
    }
    Storage& s = *arenas_[k];
    s.data = s.allocator->allocate(arena_bytes_[k]);
    s.nbytes = arena_bytes_[k];
  }
  if (pool_) seen_generation_ = pool_->generation();
  arenas_allocated_ = true;
}

StoragePtr ArenaPool::storage(size_t index, Device device) {
  for (const Slot& s : slots_)
    if (s.index == index && s.device == device) return s.storage;
  slots_.push_back(
      {index, device, std::make_shared<Storage>(size_t{0}, device, allocator_for(device))});
  return slots_.back().storage;
}

void ArenaPool::reserve(size_t index, Device device, size_t bytes) {
  Storage& s = *storage(index, device);
  if (s.nbytes >= bytes) return;
  // Free before allocating: the old bytes are dead (calls run one at a time, and on a device
  // the caching allocator hands memory back in stream order), so the two never coexist. The
  // generation moves first, so that if the allocation fails (out of memory) every executable
  // sees its arena changed and asks again instead of running on the freed bytes.
  if (s.data) s.allocator->deallocate(s.data, s.nbytes);
  s.data = nullptr;
  s.nbytes = 0;
  ++generation_;
  s.data = s.allocator->allocate(bytes);
  s.nbytes = bytes;
}

void Executor::run(std::span<const Tensor> args, std::vector<Tensor>& outputs) {
  if (!arenas_allocated_) {
    allocate_arenas();
  } else if (pool_ && pool_->generation() != seen_generation_) {
    // Another executable of the function moved the shared arenas: make sure they still hold
    // this plan, and capture the graph again (it holds the old addresses).
    for (size_t k = 0; k < arenas_.size(); ++k)
      pool_->reserve(k, plan_.arenas[k].device, arena_bytes_[k]);
    seen_generation_ = pool_->generation();
    graphs_.clear();
  }
  if (graph_ok_ && (!graphs_.empty() || plain_replays_ >= 1)) {
    BoundGraph* bg = find_graph(args);
    if (!bg) bg = capture_graph(args);
    if (bg) {
      replay_graph(*bg, args, outputs);
      return;
    }
  }
  ++plain_replays_;
  // Bind the arguments: their memory, and the views the trace took of them.
  for (size_t a = 0; a < input_members_.size(); ++a) {
    if (input_members_[a].empty()) continue;
    const TensorImpl& arg = *args[a].impl();
    const Value& root = g_.values[g_.inputs[a]];
    const int64_t shift = arg.offset - root.offset;
    for (ValueId v : input_members_[a]) {
      TensorImpl& s = *slots_[v];
      s.storage = arg.storage;
      s.offset = g_.values[v].offset + shift;
    }
  }
  // Returned tensors get memory of their own each call (after the gradients this call replaces
  // are let go, so the old and new ones never coexist).
  if (!fresh_roots_.empty()) drop_replaced_grads();
  for (size_t f = 0; f < fresh_roots_.size(); ++f) {
    const Value& r = g_.values[fresh_roots_[f]];
    StoragePtr st = make_empty(r.shape, r.dtype, r.device).impl()->storage;
    for (ValueId v : fresh_members_[f]) slots_[v]->storage = st;
  }
  // The first plain replay loads kernels (cuBLASLt's lazily): profile the second, or the first
  // where a CUDA graph is captured after it.
  const int32_t profiled_replay = graph_ok_ ? 1 : 2;
  try {
    if (plain_replays_ == profiled_replay && log_enabled(Log::perf) && profile_device_ >= 0) {
      run_steps_profiled(profile_device_);
    } else {
      run_steps(false);
    }
  } catch (...) {
    abandon_replay();
    throw;
  }
  apply_effects();
  outputs.clear();
  for (ValueId o : g_.outputs) {
    const Value& v = g_.values[o];
    if (g_.values[v.root].kind == ValueKind::Constant) {
      outputs.push_back(Tensor(slots_[o]).clone());  // never hand out the frozen constant
    } else {
      outputs.push_back(Tensor(slots_[o]).detach());
    }
  }
  release_call_memory();
}

// Drops this call's arguments and returned memory from the slots: holding them would keep a
// whole batch alive into the next call (where the caller has already made the next one).
void Executor::release_call_memory() {
  for (const std::vector<ValueId>& members : input_members_)
    for (ValueId v : members) slots_[v]->storage.reset();
  for (const std::vector<ValueId>& members : fresh_members_)
    for (ValueId v : members) slots_[v]->storage.reset();
}

// The graph captured for these arguments' addresses, moved to the front; null if none is.
// No allocation: a linear search over at most kMaxBoundGraphs keys.
Executor::BoundGraph* Executor::find_graph(std::span<const Tensor> args) {
  if (copy_args_) return graphs_.empty() ? nullptr : &graphs_.front();
  for (size_t i = 0; i < graphs_.size(); ++i) {
    const BoundGraph& bg = graphs_[i];
    bool same = true;
    for (size_t a = 0; a < bg.args.size() && same; ++a)
      same = bg.args[a] == nullptr || bg.args[a] == args[a].raw_data();
    if (!same) continue;
    if (i > 0)
      std::rotate(graphs_.begin(), graphs_.begin() + static_cast<std::ptrdiff_t>(i),
                  graphs_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    return &graphs_.front();
  }
  return nullptr;
}

Executor::BoundGraph* Executor::capture_graph(std::span<const Tensor> args) {
  const int dev = graph_device_;
  if (!graphs_.empty() && !copy_args_ && ++rebinds_ > kMaxBoundCaptures) {
    // The arguments keep moving (new memory every call): one graph that copies them in costs a
    // copy per call, a capture per call would cost far more.
    copy_args_ = true;
    graphs_.clear();
    if (log_enabled(Log::perf))
      log(Log::perf, "CUDA graph: the arguments moved " + std::to_string(kMaxBoundCaptures) +
                         " times; from now on the graph copies them into static buffers");
  }
  BoundGraph bg;
  bg.args.assign(input_members_.size(), nullptr);
  if (copy_args_) {
    // Fixed memory for the arguments, which the graph's first nodes copy in.
    static_inputs_.assign(input_members_.size(), nullptr);
    for (size_t a = 0; a < input_members_.size(); ++a) {
      if (input_members_[a].empty()) continue;
      const Value& root = g_.values[g_.inputs[a]];
      static_inputs_[a] = make_empty(root.shape, root.dtype, root.device).impl()->storage;
      for (ValueId v : input_members_[a]) {
        slots_[v]->storage = static_inputs_[a];
        slots_[v]->offset = g_.values[v].offset - root.offset;
      }
    }
  } else {
    // The graph reads the arguments where they are (check_graph_support: contiguous).
    for (size_t a = 0; a < input_members_.size(); ++a) {
      if (input_members_[a].empty()) continue;
      // An empty argument (a batch of 0) has no address to tell graphs apart by, but its slots
      // still need a storage: a captured kernel asks them for a (never read) pointer.
      if (args[a].nbytes() > 0) bg.args[a] = args[a].raw_data();
      const TensorImpl& arg = *args[a].impl();
      const int64_t shift = arg.offset - g_.values[g_.inputs[a]].offset;
      for (ValueId v : input_members_[a]) {
        slots_[v]->storage = arg.storage;
        slots_[v]->offset = g_.values[v].offset + shift;
      }
    }
  }
  // Returned tensors and gradients: static buffers the graphs write, shared by all of them.
  if (static_fresh_.size() != fresh_roots_.size()) {
    static_fresh_.assign(fresh_roots_.size(), nullptr);
    for (size_t f = 0; f < fresh_roots_.size(); ++f) {
      const Value& r = g_.values[fresh_roots_[f]];
      static_fresh_[f] = make_empty(r.shape, r.dtype, r.device).impl()->storage;
    }
  }
  for (size_t f = 0; f < fresh_roots_.size(); ++f)
    for (ValueId v : fresh_members_[f]) slots_[v]->storage = static_fresh_[f];
  if (rng_counters_ > 0 && !rng_state_.defined()) {
    rng_state_ = make_empty({2}, kInt64, Device::cuda(dev));
    for (Step& s : steps_)
      if (s.kind == StepKind::Random) {
        s.attrs.rng_state = static_cast<const uint64_t*>(rng_state_.raw_data());
        s.attrs.seed = 0;
        s.attrs.offset = s.rng_delta;
      }
  }
  // Returned fresh buffers, copied out at the end of each replay into memory of the call's own.
  std::vector<bool> returned(fresh_roots_.size(), false);
  for (ValueId o : g_.outputs)
    for (size_t f = 0; f < fresh_roots_.size(); ++f)
      returned[f] = returned[f] || fresh_roots_[f] == g_.values[o].root;
  input_copy_.assign(input_members_.size(), -1);
  bg.output_copy.assign(static_fresh_.size(), -1);
  // Where the output copies point at capture (allocated before it: a capture may not allocate);
  // every replay sets their destination before it launches.
  std::vector<StoragePtr> placeholders(static_fresh_.size());
  for (size_t f = 0; f < static_fresh_.size(); ++f)
    if (returned[f] && static_fresh_[f]->nbytes > 0) {
      const Value& r = g_.values[fresh_roots_[f]];
      placeholders[f] = make_empty(r.shape, r.dtype, r.device).impl()->storage;
    }
  if (!early_planned_) {
    // Each returned buffer's last writer: its copy out (and a scalar's early read) can follow
    // that step on a side branch instead of waiting for the end of the graph.
    early_planned_ = true;
    out_after_.assign(fresh_roots_.size(), -1);
    std::vector<ValueId> roots;
    for (size_t f = 0; f < fresh_roots_.size(); ++f) {
      if (!placeholders[f]) continue;
      for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
        const Node& node = g_.nodes[ni];
        g_.writes(node, roots);
        const bool writes = (node.out != kNoValue && g_.values[node.out].root == fresh_roots_[f]) ||
                            std::find(roots.begin(), roots.end(), fresh_roots_[f]) != roots.end();
        if (writes) out_after_[f] = std::max(out_after_[f], node_step_[ni]);
      }
      const size_t n = static_fresh_[f]->nbytes;
      if (out_after_[f] >= 0 && g_.values[fresh_roots_[f]].numel() == 1 && n > 0 && n <= 8)
        early_outs_.push_back({f, out_after_[f], cuda::EarlyRead::make(n, dev)});
    }
  }
  // Bound arguments stay in the slots only during the capture: holding them would keep a batch
  // alive into the next call.
  auto unbind_args = [&] {
    if (copy_args_) return;
    for (const std::vector<ValueId>& members : input_members_)
      for (ValueId v : members) slots_[v]->storage.reset();
  };
  plan_branches();
  if (branch_sides_ > 0)
    cuda::prepare_capture_branches(dev, branch_sides_,
                                   static_cast<int>(steps_.size()) + branch_sides_ + 1);
  cuda::begin_capture(dev);
  try {
    // The argument copies are the graph's first nodes and each output copy follows the step
    // that last writes its buffer, on a side branch, so a replay queues one launch;
    // replay_graph points them at the call's memory.
    if (copy_args_)
      for (size_t a = 0; a < static_inputs_.size(); ++a)
        if (static_inputs_[a] && args[a].nbytes() > 0)
          input_copy_[a] = cuda::capture_copy(static_inputs_[a]->data, args[a].raw_data(),
                                              static_cast<size_t>(args[a].nbytes()), dev);
    capture_placeholders_ = &placeholders;
    capture_output_copy_ = &bg.output_copy;
    run_steps(true);
    capture_placeholders_ = nullptr;
    capture_output_copy_ = nullptr;
    // An argument the step writes in place (a gradient it accumulates into) goes back to the
    // caller's tensor from its static copy.
    input_back_.assign(input_members_.size(), -1);
    if (copy_args_)
      for (size_t a = 0; a < static_inputs_.size(); ++a)
        if (static_inputs_[a] && args[a].nbytes() > 0 &&
            std::find(written_external_.begin(), written_external_.end(), g_.inputs[a]) !=
                written_external_.end())
          input_back_[a] = cuda::capture_copy(args[a].raw_data(), static_inputs_[a]->data,
                                              static_cast<size_t>(args[a].nbytes()), dev);
    for (size_t f = 0; f < static_fresh_.size(); ++f)  // those no step writes, at the end
      if (placeholders[f] && bg.output_copy[f] < 0)
        bg.output_copy[f] = cuda::capture_copy(placeholders[f]->data, static_fresh_[f]->data,
                                               static_fresh_[f]->nbytes, dev);
  } catch (...) {
    capture_placeholders_ = nullptr;
    capture_output_copy_ = nullptr;
    try {
      (void)cuda::end_capture(dev);
    } catch (...) {
    }
    unbind_args();
    graph_ok_ = false;
    graphs_.clear();
    graph_note_ = "CUDA graph not used: capture failed";
    throw;
  }
  unbind_args();
  bg.graph = cuda::end_capture(dev);
  stats_.graph_nodes = cuda::graph_node_count(*bg.graph);
  ++stats_.graph_captures;
  if (graphs_.size() >= static_cast<size_t>(kMaxBoundGraphs)) graphs_.pop_back();
  graphs_.insert(graphs_.begin(), std::move(bg));
  if (log_enabled(Log::perf))
    log(Log::perf, "CUDA graph captured (" + std::to_string(stats_.graph_nodes) + " nodes, " +
                       (copy_args_ ? "arguments copied in" : "arguments read in place") + ", " +
                       std::to_string(graphs_.size()) + " kept)");
  return &graphs_.front();
}

// Which steps of the captured graph may run side by side. Two steps conflict when one writes
// bytes the other reads or writes (address ranges of the roots they touch, as bound for this
// capture, so buffers the memory plan reuses count as the same bytes). Steps that are not
// self-contained (eager kernels, GEMMs, the cross entropy: they share the device's workspace
// and scratch) stay on the main stream in order; a self-contained step (a generated pointwise or
// reduction kernel) goes to a side branch unless it could overlap nothing there. A step waits
// for the events of the conflicting earlier steps on other branches.
void Executor::plan_branches() {
  const size_t n = steps_.size();
  step_branch_.assign(n, 0);
  step_waits_.assign(n, {});
  step_signals_.assign(n, 0);
  branch_sides_ = 0;
  struct Range {
    uintptr_t lo, hi;
  };
  std::vector<std::vector<Range>> reads(n), writes(n);
  auto range_of = [&](ValueId v, std::vector<Range>& out) {
    const ValueId r = g_.values[v].root;
    const TensorImpl& t = *slots_[r];
    if (!t.storage || !t.storage->data) return;  // internal to a fused group: never in memory
    const auto lo = reinterpret_cast<uintptr_t>(t.data());
    const auto bytes =
        static_cast<uintptr_t>(g_.values[r].numel() * element_size(g_.values[r].dtype));
    if (bytes > 0) out.push_back({lo, lo + bytes});
  };
  std::vector<ValueId> roots;
  for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
    const int32_t si = node_step_[ni];
    if (si < 0) continue;
    const Node& nd = g_.nodes[ni];
    for (ValueId in : nd.inputs) range_of(in, reads[si]);
    if (nd.out != kNoValue) range_of(nd.out, writes[si]);
    g_.writes(nd, roots);
    for (ValueId r : roots) range_of(r, writes[si]);
  }
  auto overlap = [](const std::vector<Range>& a, const std::vector<Range>& b) {
    for (const Range& x : a)
      for (const Range& y : b)
        if (x.lo < y.hi && y.lo < x.hi) return true;
    return false;
  };
  std::vector<char> contained(n, 0);
  for (size_t i = 0; i < n; ++i)
    contained[i] = steps_[i].kind == StepKind::Lowered && lowered_[steps_[i].cpu_group] &&
                   lowered_[steps_[i].cpu_group]->self_contained();
  // deps[j]: earlier steps j must follow.
  std::vector<std::vector<int32_t>> deps(n);
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < j; ++i)
      if (overlap(writes[i], reads[j]) || overlap(writes[i], writes[j]) ||
          overlap(reads[i], writes[j]))
        deps[j].push_back(static_cast<int32_t>(i));
  auto depends = [&](size_t j, int32_t i) {
    return std::find(deps[j].begin(), deps[j].end(), i) != deps[j].end();
  };
  std::vector<int32_t> last_on(kSideBranches + 1, -1);  // per branch: its latest step
  for (size_t j = 0; j < n; ++j) {
    int b = 0;
    if (contained[j]) {
      // Main when it would wait for the main stream's latest step and the next main step waits
      // for it: then it overlaps nothing.
      size_t next = j + 1;
      while (next < n && contained[next]) ++next;
      const bool after_main = last_on[0] < 0 || depends(j, last_on[0]);
      const bool before_main = next < n && depends(next, static_cast<int32_t>(j));
      if (!(after_main && before_main)) {
        for (int k = 1; k <= kSideBranches && b == 0; ++k)  // a side that ran a step it needs
          if (last_on[k] >= 0 && depends(j, last_on[k])) b = k;
        if (b == 0) {  // else the side idle the longest
          b = 1;
          for (int k = 2; k <= kSideBranches; ++k)
            if (last_on[k] < last_on[b]) b = k;
        }
        branch_sides_ = std::max(branch_sides_, b);
      }
    }
    step_branch_[j] = static_cast<int8_t>(b);
    for (int32_t i : deps[j])
      if (step_branch_[i] != b) {
        step_waits_[j].push_back(i);
        step_signals_[i] = 1;
      }
    last_on[b] = static_cast<int32_t>(j);
  }
  if (branch_sides_ == 0) return;
  if (log_enabled(Log::perf)) {
    std::ostringstream os;
    os << "CUDA graph branches:";
    for (size_t j = 0; j < n; ++j) os << " " << j << "@" << int{step_branch_[j]};
    log(Log::perf, os.str());
  }
}

void Executor::replay_graph(BoundGraph& bg, std::span<const Tensor> args,
                            std::vector<Tensor>& outputs) {
  const int dev = graph_device_;
  cuda::Graph& graph = *bg.graph;
  if (copy_args_)
    for (size_t a = 0; a < static_inputs_.size(); ++a)
      if (input_copy_[a] >= 0) {
        cuda::set_graph_copy(graph, input_copy_[a], static_inputs_[a]->data, args[a].raw_data(),
                             static_cast<size_t>(args[a].nbytes()));
        if (input_back_[a] >= 0)
          cuda::set_graph_copy(graph, input_back_[a], args[a].raw_data(), static_inputs_[a]->data,
                               static_cast<size_t>(args[a].nbytes()));
      }
  if (rng_counters_ > 0) {
    Generator& gen = default_generator();
    const uint64_t state[2] = {gen.seed(), gen.advance(rng_counters_)};
    cuda::copy_host_to_device(rng_state_.raw_data(), state, sizeof state, dev);
  }
  // Returned tensors: memory of their own each call, filled by the graph's last copies, so no
  // later replay overwrites them.
  std::vector<StoragePtr>& copies = out_copies_;
  copies.assign(static_fresh_.size(), nullptr);  // sized at capture: no allocation here
  for (size_t f = 0; f < static_fresh_.size(); ++f) {
    if (bg.output_copy[f] < 0) continue;
    const Value& rv = g_.values[fresh_roots_[f]];
    copies[f] = make_empty(rv.shape, rv.dtype, rv.device).impl()->storage;
    cuda::set_graph_copy(graph, bg.output_copy[f], copies[f]->data, static_fresh_[f]->data,
                         static_fresh_[f]->nbytes);
  }
  cuda::launch_graph(graph, dev);
  for (const EarlyOut& e : early_outs_) {
    Storage& st = *copies[e.fresh];
    st.pending_read = {e.read, e.read->note_launch(), st.version};
  }
  apply_effects();
  outputs.clear();
  for (ValueId o : g_.outputs) {
    const ValueId r = g_.values[o].root;
    Tensor t = Tensor(slots_[o]).detach();
    for (size_t f = 0; f < fresh_roots_.size(); ++f) {
      if (fresh_roots_[f] != r) continue;
      if (!copies[f]) {  // an empty buffer: nothing to copy
        const Value& rv = g_.values[r];
        copies[f] = make_empty(rv.shape, rv.dtype, rv.device).impl()->storage;
      }
      t.impl()->storage = copies[f];
    }
    if (g_.values[r].kind == ValueKind::Constant) t = t.clone();
    outputs.push_back(std::move(t));
  }
}

}  // namespace ember::jit

namespace ember::jit {
std::vector<std::string> Executor::lowerings() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < lowered_.size(); ++i) {
    if (!lowered_[i]) continue;
    if (i < g_.groups.size())
      out.push_back("group " + std::to_string(i) + " (" + group_kind_name(g_.groups[i].kind) +
                    "): " + lowered_[i]->describe());
    else
      out.push_back("gemm: " + lowered_[i]->describe());
  }
  return out;
}
}  // namespace ember::jit
