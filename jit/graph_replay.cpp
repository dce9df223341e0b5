#include "jit/graph_replay.h"

#include <algorithm>

#include "core/cuda_runtime.h"
#include "core/generator.h"
#include "jit/log.h"
#include "kernels/blas_layout.h"

namespace ember::jit {

// Capture needs every kernel on one device's stream, arguments whose layout a contiguous static
// copy reproduces, and GEMM operands cuBLAS reads in place (a staging copy would allocate).
std::string graph_support(const Graph& g, bool computes_on_cuda, int& device) {
  if (!computes_on_cuda) return "the executable computes on the CPU";
  int dev = -1;
  // Only values the plan touches: passes leave replaced names behind (e.g. a host tensor whose
  // move to the GPU was folded into a device constant).
  std::vector<bool> used(g.values.size(), false);
  for (const Node& n : g.nodes) {
    for (ValueId in : n.inputs) used[in] = true;
    if (n.out != kNoValue) used[n.out] = true;
  }
  for (ValueId o : g.outputs) used[o] = true;
  for (size_t i = 0; i < g.values.size(); ++i) {
    if (!used[i]) continue;
    const Value& v = g.values[i];
    if (v.device.is_cpu()) {
      if (v.kind == ValueKind::Constant && v.shape.empty()) continue;  // inline scalars
      return "it touches a CPU tensor";
    }
    if (dev >= 0 && v.device.index != dev) return "it spans several GPUs";
    dev = v.device.index;
  }
  for (ValueId in : g.inputs) {
    const Value& v = g.values[in];
    if (v.strides != contiguous_strides(v.shape)) return "an argument is not contiguous";
  }
  auto gemm_ready = [&](ValueId id) {
    const Value& v = g.values[id];
    const int nd = v.shape.size();
    return nd >= 2 && kernels::blas_readable(v.shape[nd - 2], v.shape[nd - 1], v.strides[nd - 2],
                                             v.strides[nd - 1]);
  };
  for (const Node& n : g.nodes) {
    if (op_info(n.op).kind == OpKind::Matmul &&
        !(gemm_ready(n.inputs[0]) && gemm_ready(n.inputs[1])))
      return "a GEMM operand needs a staging copy";
    if (op_info(n.op).kind == OpKind::Transfer) return "it copies between devices";
  }
  device = dev;
  return {};
}

GraphReplay::GraphReplay(Graph& g, const MemoryPlan& plan, Binding& bind, StepList& steps,
                         int device)
    : g_(g), plan_(plan), bind_(bind), steps_(steps), device_(device) {}

GraphReplay::Bound* GraphReplay::find(std::span<const Tensor> args) {
  if (copy_args_) return graphs_.empty() ? nullptr : &graphs_.front();
  for (size_t i = 0; i < graphs_.size(); ++i) {
    const Bound& bg = graphs_[i];
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

// Each returned buffer's last writer: its copy out (and a scalar's early read) can follow that
// step on a side branch instead of waiting for the end of the graph.
void GraphReplay::plan_early_reads(const std::vector<StoragePtr>& placeholders) {
  early_planned_ = true;
  const std::vector<ValueId>& fresh_roots = bind_.fresh_roots;
  // A collective's result is there at its wait.
  const std::vector<int32_t>& node_step = steps_.node_done();
  out_after_.assign(fresh_roots.size(), -1);
  std::vector<ValueId> roots;
  for (size_t f = 0; f < fresh_roots.size(); ++f) {
    if (!placeholders[f]) continue;
    for (size_t ni = 0; ni < g_.nodes.size(); ++ni) {
      const Node& node = g_.nodes[ni];
      g_.writes(node, roots);
      const bool writes = (node.out != kNoValue && g_.values[node.out].root == fresh_roots[f]) ||
                          std::find(roots.begin(), roots.end(), fresh_roots[f]) != roots.end();
      if (writes) out_after_[f] = std::max(out_after_[f], node_step[ni]);
    }
    const size_t n = static_fresh_[f].nbytes;
    if (out_after_[f] >= 0 && g_.values[fresh_roots[f]].numel() == 1 && n > 0 && n <= 8)
      early_outs_.push_back({f, out_after_[f], cuda::EarlyRead::make(n, device_)});
  }
}

// Bound arguments stay in the slots only during the capture: holding them would keep a batch
// alive into the next call.
void GraphReplay::unbind_args() {
  if (copy_args_) return;
  for (const std::vector<ValueId>& members : bind_.input_members)
    for (ValueId v : members) bind_.slots[v]->storage.reset();
}

// Returned tensors and gradients: static bytes the graphs write, shared by all of them. A
// gradient left on a parameter keeps a buffer of its own (it is read after the replay); what is
// only returned lives in the arena where the plan put it, its copy out joined before the bytes
// are reused (plan_branches' BesideRead).
void GraphReplay::place_statics() {
  const std::vector<ValueId>& fresh_roots = bind_.fresh_roots;
  static_fresh_.resize(fresh_roots.size());
  for (size_t f = 0; f < fresh_roots.size(); ++f) {
    const ValueId r = fresh_roots[f];
    const Value& rv = g_.values[r];
    Static& st = static_fresh_[f];
    st.nbytes = static_cast<size_t>(rv.numel() * element_size(rv.dtype));
    int64_t shift = 0;  // elements between a member's trace offset and its place here
    if (const int32_t a = plan_.static_arena_of[r]; a >= 0) {
      st.storage = bind_.arena(a);
      st.byte_offset = plan_.static_offset_of[r];
      shift = st.byte_offset / element_size(rv.dtype) - rv.offset;
    } else if (!st.storage) {
      st.storage = make_empty(rv.shape, rv.dtype, rv.device).impl()->storage;
    }
    for (ValueId v : bind_.fresh_members[f]) {
      bind_.slots[v]->storage = st.storage;
      bind_.slots[v]->offset = g_.values[v].offset + shift;
    }
  }
}

void GraphReplay::restore_fresh_offsets() {
  for (const std::vector<ValueId>& members : bind_.fresh_members)
    for (ValueId v : members) bind_.slots[v]->offset = g_.values[v].offset;
}

GraphReplay::Bound& GraphReplay::capture(std::span<const Tensor> args) {
  const int dev = device_;
  std::vector<std::shared_ptr<TensorImpl>>& slots = bind_.slots;
  const std::vector<std::vector<ValueId>>& input_members = bind_.input_members;
  const std::vector<ValueId>& fresh_roots = bind_.fresh_roots;
  if (!graphs_.empty() && !copy_args_ && ++rebinds_ > kMaxBoundCaptures) {
    // The arguments keep moving (new memory every call): one graph that copies them in costs a
    // copy per call, a capture per call would cost far more.
    copy_args_ = true;
    graphs_.clear();
    if (log_enabled(Log::perf))
      log(Log::perf, "CUDA graph: the arguments moved " + std::to_string(kMaxBoundCaptures) +
                         " times; from now on the graph copies them into static buffers");
  }
  Bound bg;
  bg.args.assign(input_members.size(), nullptr);
  if (copy_args_) {
    // Fixed memory for the arguments, which the graph's first nodes copy in.
    static_inputs_.assign(input_members.size(), nullptr);
    for (size_t a = 0; a < input_members.size(); ++a) {
      if (input_members[a].empty()) continue;
      const Value& root = g_.values[g_.inputs[a]];
      static_inputs_[a] = make_empty(root.shape, root.dtype, root.device).impl()->storage;
      for (ValueId v : input_members[a]) {
        slots[v]->storage = static_inputs_[a];
        slots[v]->offset = g_.values[v].offset - root.offset;
      }
    }
  } else {
    // The graph reads the arguments where they are (graph_support: contiguous).
    for (size_t a = 0; a < input_members.size(); ++a) {
      if (input_members[a].empty()) continue;
      // An empty argument (a batch of 0) has no address to tell graphs apart by, but its slots
      // still need a storage: a captured kernel asks them for a (never read) pointer.
      if (args[a].nbytes() > 0) bg.args[a] = args[a].raw_data();
      const TensorImpl& arg = *args[a].impl();
      const int64_t shift = arg.offset - g_.values[g_.inputs[a]].offset;
      for (ValueId v : input_members[a]) {
        slots[v]->storage = arg.storage;
        slots[v]->offset = g_.values[v].offset + shift;
      }
    }
  }
  place_statics();
  if (steps_.rng_counters() > 0 && !rng_state_.defined()) {
    rng_state_ = make_empty({2}, kInt64, Device::cuda(dev));
    steps_.use_rng_state(static_cast<const uint64_t*>(rng_state_.raw_data()));
  }
  // Returned fresh buffers, copied out at the end of each replay into memory of the call's own.
  std::vector<bool> returned(fresh_roots.size(), false);
  for (ValueId o : g_.outputs)
    for (size_t f = 0; f < fresh_roots.size(); ++f)
      returned[f] = returned[f] || fresh_roots[f] == g_.values[o].root;
  input_copy_.assign(input_members.size(), -1);
  bg.output_copy.assign(static_fresh_.size(), -1);
  // Where the output copies point at capture (allocated before it: a capture may not allocate);
  // every replay sets their destination before it launches.
  std::vector<StoragePtr> placeholders(static_fresh_.size());
  for (size_t f = 0; f < static_fresh_.size(); ++f)
    if (returned[f] && static_fresh_[f].nbytes > 0) {
      const Value& r = g_.values[fresh_roots[f]];
      placeholders[f] = make_empty(r.shape, r.dtype, r.device).impl()->storage;
    }
  if (!early_planned_) plan_early_reads(placeholders);
  // A copy out of arena bytes runs beside the steps after its writer: the steps that reuse
  // those bytes wait for it.
  std::vector<BesideRead> beside;
  for (size_t f = 0; f < static_fresh_.size(); ++f)
    if (placeholders[f] && out_after_[f] >= 0 && plan_.static_arena_of[fresh_roots[f]] >= 0)
      beside.push_back({out_after_[f], static_data(f), static_fresh_[f].nbytes});
  branches_ = plan_branches(g_, steps_, slots, beside);
  const auto nsteps = static_cast<int>(steps_.size());
  if (branches_.sides > 0)
    cuda::prepare_capture_branches(dev, branches_.sides, nsteps + branches_.sides + 1);
  cuda::begin_capture(dev);
  try {
    // The argument copies are the graph's first nodes and each output copy follows the step
    // that last writes its buffer, on a side branch, so a replay queues one launch; replay()
    // points them at the call's memory.
    if (copy_args_)
      for (size_t a = 0; a < static_inputs_.size(); ++a)
        if (static_inputs_[a] && args[a].nbytes() > 0)
          input_copy_[a] = cuda::capture_copy(static_inputs_[a]->data, args[a].raw_data(),
                                              static_cast<size_t>(args[a].nbytes()), dev);
    capture_placeholders_ = &placeholders;
    capture_output_copy_ = &bg.output_copy;
    steps_.run(this);
    capture_placeholders_ = nullptr;
    capture_output_copy_ = nullptr;
    // An argument the step writes in place (a gradient it accumulates into) goes back to the
    // caller's tensor from its static copy.
    const std::vector<ValueId>& written = bind_.written_external;
    input_back_.assign(input_members.size(), -1);
    if (copy_args_)
      for (size_t a = 0; a < static_inputs_.size(); ++a)
        if (static_inputs_[a] && args[a].nbytes() > 0 &&
            std::find(written.begin(), written.end(), g_.inputs[a]) != written.end())
          input_back_[a] = cuda::capture_copy(args[a].raw_data(), static_inputs_[a]->data,
                                              static_cast<size_t>(args[a].nbytes()), dev);
    for (size_t f = 0; f < static_fresh_.size(); ++f)  // those no step writes, at the end
      if (placeholders[f] && bg.output_copy[f] < 0)
        bg.output_copy[f] =
            cuda::capture_copy(placeholders[f]->data, static_data(f), static_fresh_[f].nbytes, dev);
  } catch (...) {
    capture_placeholders_ = nullptr;
    capture_output_copy_ = nullptr;
    try {
      (void)cuda::end_capture(dev);
    } catch (...) {
    }
    unbind_args();
    restore_fresh_offsets();
    graphs_.clear();
    // Plain replays run from now on: their random steps must draw from the generator again,
    // not read a key from rng_state_, which only a graph launch writes.
    if (rng_state_.defined()) {
      steps_.use_rng_state(nullptr);
      rng_state_ = Tensor();
    }
    throw;
  }
  unbind_args();
  restore_fresh_offsets();
  bg.graph = cuda::end_capture(dev);
  nodes_ = cuda::graph_node_count(*bg.graph);
  ++captures_;
  if (graphs_.size() >= static_cast<size_t>(kMaxBoundGraphs)) graphs_.pop_back();
  graphs_.insert(graphs_.begin(), std::move(bg));
  if (log_enabled(Log::perf))
    log(Log::perf, "CUDA graph captured (" + std::to_string(nodes_) + " nodes, " +
                       (copy_args_ ? "arguments copied in" : "arguments read in place") + ", " +
                       std::to_string(graphs_.size()) + " kept)");
  return graphs_.front();
}

void GraphReplay::before_steps() {
  if (branches_.sides == 0) return;
  // The side branches start after what the main stream queued so far (argument copies).
  const int fork = static_cast<int>(steps_.size()) + branches_.sides;
  cuda::capture_signal(device_, 0, fork);
  for (int b = 1; b <= branches_.sides; ++b) cuda::capture_wait(device_, b, fork);
}

void GraphReplay::before_step(int32_t i) {
  if (branches_.sides > 0) {
    const int b = branches_.branch[i];
    cuda::use_capture_branch(device_, b);
    for (int32_t e : branches_.waits[i]) cuda::capture_wait(device_, b, e);
  }
  if (branches_.join_early[static_cast<size_t>(i)]) cuda::join_early_branch(device_);
}

void GraphReplay::after_step(int32_t i) {
  for (const EarlyOut& e : early_outs_)
    if (e.after_step == i) e.read->capture(static_data(e.fresh));
  if (capture_output_copy_)
    for (size_t f = 0; f < out_after_.size(); ++f)
      if (out_after_[f] == i && (*capture_placeholders_)[f])
        (*capture_output_copy_)[f] =
            cuda::capture_copy((*capture_placeholders_)[f]->data, static_data(f),
                               static_fresh_[f].nbytes, device_, /*beside=*/true);
  if (branches_.sides > 0 && branches_.signals[i])
    cuda::capture_signal(device_, branches_.branch[i], i);
}

void GraphReplay::after_steps() {
  if (branches_.sides == 0) return;
  // Join the side branches before what follows (the output copies read what they wrote).
  const auto n = static_cast<int32_t>(steps_.size());
  for (int b = 1; b <= branches_.sides; ++b) {
    cuda::capture_signal(device_, b, n + b - 1);
    cuda::capture_wait(device_, 0, n + b - 1);
  }
  cuda::use_capture_branch(device_, 0);
}

void GraphReplay::replay(Bound& bg, std::span<const Tensor> args, std::vector<Tensor>& outputs) {
  const int dev = device_;
  const std::vector<ValueId>& fresh_roots = bind_.fresh_roots;
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
  if (steps_.rng_counters() > 0) {
    const Generator::Reservation r = default_generator().reserve(steps_.rng_counters());
    const uint64_t state[2] = {r.seed, r.offset};
    cuda::copy_host_to_device(rng_state_.raw_data(), state, sizeof state, dev);
  }
  // Returned tensors: memory of their own each call, filled by the graph's last copies, so no
  // later replay overwrites them.
  std::vector<StoragePtr>& copies = out_copies_;
  copies.assign(static_fresh_.size(), nullptr);  // sized at capture: no allocation here
  for (size_t f = 0; f < static_fresh_.size(); ++f) {
    if (bg.output_copy[f] < 0) continue;
    const Value& rv = g_.values[fresh_roots[f]];
    copies[f] = make_empty(rv.shape, rv.dtype, rv.device).impl()->storage;
    cuda::set_graph_copy(graph, bg.output_copy[f], copies[f]->data, static_data(f),
                         static_fresh_[f].nbytes);
  }
  cuda::launch_graph(graph, dev);
  for (const EarlyOut& e : early_outs_) {
    Storage& st = *copies[e.fresh];
    st.pending_read = {e.read, e.read->note_launch(), st.version};
  }
  bind_.apply_effects();
  outputs.clear();
  for (ValueId o : g_.outputs) {
    const ValueId r = g_.values[o].root;
    Tensor t = Tensor(bind_.slots[o]).detach();
    for (size_t f = 0; f < fresh_roots.size(); ++f) {
      if (fresh_roots[f] != r) continue;
      if (!copies[f]) {  // an empty buffer: nothing to copy
        const Value& rv = g_.values[r];
        copies[f] = make_empty(rv.shape, rv.dtype, rv.device).impl()->storage;
      }
      t.impl()->storage = copies[f];
    }
    if (g_.values[r].kind == ValueKind::Constant) t = t.clone();
    outputs.push_back(std::move(t));
  }
  // The returned tensors own their copies now: held here until the next replay, each would
  // stay alive beside the next call's (a second loss on the device between steps).
  for (StoragePtr& c : copies) c.reset();
}

}  // namespace ember::jit
