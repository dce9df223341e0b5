// Dead-code elimination: backward liveness over roots (storage owners), so a write through a
// view or an in-place op keeps the producer of the memory it writes alive.
#include <vector>

#include "jit/passes.h"

namespace ember::jit {

void eliminate_dead_code(Graph& g) {
  const size_t nv = g.values.size();
  // Roots visible after a replay (state, inputs, outputs, grad effects), computed once instead
  // of asking is_external_root per node.
  std::vector<char> external(nv, 0);
  for (size_t v = 0; v < nv; ++v) {
    const ValueKind k = g.values[v].kind;
    if (k == ValueKind::State || k == ValueKind::Input) external[v] = 1;
  }
  // Values needed by name: outputs and grad effects (a view among them keeps its view node).
  std::vector<char> used(nv, 0);
  for (ValueId o : g.outputs) {
    used[o] = 1;
    external[g.values[o].root] = 1;
  }
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) {
      used[e.value] = 1;
      external[g.values[e.value].root] = 1;
    }

  // Every liveness reason points at a later node (a reader of the output, a reader of the root
  // after a write, a later writer of the root), so one reverse sweep reaches the fixpoint.
  std::vector<char> root_read(nv, 0);     // a live later node reads memory of this root
  std::vector<char> root_written(nv, 0);  // a live later node writes this root
  std::vector<bool> dead(g.nodes.size(), false);
  std::vector<ValueId> w;
  bool any_dead = false;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    g.writes(n, w);
    bool live = false;
    for (ValueId r : w) live = live || external[r] || root_read[r];
    if (!live && n.out != kNoValue) {
      const ValueId out = n.out;
      if (n.inplace)
        live = used[out];
      else if (g.is_view(out))
        live = used[out];  // a view is needed only by name; its root lives on without it
      else
        live = external[out] || root_read[out] || root_written[out];
    }
    if (!live) {
      dead[i] = true;
      any_dead = true;
      continue;
    }
    for (ValueId in : n.inputs) {
      used[in] = 1;
      root_read[g.values[in].root] = 1;
    }
    for (ValueId r : w) root_written[r] = 1;
  }
  if (any_dead) g.erase_nodes(dead);
}

}  // namespace ember::jit
