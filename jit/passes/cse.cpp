// Common-subexpression elimination. Two nodes compute the same thing when they run the same op
// with equal attributes on the same value ids and no write reached any input's memory between
// them: each root carries a write epoch (bumped by every node that writes it), and the epochs of
// the inputs' roots are part of the key.
#include <cstdint>
#include <map>
#include <vector>

#include "jit/passes.h"

namespace ember::jit {
namespace {

bool mergeable_kind(OpKind k) {
  // Random ops draw fresh numbers per node; factories and fills make buffers that are often
  // written later (accumulators); updates and collectives are effects.
  return k != OpKind::Random && k != OpKind::MultiTensor && k != OpKind::Nullary &&
         k != OpKind::Factory && k != OpKind::Collective;
}

}  // namespace

void eliminate_common_subexpressions(Graph& g) {
  const size_t nv = g.values.size();
  const size_t nn = g.nodes.size();
  std::vector<ValueId> w;
  // The last node writing each root: a node whose output memory is written later cannot stand
  // for another (the write would show through both names).
  std::vector<int64_t> last_write(nv, -1);
  for (size_t i = 0; i < nn; ++i) {
    g.writes(g.nodes[i], w);
    for (ValueId r : w) last_write[r] = static_cast<int64_t>(i);
  }

  // Values a caller can hold after the replay: outputs, grad effects and the memory they view.
  std::vector<char> returned(nv, 0);
  auto mark = [&](ValueId v) { returned[v] = returned[g.values[v].root] = 1; };
  for (ValueId o : g.outputs) mark(o);
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) mark(e.value);

  std::vector<uint32_t> epoch(nv, 0);
  std::map<std::vector<int64_t>, std::vector<int32_t>> seen;  // key -> candidate nodes
  std::vector<bool> dead(nn, false);
  bool any = false;
  std::vector<int64_t> key;
  for (size_t i = 0; i < nn; ++i) {
    Node& n = g.nodes[i];
    const bool eligible = mergeable_kind(op_info(n.op).kind) && !n.inplace && n.out != kNoValue &&
                          last_write[g.values[n.out].root] <= static_cast<int64_t>(i);
    if (eligible) {
      key.clear();
      key.push_back(static_cast<int64_t>(n.op));
      for (ValueId in : n.inputs) {
        key.push_back(in);
        key.push_back(epoch[g.values[in].root]);
      }
      auto& cands = seen[key];
      bool merged = false;
      for (int32_t j : cands) {
        const Node& first = g.nodes[j];
        if (!attrs_equal(first.attrs, n.attrs)) continue;
        // Two returned (or .grad) tensors must stay two tensors: a caller may write one.
        if (returned[first.out] && returned[n.out]) continue;
        if (returned[n.out]) returned[first.out] = 1;
        g.replace_uses(n.out, first.out);
        dead[i] = true;
        any = merged = true;
        break;
      }
      if (!merged) cands.push_back(static_cast<int32_t>(i));
    }
    g.writes(n, w);
    for (ValueId r : w) ++epoch[r];
  }
  if (any) g.erase_nodes(dead);
}

}  // namespace ember::jit
