// A sum of products becomes one product over the joined inner dimension.
//
// sum_i A_i B_i (A_i [M, K_i], B_i [K_i, N]) is cat(A_i, 1) cat(B_i, 0): one GEMM with
// K = sum K_i instead of one GEMM per term and an addition of M x N results per term. Autograd
// makes such sums wherever one weight is used many times: an RNN's recurrent weight gets one
// product per time step (h_{t-1}^T dG_t), summed by the engine as the steps' gradients arrive.
// The terms may also be transposed products (permute(mm(A, B)) == mm(B^T, A^T)), as a Linear's
// weight gradient is; then the joined product computes the transposed form directly.
//
// The pattern: a tree of out-of-place adds, each inner result read once, whose leaves are mm
// results (or their [1, 0] permutes) read only by the tree. The product runs where the tree's
// root ran; nothing may write an operand between its term and the root. The sum's rounding
// changes (one accumulation over K instead of per-term rounding), so the result is the same
// sum to float precision, not the same bits.
#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "jit/passes.h"

namespace ember::jit {
namespace {

struct Term {
  ValueId a = kNoValue, b = kNoValue;  // the term is a b
  int32_t node = -1;                   // the product node
};

bool is_sum(const Node& n) {
  return n.op == OpId::add && !n.inplace && n.out != kNoValue && n.inputs.size() == 2;
}

bool is_transpose_node(const Node& n) {
  return n.op == OpId::permute && !n.inplace && n.attrs.dims == Dims{1, 0};
}

}  // namespace

void sum_products(Graph& g) {
  const size_t nn = g.nodes.size(), nv = g.values.size();
  std::vector<std::vector<int32_t>> writes_of(nv);
  std::vector<int32_t> readers(nv, 0);  // nodes reading each value (by name)
  std::vector<ValueId> w;
  for (size_t i = 0; i < nn; ++i) {
    g.writes(g.nodes[i], w);
    for (ValueId r : w) writes_of[r].push_back(static_cast<int32_t>(i));
    for (ValueId in : g.nodes[i].inputs) ++readers[in];
  }
  std::vector<char> named(nv, 0);
  for (ValueId o : g.outputs) named[o] = named[g.values[o].root] = 1;
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) named[e.value] = named[g.values[e.value].root] = 1;
  // Values read by name only: no view of them exists besides the ones we look through.
  std::vector<int32_t> aliases(nv, 0);
  for (size_t v = 0; v < nv; ++v)
    if (g.values[v].root != static_cast<ValueId>(v)) ++aliases[g.values[v].root];

  // The term behind leaf value v: a product read once, or the transpose of one.
  auto term_of = [&](ValueId v, bool& transposed, Term& t) {
    if (named[v] || readers[v] != 1) return false;
    int32_t p = g.values[v].producer;
    if (p < 0) return false;
    transposed = false;
    if (is_transpose_node(g.nodes[p])) {
      const ValueId m = g.nodes[p].inputs[0];
      if (named[m] || readers[m] != 1 || aliases[m] != 1) return false;
      transposed = true;
      p = g.values[m].producer;
      if (p < 0) return false;
    } else if (aliases[v] != 0) {
      return false;
    }
    const Node& mm = g.nodes[p];
    if (mm.op != OpId::mm || mm.inplace || mm.inputs.size() != 2 || !writes_of[mm.out].empty())
      return false;
    t.a = mm.inputs[0];
    t.b = mm.inputs[1];
    t.node = p;
    return true;
  };

  std::vector<char> inner(nn, 0);
  std::vector<std::pair<int32_t, std::vector<Node>>> inserts;  // nodes to put before a root
  bool any = false;
  for (size_t ri = nn; ri-- > 0;) {
    if (inner[ri] || !is_sum(g.nodes[ri])) continue;
    // Leaves of the tree under the root, and its inner adds.
    std::vector<ValueId> leaves;
    std::vector<int32_t> adds;
    bool ok = true;
    std::vector<int32_t> stack{static_cast<int32_t>(ri)};
    while (!stack.empty() && ok) {
      const int32_t k = stack.back();
      stack.pop_back();
      adds.push_back(k);
      for (ValueId in : g.nodes[k].inputs) {
        const int32_t p = g.values[in].producer;
        if (p >= 0 && is_sum(g.nodes[p]) && !named[in] && readers[in] == 1 && aliases[in] == 0)
          stack.push_back(p);
        else
          leaves.push_back(in);
      }
    }
    if (leaves.size() < 2) continue;
    std::vector<Term> terms;
    bool transposed = false;
    for (size_t i = 0; i < leaves.size() && ok; ++i) {
      bool tr = false;
      Term t;
      ok = term_of(leaves[i], tr, t);
      if (i == 0) transposed = tr;
      ok = ok && tr == transposed;
      if (ok) terms.push_back(t);
    }
    if (!ok) continue;
    const Value& out = g.values[g.nodes[ri].out];
    if (out.strides != contiguous_strides(out.shape) || out.offset != 0) continue;
    std::sort(terms.begin(), terms.end(), [](const Term& x, const Term& y) { return x.node < y.node; });
    for (const Term& t : terms) {
      const Value &av = g.values[t.a], &bv = g.values[t.b];
      ok = ok && av.dtype == out.dtype && bv.dtype == out.dtype && av.device == out.device;
      for (ValueId op : {t.a, t.b})
        for (int32_t k : writes_of[g.values[op].root])
          ok = ok && !(k > t.node && k < static_cast<int32_t>(ri));
    }
    if (!ok) continue;

    // The joined operands, built at the end of the node list and moved before the root.
    const size_t first_new = g.nodes.size();
    auto transpose = [&](ValueId v) {  // v^T: the source of a transpose, else a new permute
      const int32_t p = g.values[v].producer;
      if (p >= 0 && is_transpose_node(g.nodes[p])) return g.nodes[p].inputs[0];
      Attrs t;
      t.dims = Dims{1, 0};
      return g.append(OpId::permute, {v}, t);
    };
    // cat along dim 1 of matrices; of transposes, the transpose of the cat of their sources.
    auto join_columns = [&](const std::vector<ValueId>& vs) {
      std::vector<ValueId> src;
      for (ValueId v : vs) {
        const int32_t p = g.values[v].producer;
        if (p < 0 || !is_transpose_node(g.nodes[p])) break;
        src.push_back(g.nodes[p].inputs[0]);
      }
      Attrs c;
      if (src.size() == vs.size()) {
        c.dim = 0;
        return transpose(g.append(OpId::cat, src, c));
      }
      c.dim = 1;
      return g.append(OpId::cat, vs, c);
    };
    std::vector<ValueId> lefts, rights;  // sum_i lefts[i] rights[i] is the root's value
    for (const Term& t : terms) {
      if (transposed) {  // (a b)^T = b^T a^T
        lefts.push_back(transpose(t.b));
        rights.push_back(transpose(t.a));
      } else {
        lefts.push_back(t.a);
        rights.push_back(t.b);
      }
    }
    const ValueId left = join_columns(lefts);
    Attrs r;
    r.dim = 0;
    const ValueId right = g.append(OpId::cat, rights, r);
    const ValueId product = g.append(OpId::mm, {left, right});
    if (g.values[product].shape != out.shape) {  // cannot happen for a well-typed sum
      g.nodes.resize(first_new);
      continue;
    }
    std::vector<Node> made;
    for (size_t k = first_new; k < g.nodes.size(); ++k) made.push_back(std::move(g.nodes[k]));
    g.nodes.resize(first_new);
    // The root add becomes the product's result: the last made node writes the root's value.
    made.back().out = g.nodes[ri].out;
    g.nodes[ri] = std::move(made.back());
    made.pop_back();
    inserts.emplace_back(static_cast<int32_t>(ri), std::move(made));
    for (int32_t k : adds) inner[k] = 1;
    any = true;
  }
  if (!any) return;
  std::sort(inserts.begin(), inserts.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<Node> order;
  order.reserve(nn);
  size_t k = 0;
  for (size_t i = 0; i < nn; ++i) {
    for (; k < inserts.size() && inserts[k].first == static_cast<int32_t>(i); ++k)
      for (Node& n : inserts[k].second) order.push_back(std::move(n));
    order.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(order);
  g.groups.clear();
  for (Node& node : g.nodes) node.group = -1;
  g.reindex();
}

}  // namespace ember::jit
