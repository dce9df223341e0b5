// Constant folding: runs small pure nodes over constant inputs once, at compile time, with
// core's own dispatch (so folded numbers are exactly what a replay would compute), and makes
// their results constants.
#include <memory>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/trace_hooks.h"
#include "jit/passes.h"

namespace ember::jit {
namespace {

constexpr int64_t kMaxFoldNumel = 65536;  // larger results stay computed per replay

// Evaluation must not be observed: a tracer still installed on this thread would record the
// folding ops, and autograd must not record them either.
class QuietScope {
 public:
  QuietScope() : observer_(trace_observer()), hooks_(trace_hooks()) {
    set_trace_observer(nullptr);
    set_trace_hooks(nullptr);
  }
  ~QuietScope() {
    set_trace_observer(observer_);
    set_trace_hooks(hooks_);
  }
  QuietScope(const QuietScope&) = delete;
  QuietScope& operator=(const QuietScope&) = delete;

 private:
  OpObserver observer_;
  const TraceHooks* hooks_;
  NoGradGuard no_grad_;
};

bool foldable_kind(OpKind k) {
  // Random draws must come from the generator per replay; updates are effects. A fill into a
  // fresh tensor (zeros, ones: the tracer records its shape) folds like any pure node. A
  // collective's result depends on the other ranks.
  return k != OpKind::Random && k != OpKind::MultiTensor && k != OpKind::Collective;
}

// A tensor over the constant's storage with `v`'s layout (the value may view the constant).
Tensor constant_tensor(const Graph& g, ValueId id) {
  const Value& v = g.values[id];
  const Value& root = g.values[v.root];
  const Tensor& c = g.constants[root.slot];
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = c.impl()->storage;
  impl->sizes = v.shape;
  impl->strides = v.strides;
  impl->offset = v.offset;
  impl->dtype = v.dtype;
  impl->device = v.device;
  // A wrapped number stays one (it matters to type promotion of anything derived from it).
  impl->wrapped_number = id == v.root && c.impl()->wrapped_number;
  impl->is_view = id != v.root;
  return Tensor(std::move(impl));
}

// Per value: whether it is a root some node writes.
std::vector<char> written_roots(const Graph& g) {
  std::vector<ValueId> w;
  std::vector<char> written(g.values.size(), 0);
  for (const Node& n : g.nodes) {
    g.writes(n, w);
    for (ValueId r : w) written[r] = 1;
  }
  return written;
}

}  // namespace

void fold_constants(Graph& g) {
  // Roots written by any node: a constant whose memory the trace writes is not frozen, and a
  // result written later must stay a buffer of its own.
  const std::vector<char> written = written_roots(g);
  // Constants added by this pass lie past the end of `written`; nothing writes them.
  auto is_written = [&](ValueId r) {
    return r < static_cast<ValueId>(written.size()) && written[r];
  };
  auto is_constant = [&](ValueId v) {
    const ValueId r = g.values[v].root;
    return g.values[r].kind == ValueKind::Constant && !is_written(r);
  };

  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  std::vector<Tensor> args;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const OpKind kind = op_info(n.op).kind;
    if (!foldable_kind(kind) || n.inplace || n.out == kNoValue) continue;
    const Value out = g.values[n.out];  // a copy: add_constant grows g.values
    if (out.numel() > kMaxFoldNumel) continue;
    // A result a caller receives (output, .grad) must not be a shared constant: the caller
    // could write it and change every later replay.
    if (is_written(out.root) || g.is_external_root(out.root)) continue;
    bool all_const = true;
    for (ValueId in : n.inputs) all_const = all_const && is_constant(in);
    if (!all_const) continue;

    Tensor result;
    try {
      QuietScope quiet;
      args.clear();
      for (ValueId in : n.inputs) args.push_back(constant_tensor(g, in));
      if (kind == OpKind::Nullary) {
        result = make_empty(n.attrs.shape, out.dtype, out.device);
        dispatch(n.op, args, n.attrs, &result);
      } else {
        result = dispatch(n.op, args, n.attrs);
      }
    } catch (const Error&) {
      continue;  // e.g. a device this build cannot reach: leave the node to the executor
    }
    if (result.sizes() != out.shape || result.dtype() != out.dtype || result.device() != out.device)
      continue;
    result.impl()->wrapped_number = false;  // a computed tensor, not a host number
    const ValueId c = g.add_constant(result);
    g.replace_uses(n.out, c);
    dead[i] = true;
    any = true;
  }
  if (any) g.erase_nodes(dead);
}

void host_scalar_constants(Graph& g) {
  const std::vector<char> written = written_roots(g);
  std::vector<Tensor> args;
  const size_t count = g.values.size();  // constants added here need no second look
  for (size_t i = 0; i < count; ++i) {
    const ValueId v = static_cast<ValueId>(i);
    const Value& c = g.values[v];
    if (c.kind != ValueKind::Constant || c.root != v || !c.shape.empty() || c.device.is_cpu() ||
        written[v] || g.is_external_root(v))
      continue;
    const Tensor& held = g.constants[c.slot];
    if (!held.defined() || !held.impl()->storage) continue;
    auto meta = std::make_shared<TensorImpl>();  // the host copy's metadata, no storage
    meta->dtype = c.dtype;
    meta->device = Device::cpu();
    const Tensor host_meta(std::move(meta));
    // Every reader must read the value itself (a view of it would stay on the device) and
    // accept a host scalar there, with the same result: core's meta functions decide.
    bool ok = true, read = false;
    for (size_t k = 0; ok && k < g.nodes.size(); ++k) {
      const Node& n = g.nodes[k];
      bool reads = false;
      for (ValueId in : n.inputs) {
        if (g.values[in].root != v) continue;
        reads = true;
        ok = ok && in == v;
      }
      if (!reads || !ok) continue;
      read = true;
      if (n.inplace || n.out == kNoValue) {
        ok = false;
        break;
      }
      args.clear();
      for (ValueId in : n.inputs) args.push_back(in == v ? host_meta : g.meta_tensor(in));
      const Value& out = g.values[n.out];
      try {
        const OutputMeta m = infer_meta(n.op, args, n.attrs);
        ok = m.shape == out.shape && m.dtype == out.dtype && m.device == out.device;
      } catch (const Error&) {
        ok = false;
      }
    }
    for (ValueId o : g.outputs) ok = ok && g.values[o].root != v;
    for (const GradEffect& e : g.grad_effects)
      ok = ok && (e.value == kNoValue || g.values[e.value].root != v);
    if (!ok || !read) continue;
    Tensor copy;
    {
      QuietScope quiet;
      copy = held.to(Device::cpu());
    }
    copy.impl()->wrapped_number = false;
    const ValueId h = g.add_constant(copy);
    g.replace_uses(v, h);
  }
}

void release_unused_constants(Graph& g) {
  std::vector<char> read(g.values.size(), 0);
  auto mark = [&](ValueId v) {
    if (v != kNoValue) read[g.values[v].root] = 1;
  };
  for (const Node& n : g.nodes)
    for (ValueId in : n.inputs) mark(in);
  for (ValueId o : g.outputs) mark(o);
  for (const GradEffect& e : g.grad_effects) mark(e.value);
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& x = g.values[v];
    if (x.kind != ValueKind::Constant || x.root != static_cast<ValueId>(v) || read[v]) continue;
    Tensor& c = g.constants[x.slot];
    if (!c.defined() || !c.impl()->storage) continue;
    c = g.meta_tensor(static_cast<ValueId>(v));  // the same layout, no memory
  }
}

}  // namespace ember::jit
