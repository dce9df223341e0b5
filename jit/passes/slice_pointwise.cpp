// A pointwise result read only through disjoint slices, each slice read only by pointwise nodes,
// is computed slice by slice: op(x, y)[s] == op(x[s], y[s]) element for element, so each slice's
// consumers can compute their part in their own kernel instead of reading a whole-size
// intermediate that a kernel of its own wrote. An LSTM step adds the input projection's share to
// the recurrent product and then cuts the sum into four gates, each read by a sigmoid or tanh:
// the sum becomes four adds inside the gate kernel, and the product's group keeps only what its
// GEMM folds (the bias).
//
// The pattern: an out-of-place unary/binary/ternary node whose result owns its memory, is held by
// nobody after the replay, and is written by nothing; every reader of that memory is a slice of
// it (step 1, one dim, no two overlapping); every reader of each slice is an out-of-place
// pointwise node. Each input is sliced the same way where it spans the sliced dim, read whole
// where it broadcasts along it. The new nodes take the old node's place in the order; the old
// node and its slices die (dce). Values and roundings are the same as before: each element is
// the same operation on the same operands.
#include <vector>

#include "core/dispatch.h"
#include "jit/passes.h"
#include "jit/passes/fusion.h"

namespace ember::jit {
namespace {

bool is_plain_slice(const Node& n) {
  return n.op == OpId::slice && !n.inplace && n.out != kNoValue && n.inputs.size() == 1 &&
         n.attrs.step == 1;
}

}  // namespace

void split_sliced_pointwise(Graph& g) {
  const size_t nv = g.values.size(), nn = g.nodes.size();
  std::vector<std::vector<int32_t>> by_name(nv);  // per value: nodes reading it by that name
  std::vector<char> written(nv, 0);
  std::vector<ValueId> w;
  for (size_t i = 0; i < nn; ++i) {
    g.writes(g.nodes[i], w);
    for (ValueId r : w) written[r] = 1;
    for (ValueId in : g.nodes[i].inputs) by_name[in].push_back(static_cast<int32_t>(i));
  }
  const std::vector<char> named = g.named_after_replay();
  const std::vector<int32_t> views = g.live_view_counts();  // a slice's own out included

  std::vector<std::vector<Node>> inserts(nn);  // the new nodes, placed before node i
  std::vector<bool> dead(nn, false);
  bool any = false;
  for (size_t i = 0; i < nn; ++i) {
    const Node n = g.nodes[i];  // a copy: appends below may move the vector
    if (!fusion::is_pointwise_node(n)) continue;
    const ValueId out = n.out;
    if (g.values[out].root != out || named[out] || written[out]) continue;
    // Every reader a plain slice of `out` along one dim, the slices disjoint and the only views
    // of its memory, each slice read (by name) by pointwise nodes only.
    const std::vector<int32_t> rs = by_name[out];
    if (rs.empty() || static_cast<int32_t>(rs.size()) != views[out]) continue;
    const int rank = g.values[out].shape.size();
    const int64_t dim = g.nodes[rs[0]].attrs.dim;  // Tensor::slice records it wrapped
    bool ok = dim >= 0 && dim < rank;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int32_t r : rs) {
      const Node& s = g.nodes[r];
      ok = ok && is_plain_slice(s) && s.inputs[0] == out && s.attrs.dim == dim && !named[s.out] &&
           !by_name[s.out].empty();
      if (!ok) break;
      for (int32_t c : by_name[s.out]) ok = ok && fusion::is_pointwise_node(g.nodes[c]);
      const Value& sv = g.values[s.out];
      const int64_t begin = s.attrs.start, len = sv.shape[static_cast<int>(dim)];
      ok = ok && begin >= 0;  // and clamped: Tensor::slice records the bounds it used
      for (const auto& [b, l] : ranges) ok = ok && (begin + len <= b || b + l <= begin);
      ranges.emplace_back(begin, len);
    }
    if (!ok) continue;

    // The new nodes, built at the end of the list and moved before node i.
    const size_t first_new = g.nodes.size();
    std::vector<std::pair<ValueId, ValueId>> renames;  // slice result -> its new computation
    for (int32_t r : rs) {
      const Attrs cut = g.nodes[r].attrs;
      std::vector<ValueId> ins;
      for (ValueId x : n.inputs) {
        const Value& xv = g.values[x];
        const int xd = static_cast<int>(dim) - (rank - xv.shape.size());  // x's own dim
        if (xd < 0 || xv.shape[xd] == 1) {
          ins.push_back(x);  // broadcast along the sliced dim: read whole
          continue;
        }
        Attrs a = cut;
        a.dim = xd;
        ins.push_back(g.append(OpId::slice, {x}, a));
      }
      const ValueId part = g.append(n.op, ins, n.attrs);
      const Value& pv = g.values[part];
      const Value& sv = g.values[g.nodes[r].out];
      if (pv.shape != sv.shape || pv.dtype != sv.dtype || pv.device != sv.device) {
        ok = false;
        break;
      }
      renames.emplace_back(g.nodes[r].out, part);
    }
    if (!ok) {
      g.nodes.resize(first_new);
      continue;
    }
    for (size_t k = first_new; k < g.nodes.size(); ++k) inserts[i].push_back(std::move(g.nodes[k]));
    g.nodes.resize(first_new);
    for (const auto& [from, to] : renames) g.replace_uses(from, to);
    dead[i] = true;
    for (int32_t r : rs) dead[r] = true;
    any = true;
  }
  if (!any) return;
  std::vector<Node> order;
  order.reserve(nn);
  for (size_t i = 0; i < nn; ++i) {
    for (Node& extra : inserts[i]) order.push_back(std::move(extra));
    if (!dead[i]) order.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(order);
  g.groups.clear();
  for (Node& node : g.nodes) node.group = -1;
  g.reindex();
}

}  // namespace ember::jit
