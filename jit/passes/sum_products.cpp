// A sum of products becomes one product over the joined inner dimension, and a sum of row sums
// one row sum over the joined rows.
//
// sum_i A_i B_i (A_i [M, K_i], B_i [K_i, N]) is cat(A_i, 1) cat(B_i, 0): one GEMM with
// K = sum K_i instead of one GEMM per term and an addition of M x N results per term. Autograd
// makes such sums wherever one weight is used many times: an RNN's recurrent weight gets one
// product per time step (h_{t-1}^T dG_t), summed by the engine as the steps' gradients arrive.
// The terms may also be transposed products (permute(mm(A, B)) == mm(B^T, A^T)), as a Linear's
// weight gradient is; then the joined product computes the transposed form directly. Likewise
// sum_i sum(X_i, dim 0) is sum(cat(X_i, 0), dim 0): the same weight's bias, one column sum over
// every step. The cats are shared: the bias and the weight of one layer join the same
// gradients, in the same order.
//
// The pattern: a tree of out-of-place adds, each inner result read once, whose leaves are all
// mm results (or all their [1, 0] permutes), or all sums over dim 0 (or all views of them), read
// only by the tree. The joined form runs where the tree's root ran; nothing may write an operand
// between its term and the root. The rounding changes (one accumulation instead of per-term
// roundings): the same sum to float precision, not the same bits.
#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "jit/passes.h"

namespace ember::jit {
namespace {

struct Term {
  ValueId a = kNoValue, b = kNoValue;  // a product term is a b; a row-sum term sums a's rows
  int32_t node = -1;                   // the product or reduction node
};
enum class Kind { Product, Transposed, RowSum };

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
  const std::vector<char> named = g.named_after_replay();
  const std::vector<int32_t> aliases = g.live_view_counts();
  // Read once, by name, and not seen through another view: the tree may consume it.
  auto private_value = [&](ValueId v, int32_t views) {
    return !named[v] && readers[v] == 1 && aliases[v] == views;
  };

  // The term behind leaf value v, and its kind.
  auto term_of = [&](ValueId v, Kind& kind, Term& t) {
    int32_t p = g.values[v].producer;
    if (p < 0 || named[v] || readers[v] != 1) return false;
    const Node* n = &g.nodes[p];
    kind = Kind::Product;
    if (is_transpose_node(*n) || (n->op == OpId::view && !n->inplace)) {
      const ValueId m = n->inputs[0];
      if (!private_value(m, 1)) return false;
      kind = n->op == OpId::view ? Kind::RowSum : Kind::Transposed;
      p = g.values[m].producer;
      if (p < 0) return false;
      n = &g.nodes[p];
    } else if (aliases[v] != 0) {
      return false;
    }
    if (n->inplace || !writes_of[n->out].empty()) return false;
    if (n->op == OpId::mm && n->inputs.size() == 2 && kind != Kind::RowSum) {
      t.a = n->inputs[0];
      t.b = n->inputs[1];
    } else if (n->op == OpId::sum && n->attrs.dims == Dims{0} && n->inputs.size() == 1 &&
               g.values[n->inputs[0]].shape.size() >= 1 &&
               g.values[n->inputs[0]].dtype == g.values[n->out].dtype) {
      if (kind == Kind::Transposed) return false;
      kind = Kind::RowSum;
      t.a = n->inputs[0];
    } else {
      return false;
    }
    t.node = p;
    return true;
  };

  // Tree roots: adds whose result is not itself taken by a larger tree.
  auto inner_add = [&](ValueId v) {
    const int32_t p = g.values[v].producer;
    return p >= 0 && is_sum(g.nodes[p]) && private_value(v, 0);
  };
  std::vector<char> is_inner(nn, 0);
  for (size_t i = 0; i < nn; ++i)
    if (is_sum(g.nodes[i]))
      for (ValueId in : g.nodes[i].inputs)
        if (inner_add(in)) is_inner[g.values[in].producer] = 1;

  // Cats made here, by (dim, parts), with the root they were placed before (reused only later).
  struct Made {
    int dim;
    std::vector<ValueId> parts;
    ValueId value;
    int32_t root;  // placed before this node
  };
  std::vector<Made> made_cats;
  std::vector<std::pair<int32_t, std::vector<Node>>> inserts;  // nodes to put before a root
  bool any = false;
  for (size_t ri = 0; ri < nn; ++ri) {
    if (is_inner[ri] || !is_sum(g.nodes[ri])) continue;
    std::vector<ValueId> leaves;
    std::vector<int32_t> stack{static_cast<int32_t>(ri)};
    while (!stack.empty()) {
      const int32_t k = stack.back();
      stack.pop_back();
      for (ValueId in : g.nodes[k].inputs) {
        if (inner_add(in))
          stack.push_back(g.values[in].producer);
        else
          leaves.push_back(in);
      }
    }
    if (leaves.size() < 2) continue;
    std::vector<Term> terms;
    Kind kind = Kind::Product;
    bool ok = true;
    for (size_t i = 0; i < leaves.size() && ok; ++i) {
      Kind k = Kind::Product;
      Term t;
      ok = term_of(leaves[i], k, t);
      if (i == 0) kind = k;
      ok = ok && k == kind;
      if (ok) terms.push_back(t);
    }
    if (!ok) continue;
    const Value out = g.values[g.nodes[ri].out];  // a copy: appends below grow g.values
    if (out.strides != contiguous_strides(out.shape) || out.offset != 0) continue;
    std::sort(terms.begin(), terms.end(),
              [](const Term& x, const Term& y) { return x.node < y.node; });
    const Value a0 = g.values[terms[0].a];
    for (const Term& t : terms) {
      const Value& av = g.values[t.a];
      ok = ok && av.dtype == out.dtype && av.device == out.device;
      if (kind == Kind::RowSum) {
        ok = ok && av.shape.size() == a0.shape.size();
        for (int d = 1; d < a0.shape.size() && ok; ++d) ok = av.shape[d] == a0.shape[d];
      } else {
        ok = ok && g.values[t.b].dtype == out.dtype;
      }
      for (ValueId op : {t.a, t.b})
        if (op != kNoValue)
          for (int32_t k : writes_of[g.values[op].root])
            ok = ok && !(k > t.node && k < static_cast<int32_t>(ri));
    }
    if (!ok) continue;

    // The joined form, built at the end of the node list and moved before the root.
    const size_t first_new = g.nodes.size();
    // The transpose node producing v, or null (values made in an earlier round name nodes that
    // have moved out of the list: their producer index is stale).
    auto transpose_of = [&](ValueId v) -> const Node* {
      const int32_t p = g.values[v].producer;
      if (p < 0 || static_cast<size_t>(p) >= g.nodes.size() || g.nodes[p].out != v) return nullptr;
      return is_transpose_node(g.nodes[p]) ? &g.nodes[p] : nullptr;
    };
    auto transpose = [&](ValueId v) {  // v^T: the source of a transpose, else a new permute
      if (const Node* t = transpose_of(v)) return t->inputs[0];
      Attrs t;
      t.dims = Dims{1, 0};
      return g.append(OpId::permute, {v}, t);
    };
    auto cat = [&](const std::vector<ValueId>& parts, int dim) {
      for (const Made& m : made_cats) {
        if (m.dim != dim || m.parts != parts) continue;
        bool same = true;  // the parts hold what they held where that cat read them
        for (ValueId v : parts)
          for (int32_t k : writes_of[g.values[v].root])
            same = same && !(k > m.root && k < static_cast<int32_t>(ri));
        if (same) return m.value;
      }
      Attrs c;
      c.dim = dim;
      const ValueId v = g.append(OpId::cat, parts, c);
      made_cats.push_back({dim, parts, v, static_cast<int32_t>(ri)});
      return v;
    };
    // cat along dim 1 of matrices; of transposes, the transpose of the cat of their sources.
    auto join_columns = [&](const std::vector<ValueId>& vs) {
      std::vector<ValueId> src;
      for (ValueId v : vs) {
        const Node* t = transpose_of(v);
        if (!t) break;
        src.push_back(t->inputs[0]);
      }
      return src.size() == vs.size() ? transpose(cat(src, 0)) : cat(vs, 1);
    };
    ValueId result = kNoValue;
    if (kind == Kind::RowSum) {
      std::vector<ValueId> parts;
      for (const Term& t : terms) parts.push_back(t.a);
      Attrs r;
      r.dims = Dims{0};
      r.keepdim = out.shape.size() == a0.shape.size();
      result = g.append(OpId::sum, {cat(parts, 0)}, r);
    } else {
      std::vector<ValueId> lefts, rights;  // sum_i lefts[i] rights[i] is the root's value
      for (const Term& t : terms) {
        if (kind == Kind::Transposed) {  // (a b)^T = b^T a^T
          lefts.push_back(transpose(t.b));
          rights.push_back(transpose(t.a));
        } else {
          lefts.push_back(t.a);
          rights.push_back(t.b);
        }
      }
      const ValueId left = join_columns(lefts);
      result = g.append(OpId::mm, {left, cat(rights, 0)});
    }
    if (g.values[result].shape != out.shape || g.values[result].dtype != out.dtype) {
      g.nodes.resize(first_new);  // a view the joined form does not give: leave the tree
      made_cats.erase(
          std::remove_if(made_cats.begin(), made_cats.end(),
                         [&](const Made& m) { return m.root == static_cast<int32_t>(ri); }),
          made_cats.end());
      continue;
    }
    std::vector<Node> made;
    for (size_t k = first_new; k < g.nodes.size(); ++k) made.push_back(std::move(g.nodes[k]));
    g.nodes.resize(first_new);
    // The root add becomes the joined form's last node, writing the root's value.
    made.back().out = g.nodes[ri].out;
    g.nodes[ri] = std::move(made.back());
    made.pop_back();
    inserts.emplace_back(static_cast<int32_t>(ri), std::move(made));
    any = true;
  }
  if (!any) return;
  std::vector<Node> order;
  order.reserve(nn);
  size_t k = 0;  // inserts are in root order already
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
