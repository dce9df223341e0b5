#include "jit/fingerprint.h"

#include <cstring>
#include <sstream>

namespace ember::jit {
namespace {

struct Writer {
  std::string s;
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void dims(const Dims& d) {
    pod(d.size());
    for (int64_t x : d) pod(x);
  }
  // Every attribute but the device addresses (a replay binds those), generated from the table.
  void attrs(const Attrs& a) { append_attr_bytes(s, a); }
  // `base`: the offset that does not count (an argument's own offset may differ per call; the
  // executor binds it, so only the distance from the argument's first element matters).
  void value(const Value& v, int64_t base) {
    pod(v.kind);
    dims(v.shape);
    dims(v.strides);
    pod(v.offset - base);
    pod(v.dtype);
    pod(v.device.type);
    pod(v.device.index);
    pod(v.root);
    pod(v.slot);
  }
  void node(const Node& n) {
    pod(n.op);
    attrs(n.attrs);
    pod(n.inputs.size());
    for (ValueId v : n.inputs) pod(v);
    pod(n.out);
    pod(n.inplace);
    pod(n.inplace_of);
  }
};

int64_t value_base(const Graph& g, const Value& v) {
  const Value& r = g.values[v.root];
  return r.kind == ValueKind::Input ? r.offset : 0;
}

std::string constant_bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes()));
}

}  // namespace

std::string fingerprint(const Graph& g) { return fingerprint(g, false); }

std::string fingerprint(const Graph& g, bool portable) {
  Writer w;
  w.pod(g.values.size());
  for (const Value& v : g.values) w.value(v, value_base(g, v));
  w.pod(g.nodes.size());
  for (const Node& n : g.nodes) w.node(n);
  for (ValueId v : g.inputs) w.pod(v);
  w.pod(-1);
  for (ValueId v : g.outputs) w.pod(v);
  w.pod(-1);
  if (portable) {
    w.pod(g.state.size());
    w.pod(g.constants.size());
  } else {
    for (const Tensor& t : g.state) w.pod(reinterpret_cast<uintptr_t>(t.impl()));
    w.pod(-1);
    for (const Tensor& t : g.constants) {
      w.s += constant_bytes(t);
      w.pod(t.impl()->wrapped_number);
    }
  }
  for (const GradEffect& e : g.grad_effects) {
    w.pod(e.state);
    w.pod(e.value);
  }
  w.pod(-1);
  for (const GradInput& gi : g.grad_inputs) {
    w.pod(gi.param);
    w.pod(gi.value);
    w.pod(gi.defined);
  }
  return w.s;
}

std::string first_difference(const Graph& a, const Graph& b) {
  std::ostringstream os;
  if (a.nodes.size() != b.nodes.size())
    return "the trace has " + std::to_string(b.nodes.size()) + " ops, the previous one " +
           std::to_string(a.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    Writer wa, wb;
    wa.node(a.nodes[i]);
    wb.node(b.nodes[i]);
    if (wa.s != wb.s) {
      const Node& na = a.nodes[i];
      const Node& nb = b.nodes[i];
      os << "op " << i << " ";
      if (na.op != nb.op)
        os << "is " << op_name(nb.op) << ", was " << op_name(na.op);
      else if (na.inputs != nb.inputs || na.out != nb.out)
        os << "(" << op_name(nb.op)
           << ") names other values (state first used at another point, or new state)";
      else
        os << "(" << op_name(nb.op) << ") has other attributes";
      return os.str();
    }
  }
  if (a.grad_inputs.size() != b.grad_inputs.size())
    return "it reads the gradients of " + std::to_string(b.grad_inputs.size()) +
           " parameters before setting them, the previous trace " +
           std::to_string(a.grad_inputs.size());
  for (size_t i = 0; i < a.grad_inputs.size(); ++i)
    if (a.grad_inputs[i].defined != b.grad_inputs[i].defined)
      return "state " + std::to_string(b.grad_inputs[i].param) + "'s gradient was " +
             (b.grad_inputs[i].defined ? "set" : "none") +
             " when the call began, in the previous "
             "trace " +
             (a.grad_inputs[i].defined ? "set" : "none");
  if (a.state.size() != b.state.size()) return "it reads different state tensors";
  for (size_t i = 0; i < a.state.size(); ++i)
    if (!a.state[i].is_same(b.state[i]))
      return "state " + std::to_string(i) + " (shape " + b.state[i].sizes().str() +
             ") is a different tensor than in the previous trace";
  for (size_t i = 0; i < a.constants.size() && i < b.constants.size(); ++i)
    if (constant_bytes(a.constants[i]) != constant_bytes(b.constants[i]))
      return "host constant " + std::to_string(i) + " (shape " + b.constants[i].sizes().str() +
             ") changed between calls";
  if (a.values.size() != b.values.size()) return "the number of values differs";
  for (size_t i = 0; i < a.values.size(); ++i) {
    Writer wa, wb;
    wa.value(a.values[i], value_base(a, a.values[i]));
    wb.value(b.values[i], value_base(b, b.values[i]));
    if (wa.s != wb.s)
      return "value %" + std::to_string(i) + " (" + value_kind_name(b.values[i].kind) +
             ") has another layout or origin: " + value_type_str(a.values[i]) + " strides " +
             a.values[i].strides.str() + " offset " + std::to_string(a.values[i].offset) + " vs " +
             value_type_str(b.values[i]) + " strides " + b.values[i].strides.str() + " offset " +
             std::to_string(b.values[i].offset);
  }
  if (fingerprint(a) != fingerprint(b)) return "its inputs, outputs or gradient effects differ";
  return {};
}

}  // namespace ember::jit
