#include "jit/tracer.h"

#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "core/generator.h"
#include "core/philox.h"
#include "core/trace_hooks.h"
#include "jit/errors.h"

namespace ember::jit {
namespace {

thread_local Tracer* t_tracer = nullptr;

void hook_op(OpId op, std::span<const Tensor> in, const Attrs& a, const Tensor& out, bool ip) {
  if (t_tracer) t_tracer->on_op(op, in, a, out, ip);
}
void hook_new(const Tensor& t) {
  if (t_tracer) t_tracer->on_new_tensor(t);
}
void hook_data(const Tensor& t) {
  if (t_tracer) t_tracer->on_host_data(t);
}
void hook_read(const Tensor& t, const char* what, const std::source_location& where) {
  if (t_tracer) t_tracer->on_host_read(t, what, where);
}
void hook_grad(const Tensor& p, const Tensor& g) {
  if (t_tracer) t_tracer->on_grad_set(p, g);
}
void hook_grad_read(const Tensor& p, const Tensor& g) {
  if (t_tracer) t_tracer->on_grad_read(p, g);
}
void hook_backward() {
  if (t_tracer) t_tracer->on_backward();
}
void hook_untraceable(const char* what, const char* reason, const std::source_location& where) {
  if (t_tracer) t_tracer->on_untraceable(what, reason, where);
}
const TraceHooks kHooks{&hook_new,       &hook_data,     &hook_read,       &hook_grad,
                        &hook_grad_read, &hook_backward, &hook_untraceable};

std::string site(const std::source_location& w) {
  std::string file = w.file_name();
  const size_t slash = file.find_last_of('/');
  if (slash != std::string::npos) file = file.substr(slash + 1);
  return file + ":" + std::to_string(w.line());
}

bool same_layout(const Value& v, const Tensor& t) {
  return v.shape == t.sizes() && v.strides == t.strides() && v.offset == t.storage_offset() &&
         v.dtype == t.dtype() && v.device == t.device();
}

}  // namespace

std::string BreakInfo::str() const {
  std::string s = op + ": " + reason;
  if (!where.empty()) s += " (at " + where + ")";
  return s;
}

Tracer::Tracer(bool fullgraph) : fullgraph_(fullgraph) {
  EMBER_CHECK(t_tracer == nullptr,
              "jit: a compiled function called another compiled function while tracing; nested "
              "compilation is not supported (call the inner function's eager body instead)");
  t_tracer = this;
  prev_observer_ = reinterpret_cast<const void*>(trace_observer());
  prev_hooks_ = trace_hooks();
  set_trace_observer(&hook_op);
  set_trace_hooks(&kHooks);
  rng_seed_ = default_generator().seed();
  rng_drawn_start_ = detail::t_draws.default_counters;
}

Tracer::~Tracer() {
  set_trace_observer(reinterpret_cast<OpObserver>(const_cast<void*>(prev_observer_)));
  set_trace_hooks(static_cast<const TraceHooks*>(prev_hooks_));
  t_tracer = nullptr;
}

void Tracer::brk(std::string op, std::string reason, const std::source_location* where) {
  if (broken_) return;
  broken_ = true;
  break_.op = std::move(op);
  break_.reason = std::move(reason);
  if (where) break_.where = site(*where);
  if (fullgraph_) throw GraphBreakError(break_.str());
}

Value Tracer::meta_of(const Tensor& t, ValueKind kind) const {
  Value v;
  v.kind = kind;
  v.shape = t.sizes();
  v.strides = t.strides();
  v.offset = t.storage_offset();
  v.dtype = t.dtype();
  v.device = t.device();
  return v;
}

ValueId Tracer::lookup(const Tensor& t) const {
  auto it = known_.find(t.impl());
  if (it == known_.end() || it->second.impl.expired()) return kNoValue;
  return it->second.value;
}

void Tracer::bind(const Tensor& t, ValueId v) {
  known_[t.impl()] = Known{t.impl_ptr(), v};
  fresh_.erase(t.impl());
  const Value& val = graph_.values[v];
  if (val.root == v && t.impl()->storage)
    roots_[t.impl()->storage.get()] = Root{t.impl()->storage, v};
}

bool Tracer::is_fresh(const Tensor& t) const {
  auto it = fresh_.find(t.impl());
  return it != fresh_.end() && !it->second.expired();
}

void Tracer::add_input(const Tensor& t, int32_t arg_index) {
  // The same tensor passed twice is one value (the signature records the aliasing).
  ValueId v = lookup(t);
  if (v == kNoValue) {
    v = graph_.add_input(t, arg_index);
    bind(t, v);
  } else {
    graph_.inputs.push_back(v);
  }
}

ValueId Tracer::value_of(const Tensor& t) {
  const ValueId known = lookup(t);
  if (known != kNoValue) return known;
  const TensorImpl* impl = t.impl();
  // Another handle on memory the trace already names (detach(), a grad alias): the value with
  // the same layout, or state/input memory seen through a new handle.
  if (impl->storage) {
    auto it = roots_.find(impl->storage.get());
    if (it != roots_.end() && !it->second.storage.expired()) {
      const ValueId root = it->second.root;
      for (size_t i = graph_.values.size(); i-- > 0;) {
        const Value& v = graph_.values[i];
        if (v.root == root && same_layout(v, t)) {
          bind(t, static_cast<ValueId>(i));
          return static_cast<ValueId>(i);
        }
      }
      brk(std::string("tensor"), "a tensor of shape " + t.sizes().str() +
                                     " aliases traced memory through a path the tracer cannot "
                                     "follow (not a view op)");
      return kNoValue;
    }
  }
  if (is_fresh(t)) {
    brk("empty", "reads a tensor created in the function whose contents were never written");
    return kNoValue;
  }
  if (impl->wrapped_number) {
    // A host number: fresh each call, so it is a constant frozen by value.
    const ValueId v = graph_.add_constant(t);
    bind(t, v);
    return v;
  }
  // Created before the call: state, bound by identity.
  const ValueId v = graph_.add_state(t);
  bind(t, v);
  return v;
}

void Tracer::on_new_tensor(const Tensor& t) {
  if (broken_ || suspended_ || finished_) return;
  fresh_[t.impl()] = t.impl_ptr();
}

void Tracer::on_host_data(const Tensor& t) {
  if (broken_ || suspended_ || finished_) return;
  // Freeze a private copy: the host may reuse the tensor it filled.
  ++suspended_;
  Tensor copy = make_empty(t.sizes(), t.dtype(), t.device());
  if (t.nbytes() > 0) std::memcpy(copy.raw_data(), t.raw_data(), static_cast<size_t>(t.nbytes()));
  copy.impl()->wrapped_number = t.impl()->wrapped_number;
  --suspended_;
  const ValueId v = graph_.add_constant(copy);
  bind(t, v);
}

void Tracer::on_host_read(const Tensor& t, const char* what, const std::source_location& where) {
  if (broken_ || suspended_ || finished_) return;
  const ValueId v = lookup(t);
  if (v != kNoValue && graph_.values[graph_.values[v].root].kind == ValueKind::Constant) return;
  if (v == kNoValue && t.impl()->wrapped_number) return;
  brk(what,
      "reads tensor data on the host inside the compiled function (its value would be frozen "
      "into the trace); move the read out of the function or return the tensor",
      &where);
}

void Tracer::on_untraceable(const char* what, const char* reason,
                            const std::source_location& where) {
  if (broken_ || suspended_ || finished_) return;
  brk(what, reason, &where);
}

void Tracer::on_grad_read(const Tensor& param, const Tensor& grad) {
  if (broken_ || suspended_ || finished_) return;
  // Only what the slot held when the call began: later reads see this call's own writes.
  if (!grad_touched_.insert(param.impl()).second) return;
  const ValueId known = lookup(param);
  if (known != kNoValue && graph_.values[known].kind != ValueKind::State) return;
  const ValueId p = value_of(param);
  if (broken_) return;
  if (graph_.values[p].kind != ValueKind::State || graph_.values[p].root != p) return;
  GradInput gi;
  gi.param = graph_.values[p].slot;
  gi.defined = grad.defined();
  if (grad.defined() && lookup(grad) == kNoValue) {
    // Read live, after the function's own arguments (finish() drops it again if unused).
    gi.value = graph_.add_input(grad, static_cast<int32_t>(graph_.inputs.size()));
    bind(grad, gi.value);
  }
  graph_.grad_inputs.push_back(gi);
}

void Tracer::on_grad_set(const Tensor& param, const Tensor& grad) {
  if (broken_ || suspended_ || finished_) return;
  grad_touched_.insert(param.impl());  // set before any read: what it held does not matter
  const ValueId p = value_of(param);
  if (broken_) return;
  if (graph_.values[p].kind != ValueKind::State || graph_.values[p].root != p) {
    brk("grad", "sets .grad of a tensor created inside the compiled function");
    return;
  }
  ValueId g = kNoValue;
  if (grad.defined()) {
    g = value_of(grad);
    if (broken_) return;
  }
  const int32_t slot = graph_.values[p].slot;
  if (!grads_.count(slot)) grad_order_.push_back(slot);
  grads_[slot] = g;
}

void Tracer::on_op(OpId op, std::span<const Tensor> inputs, const Attrs& attrs, const Tensor& out,
                   bool inplace) {
  if (suspended_ || finished_) return;
  const OpKind kind = op_info(op).kind;
  // Counted after a break too: every rank that ran a collective takes part in the check that
  // the ranks traced alike (jit/compile.cpp), whether or not its own trace broke.
  if (kind == OpKind::Collective && collective_group_ < 0) collective_group_ = attrs.group;
  if (broken_) return;
  Node n;
  n.op = op;
  n.attrs = attrs;
  n.inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    n.inputs.push_back(value_of(t));
    if (broken_) return;
  }
  if (kind == OpKind::Random) {
    if (!detail::t_draws.last_from_default || attrs.seed != default_generator().seed() ||
        attrs.seed != rng_seed_) {
      brk(std::string(op_name(op)),
          "draws from a generator other than the default one, or the default generator was "
          "reseeded inside the compiled function");
      return;
    }
    // Replays reserve all of a call's counters at once, from wherever the generator stands
    // then: keep only the position within this call's own draws. (Other threads may draw in
    // between the draws of this one; they do not shift these positions.)
    n.attrs.seed = 0;
    n.attrs.offset = rng_traced_;
    rng_traced_ += philox::counters_for(static_cast<uint64_t>(out.numel()));
  }
  if (kind == OpKind::Transfer && out.device().is_cpu() && !inputs[0].device().is_cpu()) {
    brk("to(cpu)", "copies a traced tensor to the host inside the compiled function");
    return;
  }
  if (kind == OpKind::MultiTensor) {
    graph_.add_node(std::move(n));
    return;
  }
  const bool writes_existing = inplace && !is_fresh(out);
  if (writes_existing) {
    // A new name for memory an earlier value owns.
    const ValueId target = value_of(out);
    if (broken_) return;
    Value v = meta_of(out, ValueKind::Node);
    v.root = graph_.values[target].root;
    n.inplace = true;
    n.inplace_of = target;
    n.out = graph_.add_value(std::move(v));
  } else {
    Value v = meta_of(out, ValueKind::Node);
    // A fill into a fresh tensor (zeros, full) records its shape, so dynamic shapes can
    // re-derive it like any other op's.
    if (kind == OpKind::Nullary) n.attrs.shape = out.sizes();
    if (kind == OpKind::View) {
      v.root = graph_.values[n.inputs[0]].root;
    } else if (!out.is_contiguous() || out.storage_offset() != 0) {
      brk(std::string(op_name(op)), "writes a fresh tensor that is not contiguous");
      return;
    }
    n.out = graph_.add_value(std::move(v));
  }
  const ValueId result = n.out;
  graph_.add_node(std::move(n));
  bind(out, result);
}

void Tracer::finish(const std::vector<Tensor>& outputs) {
  if (!broken_) {
    for (const Tensor& t : outputs) {
      if (!t.defined()) {
        brk("return", "returns an undefined tensor");
        break;
      }
      const ValueId v = value_of(t);
      if (broken_) break;
      graph_.outputs.push_back(v);
    }
  }
  if (!broken_) {
    for (int32_t slot : grad_order_) graph_.grad_effects.push_back({slot, grads_[slot]});
    drop_unread_grad_inputs();
    if (detail::t_draws.default_counters - rng_drawn_start_ != rng_traced_)
      brk("generator", "the function drew from the default generator outside the traced ops");
  }
  finished_ = true;
}

// A gradient whose contents nothing read (zero_grad looks at the slot only to clear it) is no
// argument: binding it would keep the old gradient alive through the replay, a peak eager does
// not have. Only whether it was there stays guarded.
void Tracer::drop_unread_grad_inputs() {
  if (graph_.grad_inputs.empty()) return;
  std::vector<char> read(graph_.values.size(), 0);
  for (const Node& n : graph_.nodes)
    for (ValueId v : n.inputs) read[graph_.values[v].root] = 1;
  for (ValueId v : graph_.outputs) read[graph_.values[v].root] = 1;
  for (const GradEffect& e : graph_.grad_effects)
    if (e.value != kNoValue) read[graph_.values[e.value].root] = 1;
  for (GradInput& gi : graph_.grad_inputs)
    if (gi.value != kNoValue && !read[gi.value]) {
      graph_.inputs.erase(std::find(graph_.inputs.begin(), graph_.inputs.end(), gi.value));
      graph_.values[gi.value].slot = -1;
      gi.value = kNoValue;
    }
  for (size_t i = 0; i < graph_.inputs.size(); ++i)
    if (graph_.values[graph_.inputs[i]].slot >= 0)
      graph_.values[graph_.inputs[i]].slot = static_cast<int32_t>(i);
}

}  // namespace ember::jit
