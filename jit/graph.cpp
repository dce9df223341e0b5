#include "jit/graph.h"

#include <algorithm>
#include <sstream>

#include "core/dispatch.h"

namespace ember::jit {

const char* value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Input:
      return "input";
    case ValueKind::State:
      return "state";
    case ValueKind::Constant:
      return "const";
    case ValueKind::Node:
      return "node";
  }
  return "?";
}

Group sub_group(const Graph& g, const Group& parent, size_t first) {
  Group t;
  t.nodes.assign(parent.nodes.begin() + static_cast<std::ptrdiff_t>(first), parent.nodes.end());
  t.kind = !t.nodes.empty() && op_info(g.nodes[t.nodes.back()].op).kind == OpKind::Reduce
               ? GroupKind::Reduction
               : GroupKind::Pointwise;
  auto member_out = [&](ValueId v) {
    for (int32_t m : t.nodes)
      if (g.nodes[m].out == v) return true;
    return false;
  };
  for (int32_t m : t.nodes)
    for (ValueId in : g.nodes[m].inputs)
      if (!member_out(in) && std::find(t.inputs.begin(), t.inputs.end(), in) == t.inputs.end())
        t.inputs.push_back(in);
  for (ValueId o : parent.outputs)
    if (member_out(o)) t.outputs.push_back(o);
  return t;
}

bool keeps_rows(const Graph& g, ValueId product, ValueId v) {
  const Value& p = g.values[product];
  const Value& x = g.values[v];
  return p.shape.size() == 2 && x.shape.size() >= 2 && x.root == product && x.offset == p.offset &&
         x.numel() == p.numel() && x.shape.back() == p.shape.back() &&
         p.strides == contiguous_strides(p.shape) && x.strides == contiguous_strides(x.shape) &&
         x.dtype == p.dtype;
}

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::Pointwise:
      return "pointwise";
    case GroupKind::Reduction:
      return "reduction";
    case GroupKind::GemmEpilogue:
      return "gemm_epilogue";
    case GroupKind::CrossEntropy:
      return "cross_entropy";
    case GroupKind::Casts:
      return "casts";
  }
  return "?";
}

namespace {
Value meta_of(const Tensor& t, ValueKind kind) {
  Value v;
  v.kind = kind;
  v.shape = t.sizes();
  v.strides = t.strides();
  v.offset = t.storage_offset();
  v.dtype = t.dtype();
  v.device = t.device();
  return v;
}
}  // namespace

ValueId Graph::add_value(Value v) {
  const auto id = static_cast<ValueId>(values.size());
  if (v.root == kNoValue) v.root = id;
  values.push_back(std::move(v));
  return id;
}

ValueId Graph::add_input(const Tensor& t, int32_t arg_index) {
  Value v = meta_of(t, ValueKind::Input);
  v.slot = arg_index;
  const ValueId id = add_value(std::move(v));
  inputs.push_back(id);
  return id;
}

ValueId Graph::add_state(const Tensor& t) {
  Value v = meta_of(t, ValueKind::State);
  v.slot = static_cast<int32_t>(state.size());
  state.push_back(t);
  return add_value(std::move(v));
}

ValueId Graph::add_constant(const Tensor& t) {
  Value v = meta_of(t, ValueKind::Constant);
  v.slot = static_cast<int32_t>(constants.size());
  constants.push_back(t);
  return add_value(std::move(v));
}

int32_t Graph::add_node(Node n) {
  const auto idx = static_cast<int32_t>(nodes.size());
  if (n.out != kNoValue) values[n.out].producer = idx;
  nodes.push_back(std::move(n));
  return idx;
}

Tensor Graph::meta_tensor(ValueId id) const {
  const Value& v = values[id];
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = v.shape;
  impl->strides = v.strides;
  impl->offset = v.offset;
  impl->dtype = v.dtype;
  impl->device = v.device;
  impl->wrapped_number =
      v.kind == ValueKind::Constant && v.shape.empty() && constants[v.slot].impl()->wrapped_number;
  return Tensor(std::move(impl));
}

ValueId Graph::append(OpId op, std::vector<ValueId> ins, const Attrs& attrs) {
  std::vector<Tensor> metas;
  metas.reserve(ins.size());
  for (ValueId v : ins) metas.push_back(meta_tensor(v));
  const OutputMeta m = infer_meta(op, metas, attrs);
  Node n;
  n.op = op;
  n.attrs = attrs;
  n.inputs = std::move(ins);
  const OpKind kind = op_info(op).kind;
  if (kind != OpKind::MultiTensor) {
    Value v;
    v.kind = ValueKind::Node;
    v.shape = m.shape;
    v.dtype = m.dtype;
    v.device = m.device;
    if (kind == OpKind::View) {
      v.strides = m.strides;
      v.offset = m.offset;
      v.root = values[n.inputs[0]].root;
    } else {
      v.strides = contiguous_strides(m.shape);
    }
    n.out = add_value(std::move(v));
  }
  add_node(std::move(n));
  return nodes.back().out;
}

void Graph::replace_uses(ValueId from, ValueId to) {
  for (Node& n : nodes) {
    for (ValueId& v : n.inputs)
      if (v == from) v = to;
    if (n.inplace_of == from) n.inplace_of = to;
  }
  for (ValueId& v : outputs)
    if (v == from) v = to;
  for (GradEffect& e : grad_effects)
    if (e.value == from) e.value = to;
  const ValueId new_root = values[to].root;
  for (size_t i = 0; i < values.size(); ++i)
    if ((ValueId)i != from && values[i].root == from) values[i].root = new_root;
}

void Graph::writes(const Node& n, std::vector<ValueId>& roots) const {
  roots.clear();
  if (n.inplace && n.out != kNoValue) roots.push_back(values[n.out].root);
  if (op_info(n.op).kind == OpKind::MultiTensor) {
    // Parameters, every state group, and the step counter when the update counts it in place
    // (the last update of a step): a write like the parameters', so passes keep it ordered
    // after every read.
    MultiTensorLayout::of(n.attrs).for_each_written(
        [&](size_t i) { roots.push_back(values[n.inputs[i]].root); });
  }
}

bool Graph::is_external_root(ValueId root) const {
  const ValueKind k = values[root].kind;
  if (k == ValueKind::State || k == ValueKind::Input) return true;
  for (ValueId o : outputs)
    if (values[o].root == root) return true;
  for (const GradEffect& e : grad_effects)
    if (e.value != kNoValue && values[e.value].root == root) return true;
  return false;
}

std::vector<char> Graph::named_after_replay() const {
  std::vector<char> named(values.size(), 0);
  for (ValueId o : outputs) named[o] = named[values[o].root] = 1;
  for (const GradEffect& e : grad_effects)
    if (e.value != kNoValue) named[e.value] = named[values[e.value].root] = 1;
  return named;
}

std::vector<int32_t> Graph::live_view_counts() const {
  std::vector<int32_t> views(values.size(), 0);
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].root != static_cast<ValueId>(v) && values[v].producer >= 0)
      ++views[values[v].root];
  return views;
}

void Graph::reindex() {
  for (Value& v : values)
    if (v.kind == ValueKind::Node) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].out != kNoValue) values[nodes[i].out].producer = static_cast<int32_t>(i);
}

void Graph::erase_nodes(const std::vector<bool>& dead) {
  std::vector<Node> kept;
  kept.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!dead[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
  groups.clear();  // group node indices are stale; fusion runs after the cleanup passes
  for (Node& n : nodes) n.group = -1;
  reindex();
}

std::string value_type_str(const Value& v) {
  std::ostringstream os;
  os << dtype_name(v.dtype) << '[';
  for (int i = 0; i < v.shape.size(); ++i) os << (i ? "," : "") << v.shape[i];
  os << ']';
  if (v.device.is_cuda()) os << "@cuda:" << v.device.index;
  return os.str();
}

namespace {
void print_attrs(std::ostream& os, const Node& n) {
  const Attrs& a = n.attrs;
  switch (op_info(n.op).kind) {
    case OpKind::Reduce:
      os << " dims=" << a.dims << (a.keepdim ? " keepdim" : "");
      break;
    case OpKind::View:
      if (n.op == OpId::slice)
        os << " dim=" << a.dim << " " << a.start << ":" << a.end << ":" << a.step;
      else if (n.op == OpId::permute)
        os << " order=" << a.dims;
      else
        os << " shape=" << a.shape;
      break;
    case OpKind::Nullary:
      os << " value=" << a.value.to_double();
      break;
    case OpKind::Softmax:
    case OpKind::Cat:
    case OpKind::Index:
      os << " dim=" << a.dim;
      break;
    case OpKind::Random:
      os << " shape=" << a.shape;
      break;
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Ternary:
      ember::print_attrs(os, n.op, a);  // the attributes its row lists
      break;
    case OpKind::MultiTensor:
      os << " n=" << a.num_tensors << " states=" << MultiTensorLayout::of(a).state_groups
         << (a.nesterov ? " nesterov" : "") << (a.amsgrad ? " amsgrad" : "")
         << (a.centered ? " centered" : "") << (a.maximize ? " maximize" : "")
         << (a.increment_step ? " step+1" : "");
      break;
    default:
      break;
  }
  if (n.op == OpId::to_device) os << " to=" << a.device.str();
}
}  // namespace

std::string Graph::str() const {
  std::ostringstream os;
  for (ValueId v : inputs)
    os << "%" << v << " = input " << values[v].slot << " : " << value_type_str(values[v]) << "\n";
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    if ((v.kind == ValueKind::State || v.kind == ValueKind::Constant) && v.root == (ValueId)i)
      os << "%" << i << " = " << value_kind_name(v.kind) << " " << v.slot << " : "
         << value_type_str(v) << "\n";
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    os << "  ";
    if (n.out != kNoValue) os << "%" << n.out << " = ";
    os << op_name(n.op) << (n.inplace ? "_" : "") << "(";
    for (size_t j = 0; j < n.inputs.size(); ++j) os << (j ? ", " : "") << "%" << n.inputs[j];
    os << ")";
    print_attrs(os, n);
    if (n.out != kNoValue) {
      os << " : " << value_type_str(values[n.out]);
      if (values[n.out].root != n.out) os << " (aliases %" << values[n.out].root << ")";
    }
    if (n.group >= 0) os << "  [group " << n.group << "]";
    os << "\n";
  }
  for (const GradInput& gi : grad_inputs) {
    os << "  state " << gi.param << ".grad at the call: ";
    if (gi.value != kNoValue)
      os << "%" << gi.value << "\n";
    else
      os << (gi.defined ? "set (contents unread)\n" : "none\n");
  }
  for (const GradEffect& e : grad_effects) {
    os << "  state " << e.state << ".grad := ";
    if (e.value == kNoValue)
      os << "none\n";
    else
      os << "%" << e.value << "\n";
  }
  os << "  return (";
  for (size_t j = 0; j < outputs.size(); ++j) os << (j ? ", " : "") << "%" << outputs[j];
  os << ")\n";
  return os.str();
}

std::string Graph::dot() const {
  std::ostringstream os;
  os << "digraph ember {\n  rankdir=TB;\n  node [shape=box, fontname=monospace];\n";
  for (size_t i = 0; i < values.size(); ++i) {
    const Value& v = values[i];
    if (v.kind != ValueKind::Node && v.root == (ValueId)i)
      os << "  v" << i << " [shape=ellipse, label=\"" << value_kind_name(v.kind) << " " << v.slot
         << "\\n"
         << value_type_str(v) << "\"];\n";
  }
  auto node_label = [&](size_t i) {
    const Node& n = nodes[i];
    std::ostringstream l;
    l << op_name(n.op) << (n.inplace ? "_" : "");
    if (n.out != kNoValue) l << "\\n%" << n.out << " " << value_type_str(values[n.out]);
    return l.str();
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    os << "  subgraph cluster_" << g << " {\n    label=\"" << group_kind_name(groups[g].kind) << " "
       << g << "\"; style=rounded; color=blue;\n";
    for (int32_t i : groups[g].nodes)
      os << "    n" << i << " [label=\"" << node_label(i) << "\"];\n";
    os << "  }\n";
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].group < 0) os << "  n" << i << " [label=\"" << node_label(i) << "\"];\n";
  auto src = [&](ValueId v) {
    const Value& val = values[v];
    std::ostringstream s;
    if (val.producer >= 0)
      s << "n" << val.producer;
    else
      s << "v" << val.root;
    return s.str();
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    for (ValueId in : nodes[i].inputs) os << "  " << src(in) << " -> n" << i << ";\n";
  for (size_t j = 0; j < outputs.size(); ++j)
    os << "  out" << j << " [shape=ellipse, label=\"output " << j << "\"];\n  " << src(outputs[j])
       << " -> out" << j << ";\n";
  os << "}\n";
  return os.str();
}

}  // namespace ember::jit
