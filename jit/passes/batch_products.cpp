// Independent products sharing a right operand become one product over the joined rows.
//
// A loop that multiplies each step's input by the same weight (an RNN cell's x_t W_ih^T, a
// shared encoder applied to several inputs) traces as one small GEMM per step. When no product's
// left operand depends on another's result, they are one GEMM of cat(A_0, A_1, ...) and B, whose
// row blocks are the products (cuDNN hoists an RNN's input projection out of the time loop the
// same way): one launch with T times the rows, which fills the GPU where each step alone does
// not. The recurrent products (h_{t-1} W_hh^T) stay: each one's input depends on the previous
// one's result.
//
// The batched product runs where the first product ran. A left operand computed later is taken
// only when it is a chain of views over values that exist there (a step's slice of the input);
// those view nodes move up with it. Nothing may write a left operand's memory, or B's, between
// that position and the product it replaces; products whose results are returned, held by a
// gradient, or written in place stay as they are.
#include <algorithm>
#include <map>
#include <vector>

#include "core/dispatch.h"
#include "jit/passes.h"

namespace ember::jit {
namespace {

bool is_product(const Node& n) {
  return n.op == OpId::mm && !n.inplace && n.out != kNoValue && n.inputs.size() == 2;
}

}  // namespace

void batch_products(Graph& g) {
  const size_t nn = g.nodes.size(), nv = g.values.size();
  std::vector<std::vector<int32_t>> writes_of(nv);
  std::vector<ValueId> w;
  for (size_t i = 0; i < nn; ++i) {
    g.writes(g.nodes[i], w);
    for (ValueId r : w) writes_of[r].push_back(static_cast<int32_t>(i));
  }
  const std::vector<char> named = g.named_after_replay();
  auto written_between = [&](ValueId v, int32_t lo, int32_t hi) {
    for (int32_t k : writes_of[g.values[v].root])
      if (k > lo && k < hi) return true;
    return false;
  };

  // Products by right operand, in node order.
  std::map<ValueId, std::vector<int32_t>> by_rhs;
  for (size_t i = 0; i < nn; ++i) {
    const Node& n = g.nodes[i];
    if (!is_product(n) || named[n.out] || !writes_of[n.out].empty()) continue;
    if (g.values[n.inputs[0]].shape.size() != 2) continue;
    by_rhs[n.inputs[1]].push_back(static_cast<int32_t>(i));
  }

  struct Batch {
    std::vector<int32_t> members;  // node indices, ascending
    std::vector<int32_t> hoisted;  // view nodes moved to before the first member
  };
  std::vector<Batch> batches;
  std::vector<char> taken(nn, 0);  // members and hoisted views of some batch
  for (auto& [rhs, cands] : by_rhs) {
    if (cands.size() < 2) continue;
    const int32_t p0 = cands[0];
    const Value& a0 = g.values[g.nodes[p0].inputs[0]];
    // Values depending on a member's result, propagated in node order from p0.
    std::vector<char> dep(nv, 0);
    Batch b;
    size_t next = 0;
    for (int32_t k = p0; k < static_cast<int32_t>(nn) && next < cands.size(); ++k) {
      const Node& n = g.nodes[k];
      if (k == cands[next]) {
        ++next;
        const ValueId a = n.inputs[0];
        const Value& av = g.values[a];
        bool ok = !dep[a] && !dep[g.values[a].root] && !taken[k] && av.dtype == a0.dtype &&
                  av.device == a0.device && av.shape[1] == a0.shape[1] &&
                  !written_between(rhs, p0, k) && !written_between(a, p0, k);
        // The left operand must exist at p0: computed before it, or views over such values.
        std::vector<int32_t> views;
        for (ValueId v = a; ok;) {
          const int32_t p = g.values[v].producer;
          if (p < 0 || p < p0) break;
          const Node& pn = g.nodes[p];
          ok = op_info(pn.op).kind == OpKind::View && !pn.inplace && pn.inputs.size() == 1 &&
               !taken[p];
          views.push_back(p);
          v = pn.inputs[0];
        }
        if (ok) {
          b.members.push_back(k);
          for (int32_t p : views)
            if (std::find(b.hoisted.begin(), b.hoisted.end(), p) == b.hoisted.end())
              b.hoisted.push_back(p);
          dep[n.out] = 1;
          continue;
        }
      }
      bool d = false;
      for (ValueId in : n.inputs) d = d || dep[in] || dep[g.values[in].root];
      if (d) {
        if (n.out != kNoValue) dep[n.out] = 1;
        g.writes(n, w);
        for (ValueId r : w) dep[r] = 1;
      }
    }
    if (b.members.size() < 2) continue;
    for (int32_t m : b.members) taken[m] = 1;
    for (int32_t p : b.hoisted) taken[p] = 1;
    std::sort(b.hoisted.begin(), b.hoisted.end());
    batches.push_back(std::move(b));
  }
  if (batches.empty()) return;

  // Build each batch's nodes at the end of the list, then move them before the first member.
  std::vector<std::vector<int32_t>> before(nn);  // per position: indices of nodes to put first
  std::vector<char> drop(nn, 0);
  for (const Batch& b : batches) {
    const int32_t p0 = b.members.front();
    const ValueId rhs = g.nodes[p0].inputs[1];
    std::vector<ValueId> lefts;
    for (int32_t m : b.members) lefts.push_back(g.nodes[m].inputs[0]);
    for (int32_t p : b.hoisted) {
      before[p0].push_back(p);
      drop[p] = 1;  // moved, not removed: emitted from `before`
    }
    const size_t first_new = g.nodes.size();
    Attrs cat_attrs;
    cat_attrs.dim = 0;
    const ValueId joined = g.append(OpId::cat, lefts, cat_attrs);
    const ValueId product = g.append(OpId::mm, {joined, rhs});
    const int64_t cols = g.values[product].shape[1];
    int64_t row = 0;
    for (int32_t m : b.members) {
      const ValueId out = g.nodes[m].out;
      const int64_t rows = g.values[out].shape[0];
      Attrs s;
      s.dim = 0;
      s.start = row;
      s.end = row + rows;
      s.step = 1;
      const ValueId part = g.append(OpId::slice, {product}, s);
      // Views of the old result keep their place inside it: now inside the joined result.
      for (size_t v = 0; v < g.values.size(); ++v)
        if (static_cast<ValueId>(v) != out && g.values[v].root == out)
          g.values[v].offset += row * cols;
      g.replace_uses(out, part);
      drop[m] = 1;
      row += rows;
    }
    for (size_t k = first_new; k < g.nodes.size(); ++k)
      before[p0].push_back(static_cast<int32_t>(k));
  }
  std::vector<Node> order;
  order.reserve(g.nodes.size());
  for (size_t i = 0; i < nn; ++i) {
    for (int32_t k : before[i]) order.push_back(std::move(g.nodes[k]));
    if (!drop[i]) order.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(order);
  g.groups.clear();
  for (Node& node : g.nodes) node.group = -1;
  g.reindex();
}

}  // namespace ember::jit
