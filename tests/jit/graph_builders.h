#pragma once
// Hand-built graph pieces the JIT pass tests share: nodes as the tracer records them.
#include <utility>
#include <vector>

#include "jit/graph.h"

namespace ember::jit::graph_test {

// An in-place node: `op` over `inputs` writing the memory of `target` (a new name with the
// target's layout and root), as the tracer records x.add_(y), fill_ or copy_.
inline ValueId write_inplace(Graph& g, OpId op, std::vector<ValueId> inputs, ValueId target,
                             const Attrs& attrs = {}) {
  Value v = g.values[target];
  v.kind = ValueKind::Node;
  v.producer = -1;
  v.slot = -1;
  const ValueId out = g.add_value(v);
  Node n;
  n.op = op;
  n.attrs = attrs;
  n.inputs = std::move(inputs);
  n.out = out;
  n.inplace = true;
  g.add_node(std::move(n));
  return out;
}

// zeros()/full(): a fill node with no inputs and a fresh contiguous output.
inline ValueId fill_node(Graph& g, const Shape& shape, double value) {
  Value v;
  v.kind = ValueKind::Node;
  v.shape = shape;
  v.strides = contiguous_strides(shape);
  v.dtype = kFloat32;
  const ValueId out = g.add_value(v);
  Node n;
  n.op = OpId::fill;
  n.attrs.value = value;
  n.out = out;
  g.add_node(std::move(n));
  return out;
}

}  // namespace ember::jit::graph_test
