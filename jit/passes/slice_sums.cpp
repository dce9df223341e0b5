// Sums of slice gradients become one concatenation.
//
// Autograd's slice backward is "zeros of the input's shape, the gradient copied into the slice";
// the engine then adds the results of every slice of the same tensor. A tensor cut into k parts
// (an LSTM's four gates, a sequence read step by step) so costs k full-size fills, k copies and
// k - 1 full-size additions, where one cat of the k gradients gives the same values: each
// element of the sum is one gradient plus zeros, and x + 0 == x exactly (a gradient of -0 stays
// -0 where the sum made it +0: equal values).
//
// The pattern, after the tracer: `z = fill(0)`, `cast_(src)` in place into a slice of z (a view
// whose layout is z's along every dim but one), z read by one add; adds that read only such
// pieces and each other's results, used once, form a tree. Its root becomes cat(srcs), with
// fills for the ranges no piece covers; the fills, copies and adds die (dce).
#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "jit/passes.h"

namespace ember::jit {
namespace {

struct Piece {
  ValueId src = kNoValue;
  int32_t dim = -1;
  int64_t start = 0, len = 0;
  int32_t writer = -1;  // node index of the copy
};

bool contiguous_root(const Value& v) {
  return v.offset == 0 && v.strides == contiguous_strides(v.shape);
}

}  // namespace

void assemble_slice_sums(Graph& g) {
  const size_t nv = g.values.size(), nn = g.nodes.size();
  std::vector<std::vector<int32_t>> writes_of(nv);  // per root: node indices writing it
  std::vector<std::vector<int32_t>> readers(nv);    // per root: node indices reading its memory
  std::vector<ValueId> w;
  for (size_t i = 0; i < nn; ++i) {
    g.writes(g.nodes[i], w);
    for (ValueId r : w) writes_of[r].push_back(static_cast<int32_t>(i));
    for (ValueId in : g.nodes[i].inputs)
      readers[g.values[in].root].push_back(static_cast<int32_t>(i));
  }
  const std::vector<char> named = g.named_after_replay();

  // piece_index[z]: for a zero fill z that qualifies, its piece.
  std::vector<int32_t> piece_index(nv, -1);
  std::vector<Piece> pieces;
  for (size_t i = 0; i < nn; ++i) {
    const Node& f = g.nodes[i];
    if (f.op != OpId::fill || f.inplace || f.out == kNoValue || !f.inputs.empty()) continue;
    if (f.attrs.value.to_double() != 0.0) continue;
    const ValueId z = f.out;
    const Value& zv = g.values[z];
    if (named[z] || !contiguous_root(zv) || zv.shape.size() == 0 || writes_of[z].size() != 1)
      continue;
    const int32_t wi = writes_of[z][0];
    const Node& c = g.nodes[wi];
    if (c.op != OpId::cast || !c.inplace || c.inputs.size() != 1) continue;
    const Value& dst = g.values[c.out];
    const ValueId src = c.inputs[0];
    const Value& sv = g.values[src];
    if (sv.dtype != zv.dtype || c.attrs.dtype != zv.dtype || sv.device != zv.device ||
        sv.shape != dst.shape || dst.shape.size() != zv.shape.size() || dst.strides != zv.strides)
      continue;
    int32_t dim = -1;
    bool ok = true;
    for (int d = 0; d < zv.shape.size() && ok; ++d)
      if (dst.shape[d] != zv.shape[d]) {
        ok = dim < 0;
        dim = d;
      }
    if (!ok) continue;
    if (dim < 0) dim = 0;  // the slice is the whole tensor
    if (zv.strides[dim] == 0 || dst.offset % zv.strides[dim] != 0) continue;
    Piece p;
    p.src = src;
    p.dim = dim;
    p.start = dst.offset / zv.strides[dim];
    p.len = dst.shape[dim];
    p.writer = wi;
    // The source must still hold what was copied when the sum reads it; checked per tree below
    // against the tree's root position. z itself must be read by exactly one node (the add).
    if (readers[z].size() != 1) continue;
    piece_index[z] = static_cast<int32_t>(pieces.size());
    pieces.push_back(p);
  }
  if (pieces.empty()) return;

  // Adds over pieces and over such adds, each result read once (by the parent add).
  std::vector<int32_t> producer_add(nv, -1);
  auto is_sum_node = [&](int32_t i) {
    const Node& n = g.nodes[i];
    return n.op == OpId::add && !n.inplace && n.out != kNoValue && n.inputs.size() == 2;
  };
  // Leaves of the tree under add node i (pieces), or false when anything else is in it.
  std::vector<int32_t> leaves;
  auto collect = [&](auto&& self, int32_t i) -> bool {
    for (ValueId in : g.nodes[i].inputs) {
      if (in == kNoValue || g.values[in].root != in) return false;
      if (piece_index[in] >= 0) {
        leaves.push_back(piece_index[in]);
        continue;
      }
      const int32_t p = g.values[in].producer;
      if (p < 0 || !is_sum_node(p) || named[in] || readers[in].size() != 1) return false;
      if (!self(self, p)) return false;
    }
    return true;
  };
  std::vector<char> consumed(nn, 0);  // adds inside a tree already rewritten
  bool any = false;
  std::vector<std::pair<int32_t, Node>> inserts;  // fills to place before node index
  for (size_t ri = nn; ri-- > 0;) {               // roots first: the last add of a tree comes last
    if (consumed[ri] || !is_sum_node(static_cast<int32_t>(ri))) continue;
    const ValueId out = g.nodes[ri].out;
    leaves.clear();
    if (!collect(collect, static_cast<int32_t>(ri)) || leaves.size() < 2) continue;
    const Value zshape = g.values[out];
    const Piece& first = pieces[leaves[0]];
    bool ok = contiguous_root(zshape);
    for (int32_t l : leaves) {
      const Piece& p = pieces[l];
      const Value& z = g.values[g.values[g.nodes[p.writer].out].root];
      ok = ok && p.dim == first.dim && z.shape == zshape.shape && z.dtype == zshape.dtype &&
           z.device == zshape.device;
      // nothing writes the source between its copy and the sum
      for (int32_t wr : writes_of[g.values[p.src].root])
        ok = ok && !(wr > p.writer && wr < static_cast<int32_t>(ri));
    }
    if (!ok) continue;
    std::vector<int32_t> order = leaves;
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return pieces[a].start < pieces[b].start; });
    for (size_t k = 1; k < order.size() && ok; ++k)
      ok = pieces[order[k - 1]].start + pieces[order[k - 1]].len <= pieces[order[k]].start;
    if (!ok) continue;  // overlapping slices really add
    // The cat, gaps filled with zeros.
    const int dim = first.dim;
    const int64_t extent = zshape.shape[dim];
    std::vector<ValueId> parts;
    int64_t at = 0;
    auto gap = [&](int64_t len) {
      Value v = zshape;
      v.shape[dim] = len;
      v.strides = contiguous_strides(v.shape);
      v.offset = 0;
      v.producer = -1;
      v.slot = -1;
      v.kind = ValueKind::Node;
      const ValueId id = g.add_value(v);
      g.values[id].root = id;
      Node fill;
      fill.op = OpId::fill;
      fill.attrs.value = Scalar(0.0);
      fill.out = id;
      inserts.emplace_back(static_cast<int32_t>(ri), std::move(fill));
      parts.push_back(id);
    };
    for (int32_t l : order) {
      if (pieces[l].start > at) gap(pieces[l].start - at);
      parts.push_back(pieces[l].src);
      at = pieces[l].start + pieces[l].len;
    }
    if (at < extent) gap(extent - at);
    {  // the tree's inner adds are not roots of another tree
      std::vector<int32_t> stack{static_cast<int32_t>(ri)};
      while (!stack.empty()) {
        const int32_t k = stack.back();
        stack.pop_back();
        consumed[k] = 1;
        for (ValueId in : g.nodes[k].inputs)
          if (piece_index[in] < 0 && g.values[in].producer >= 0)
            stack.push_back(g.values[in].producer);
      }
    }
    Node& root = g.nodes[ri];
    root.op = OpId::cat;
    root.attrs = Attrs{};
    root.attrs.dim = dim;
    root.inputs = std::move(parts);
    any = true;
  }
  if (!any) return;
  if (!inserts.empty()) {
    std::vector<Node> kept;
    kept.reserve(nn + inserts.size());
    std::sort(inserts.begin(), inserts.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t k = 0;
    for (size_t i = 0; i < nn; ++i) {
      for (; k < inserts.size() && inserts[k].first == static_cast<int32_t>(i); ++k)
        kept.push_back(std::move(inserts[k].second));
      kept.push_back(std::move(g.nodes[i]));
    }
    g.nodes = std::move(kept);
  }
  g.groups.clear();
  for (Node& node : g.nodes) node.group = -1;
  g.reindex();
}

}  // namespace ember::jit
