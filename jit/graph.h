#pragma once
// The JIT's IR: a traced function as a list of nodes over values.
//
// Values are SSA names for tensors. A value is an Input (an argument of the compiled function,
// bound per call), State (a tensor created outside the function and read or written by it:
// parameters, .grad slots, optimizer buffers, hyperparameter scalars, referenced by identity),
// a Constant (host data frozen at trace time: wrapped numbers, from_vector tensors) or the
// output of a Node.
//
// Memory can alias: view ops make values that share their input's storage, and in-place ops
// (and the multi-tensor optimizer update) write storage an earlier value names. Every value
// therefore records its `root`, the value that owns its storage; a write to a root is an effect
// that orders it against every read of the same root. Passes use `writes()` to stay correct.
#include <cstdint>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"

namespace ember::jit {

using ValueId = int32_t;
inline constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t { Input, State, Constant, Node };
const char* value_kind_name(ValueKind k);

struct Value {
  ValueKind kind = ValueKind::Node;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements, into the root's storage
  DType dtype = kFloat32;
  Device device;
  ValueId root = kNoValue;  // the value owning the storage (itself for an owner)
  int32_t producer = -1;    // the node that made it (Node values)
  int32_t slot = -1;        // Input: argument index; State/Constant: index into graph's lists
  int64_t numel() const { return numel_of(shape); }
};

struct Node {
  OpId op = OpId::neg;
  Attrs attrs;
  std::vector<ValueId> inputs;
  // The value this node defines. For an in-place node (`inplace`) it is a new name for memory
  // that an earlier value owns (its root is that value's root). Multi-tensor updates define
  // nothing (kNoValue) and write their parameter and buffer inputs (and the step input with
  // attrs.increment_step).
  ValueId out = kNoValue;
  bool inplace = false;
  ValueId inplace_of = kNoValue;  // in place: the value whose memory (and layout) it writes
  int32_t group = -1;             // fusion group (set by the fusion pass)
};

// A fused region the executor runs as one unit.
enum class GroupKind : uint8_t {
  Pointwise,     // a chain of elementwise nodes of one shape; intermediates never stored
  Reduction,     // pointwise producers feeding one reduction (e.g. a bias gradient)
  GemmEpilogue,  // a matmul followed by a pointwise tail (and at most one closing reduction)
  CrossEntropy,  // the softmax-cross-entropy forward and its backward over the same logits
  Casts,         // independent dtype casts of dense tensors (any shapes): one multi-tensor launch
};
const char* group_kind_name(GroupKind k);

struct Group {
  GroupKind kind = GroupKind::Pointwise;
  std::vector<int32_t> nodes;    // in execution order
  std::vector<ValueId> inputs;   // read from outside the group
  std::vector<ValueId> outputs;  // needed after the group (the rest stays internal)
  // Internal values the group's lowering keeps in memory anyway (a GEMM's result that its
  // generated tail kernel reads); decided when fusion asks the lowering (jit/lower.h).
  std::vector<ValueId> stored;
};

// What a parameter's .grad held when the call began, for a parameter whose gradient the function
// read before (or instead of) setting it: gradient accumulation, an optimizer step without
// zero_grad, zero_grad itself. Such a gradient is not state bound by identity (the user, or
// zero_grad(set_to_none) and the next backward, replace it between calls) but an implicit
// argument: read live at every call, after the function's own arguments, and guarded like them.
// `value` is that argument's input value, or kNoValue when nothing read its contents (then only
// whether a gradient was there is guarded: `defined`).
struct GradInput {
  int32_t param = -1;  // index into Graph::state
  ValueId value = kNoValue;
  bool defined = false;
};

// p.grad := value at the end of a replay (kNoValue clears it). One entry per parameter: the
// last write of the trace wins.
struct GradEffect {
  int32_t state = -1;  // index into Graph::state (the parameter)
  ValueId value = kNoValue;
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;    // per argument tensor, in order, then the read gradients
  std::vector<ValueId> outputs;   // what the function returned, in order
  std::vector<Tensor> state;      // by identity; Value::slot indexes this
  std::vector<Tensor> constants;  // frozen host data; Value::slot indexes this
  std::vector<GradEffect> grad_effects;
  std::vector<GradInput> grad_inputs;  // their values are the last entries of `inputs`
  std::vector<Group> groups;

  ValueId add_value(Value v);
  ValueId add_input(const Tensor& t, int32_t arg_index);
  ValueId add_state(const Tensor& t);
  ValueId add_constant(const Tensor& t);
  // Appends a node whose output value already exists (the tracer's path).
  int32_t add_node(Node n);
  // Appends an out-of-place node over existing values: infers the output with core's meta
  // functions (so it validates like dispatch would) and adds the output value, which aliases
  // its input's root for a view op. Returns the output (kNoValue for multi-tensor updates).
  // For building graphs in passes and tests.
  ValueId append(OpId op, std::vector<ValueId> inputs, const Attrs& attrs = {});
  // A storage-less tensor with the value's metadata, for core's meta functions.
  Tensor meta_tensor(ValueId v) const;

  // Rewrites every use of `from` (node inputs, outputs, grad effects) to `to`; values whose
  // root was `from` now alias `to`'s root. `from` itself stays as an unused name.
  void replace_uses(ValueId from, ValueId to);

  bool is_view(ValueId v) const { return values[v].root != v; }
  // The roots a node writes: its output's root when in place; the parameters' and buffers'
  // roots for a multi-tensor update, and its step's root when it counts the step
  // (attrs.increment_step). Empty for a pure node.
  void writes(const Node& n, std::vector<ValueId>& roots) const;
  // Roots visible after a replay: state, inputs, outputs, grad effects. Writes to them are
  // effects no pass may drop.
  bool is_external_root(ValueId root) const;
  // Per value id: whether the caller holds it by name after a replay (an output or a grad
  // effect's value), marked on the value and on its root.
  std::vector<char> named_after_replay() const;
  // Per value id: how many values are views of it as their root, counting only views a node
  // still in the graph makes (a dead view's value keeps its root but has no producer).
  std::vector<int32_t> live_view_counts() const;

  // Recomputes Value::producer after nodes were removed or reordered.
  void reindex();
  // Drops nodes for which `dead[i]` is true (keeps values; unused ones stay as names).
  void erase_nodes(const std::vector<bool>& dead);

  int32_t live_node_count() const { return static_cast<int32_t>(nodes.size()); }

  std::string str() const;  // one line per node, like "%5 = mul(%3, %4) : f32[64,512]"
  std::string dot() const;  // Graphviz, fused groups as clusters
};

// The members of `parent` from position `first` on as a group of their own: Reduction when the
// last member reduces, else Pointwise; its inputs are whatever those members read from outside
// them (earlier members' results included), its outputs the parent's among them. A contraction
// group's tail, which a device may run as one generated kernel after the product.
Group sub_group(const Graph& g, const Group& parent, size_t first);

// Whether view `v` of `product` (a dense [M, N] matrix) is the same memory in the same order
// with the same last dim N: a reshape that splits only the rows (a Linear over more dims).
bool keeps_rows(const Graph& g, ValueId product, ValueId v);

// "f32[64,512]" for a value.
std::string value_type_str(const Value& v);

}  // namespace ember::jit
