// The fusion pass's rewrite rules (jit/passes/fusion.h): patterns that the generic growth in
// node order (jit/passes/fuse.cpp) would not find or would find worse. Each rule seeds or
// reshapes candidates; the lowering is still asked about every one before it becomes a group.
#include <algorithm>
#include <optional>
#include <vector>

#include "jit/lower.h"
#include "jit/lower_util.h"
#include "jit/passes/fusion.h"
#include "jit/reduction_codegen.h"

namespace ember::jit::fusion {
namespace {

bool same_loss_attrs(const Attrs& a, const Attrs& b) {
  return a.ignore_index == b.ignore_index && a.label_smoothing == b.label_smoothing &&
         a.reduction == b.reduction;
}

// Moves the nodes between a cross_entropy `c` and its backward `b` that depend on c's output
// to just after b, when nothing else between (b included) needs them and no write between
// touches what they read. Returns whether the graph changed.
bool sink_after_backward(Graph& g, int32_t c, int32_t b) {
  std::vector<ValueId> tainted{g.nodes[c].out};  // roots derived from c's output
  std::vector<ValueId> w, sunk_reads;
  std::vector<int32_t> sunk;
  auto reads_tainted = [&](const Node& n) {
    for (ValueId in : n.inputs)
      if (contains(tainted, g.values[in].root)) return true;
    return false;
  };
  for (int32_t k = c + 1; k < b; ++k) {
    const Node& n = g.nodes[k];
    g.writes(n, w);
    for (ValueId r : w)
      if (contains(tainted, r)) return false;  // a write into derived memory stays in place
    if (!reads_tainted(n)) continue;
    if (!w.empty() || n.out == kNoValue) return false;  // effects keep their position
    sunk.push_back(k);
    tainted.push_back(g.values[n.out].root);
    for (ValueId in : n.inputs) sunk_reads.push_back(g.values[in].root);
  }
  if (sunk.empty() || reads_tainted(g.nodes[b])) return false;
  for (int32_t k = c + 1; k <= b; ++k) {
    if (contains(sunk, k)) continue;
    g.writes(g.nodes[k], w);
    for (ValueId r : w)
      if (contains(sunk_reads, r)) return false;
  }
  std::vector<Node> order;
  order.reserve(g.nodes.size());
  for (int32_t k = 0; k <= c; ++k) order.push_back(std::move(g.nodes[k]));
  for (int32_t k = c + 1; k <= b; ++k)
    if (!contains(sunk, k)) order.push_back(std::move(g.nodes[k]));
  for (int32_t k : sunk) order.push_back(std::move(g.nodes[k]));
  for (size_t k = b + 1; k < g.nodes.size(); ++k) order.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(order);
  g.reindex();
  return true;
}

// The cross_entropy node before `b` (a cross_entropy_backward) over the same logits and target
// with the same loss attributes, or -1.
int32_t forward_of(const Graph& g, int32_t b) {
  const Node& nb = g.nodes[b];
  for (int32_t k = b - 1; k >= 0; --k) {
    const Node& n = g.nodes[k];
    if (n.op == OpId::cross_entropy && !n.inplace && n.inputs.size() == 2 &&
        nb.inputs.size() == 3 && n.inputs[0] == nb.inputs[1] && n.inputs[1] == nb.inputs[2] &&
        same_loss_attrs(n.attrs, nb.attrs))
      return k;
  }
  return -1;
}

}  // namespace

// Pairs every cross_entropy_backward with its forward, moving the loss reduction out of the
// way first. Node indices change with each move, so pairs are found by rescanning.
void Fuser::sink_loss_consumers() {
  std::vector<ValueId> done;  // backward outputs already handled (stable across moves)
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t b = 0; b < g_.nodes.size() && !moved; ++b) {
      const Node& n = g_.nodes[b];
      if (n.op != OpId::cross_entropy_backward || n.inplace || contains(done, n.out)) continue;
      done.push_back(n.out);
      const int32_t c = forward_of(g_, static_cast<int32_t>(b));
      if (c >= 0) moved = sink_after_backward(g_, c, static_cast<int32_t>(b));
    }
  }
}

void Fuser::pair_cross_entropy() {
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const auto b = static_cast<int32_t>(i);
    const Node& n = g_.nodes[b];
    if (n.op != OpId::cross_entropy_backward || n.inplace || n.out == kNoValue) continue;
    const int32_t c = forward_of(g_, b);
    if (c < 0 || member_[c] >= 0) continue;
    const int32_t ci = open(GroupKind::CrossEntropy, c);
    if (can_add(ci, b)) {
      add(ci, b);
      cands_[ci].closed = true;
    } else {
      member_[c] = -1;
      cands_.pop_back();
    }
  }
}

// A sum over leading dims of a contiguous CUDA value that no pointwise chain produced (the
// bias gradient of a layer whose incoming gradient a GEMM or the cross entropy wrote) becomes
// a Reduction group of its own: the generated kernel finishes a split sum in the same launch
// (the last block to finish folds the partials), where eager's launches a second kernel for
// them, and in this columns layout it sums in eager's order exactly (fused_reduce.cuh), so the
// bits stay eager's. Sums over the last dim are left to eager: the generated rows layout
// associates differently. The split's partial states take no memory of their own: they live in
// the group's workspace, bytes of the arena that are dead while it runs.
bool Fuser::lone_column_sum(const Node& n) const {
  if (n.op != OpId::sum) return false;
  const Value& in = g_.values[n.inputs[0]];
  const int64_t nd = static_cast<int64_t>(in.shape.size());
  if (!in.device.is_cuda() || nd < 2 || in.shape.back() < 2 || n.attrs.dims.empty() ||
      g_.is_view(n.inputs[0]) || in.producer < 0 || in.strides != contiguous_strides(in.shape))
    return false;
  for (int64_t d : n.attrs.dims)
    if (d == nd - 1 || d == -1) return false;
  return true;
}

// A small-K product (a 10-class layer's input gradient, dO [M,10] x W2 [10,N]) whose result
// only one CUDA Reduction candidate reads joins it: the generated kernel computes each element
// where it is used, in the eager SmallK kernels' order (jit/reduction_codegen.h), so the
// [M,N] result is never written and read back, and the product is no launch of its own. Only
// where running the product at the group's position changes nothing: no node in between
// writes its operands. (The CPU runs groups chunked, without products.)
void Fuser::absorb_small_k_products() {
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const auto p = static_cast<int32_t>(i);
    const Node& n = g_.nodes[p];
    if (n.op != OpId::mm || !small_k_product_problem(g_, n).empty()) continue;
    const ValueId v = n.out;
    const Value& out = g_.values[v];
    const Value& a = g_.values[n.inputs[0]];
    const Value& b = g_.values[n.inputs[1]];
    if (returned_[v] || g_.values[v].root != v || root_readers_[v].empty()) continue;
    // Its own candidate, if any, must be an epilogue of nothing but it.
    const int32_t own = member_[p];
    if (own >= 0 && !(cands_[own].kind == GroupKind::GemmEpilogue && cands_[own].nodes.size() == 1))
      continue;
    const int32_t ci = member_[root_readers_[v].front()];
    if (ci < 0 || ci == own) continue;
    Candidate& c = cands_[ci];
    if (c.kind != GroupKind::Reduction || c.shape != out.shape || c.device != out.device) continue;
    bool ok = true;
    for (int32_t r : root_readers_[v]) ok = ok && member_[r] == ci;
    for (size_t k = 0; k < writes_.size() && ok; ++k) ok = !contains(writes_[k], v);
    const ValueId ra = a.root, rb = b.root;
    for (int32_t k = p + 1; k <= c.nodes.back() && ok; ++k)
      ok = !contains(writes_[k], ra) && !contains(writes_[k], rb);
    for (int32_t m : c.nodes)
      ok = ok && g_.nodes[m].out != n.inputs[0] && g_.nodes[m].out != n.inputs[1];
    if (!ok) continue;
    if (own >= 0) {
      cands_[own].nodes.clear();  // dropped by finish()
      cands_[own].kind = GroupKind::Pointwise;
    }
    c.nodes.insert(std::lower_bound(c.nodes.begin(), c.nodes.end(), p), p);
    member_[p] = ci;
  }
}

// A small-K product closing into a reduction is computed inside the reduction's kernel where
// each element is used (jit/reduction_codegen.h): no GEMM launch, no stored product. Tried
// before the candidate is asked as a contraction.
bool Fuser::product_inside_reduction(int32_t ci, Group& out) {
  Candidate& c = cands_[ci];
  if (c.kind != GroupKind::GemmEpilogue || !ends_in_reduction(c) ||
      !small_k_product_problem(g_, g_.nodes[c.nodes.front()]).empty())
    return false;
  c.kind = GroupKind::Reduction;
  Group grp = group_of(ci);
  if (lowering_accepts(g_, grp, &grp.stored)) {
    out = std::move(grp);
    return true;
  }
  c.kind = GroupKind::GemmEpilogue;
  return false;
}

// A pointwise candidate over a reduction's shape that reads a value the reduction's members
// read joins the reduction (a norm's backward: dy * gamma beside sum(dy * xhat)): the shared
// value is read once, and the sibling is no launch of its own. Only a sibling that ends before
// the reduction (the merged group runs at the reduction, its last member) and only where moving
// it there is legal (can_merge). The reduction's order is untouched, so its bits are eager's.
void Fuser::merge_reduction_siblings() {
  for (size_t ri = 0; ri < cands_.size(); ++ri) {
    const Candidate& r = cands_[ri];
    // A lone sum reads a group input; with a sibling it would no longer reduce a member.
    if (r.kind != GroupKind::Reduction || !r.closed || r.nodes.size() < 2) continue;
    std::vector<ValueId> reads;
    for (int32_t m : r.nodes)
      for (ValueId in : g_.nodes[m].inputs) reads.push_back(g_.values[in].root);
    for (size_t pi = 0; pi < cands_.size(); ++pi) {
      const Candidate& p = cands_[pi];
      if (pi == ri || p.kind != GroupKind::Pointwise || p.nodes.empty()) continue;
      bool shares = false;
      for (int32_t m : p.nodes)
        for (ValueId in : g_.nodes[m].inputs)
          shares = shares || contains(reads, g_.values[in].root);
      if (shares && can_merge(static_cast<int32_t>(ri), static_cast<int32_t>(pi)))
        merge(static_cast<int32_t>(ri), static_cast<int32_t>(pi));
    }
  }
}

// The pieces a cat joins (the gradients of a tensor's slices, jit/passes/slice_sums.cpp) are
// often separate pointwise chains of one shape computed side by side: one kernel computes them
// all instead of one per chain. Merged into the chain that ran last (a group runs at its last
// member), when moving the others there is legal.
void Fuser::merge_cat_producers(int32_t i) {
  std::vector<int32_t> chains;
  for (ValueId in : g_.nodes[i].inputs) {
    const int32_t ci = cand_of_value(in);
    if (ci >= 0 && cands_[ci].kind == GroupKind::Pointwise && !cands_[ci].closed &&
        !cands_[ci].nodes.empty() && !contains(chains, ci))
      chains.push_back(ci);
  }
  if (chains.empty()) {  // every piece from one candidate already closed by a cat over them
    if (!g_.nodes[i].inputs.empty()) {
      const int32_t owner = cand_of_value(g_.nodes[i].inputs[0]);
      if (owner >= 0) absorb_cat(owner, i);
    }
    return;
  }
  const int32_t last = *std::max_element(chains.begin(), chains.end(), [&](int32_t a, int32_t b) {
    return cands_[a].nodes.back() < cands_[b].nodes.back();
  });
  for (int32_t cj : chains)
    if (cj != last && can_merge(last, cj)) merge(last, cj);
  absorb_cat(last, i);
}

// On a GPU, a cat whose every piece is a result of candidate `ci` that nothing else reads ends
// the candidate: its kernel stores each piece straight into its place in the cat's result
// (jit/pointwise_codegen.h), and the cat's own copy kernel is gone (an LSTM backward step's gate
// gradients, cut into the four gates and joined for the recurrent product). The candidate is
// closed (the cat must stay its last member); a lowering that refuses it gets it back without
// the cat (settle).
void Fuser::absorb_cat(int32_t ci, int32_t i) {
  Candidate& c = cands_[ci];
  const Node& cat = g_.nodes[i];
  // Closed only by the cats it already took: it may take another over the same pieces.
  const bool ends_in_cat = !c.nodes.empty() && g_.nodes[c.nodes.back()].op == OpId::cat;
  if (c.kind != GroupKind::Pointwise || (c.closed && !ends_in_cat) || c.nodes.empty() ||
      !c.device.is_cuda() || cat.inplace || cat.out == kNoValue)
    return;
  std::vector<ValueId> seen;
  for (ValueId in : cat.inputs) {
    if (cand_of_value(in) != ci || contains(seen, in) || returned_[in]) return;
    if (g_.values[in].shape != c.shape || g_.values[in].dtype != g_.values[cat.out].dtype) return;
    // Read by the candidate's members and cats alone: the piece need not exist in memory (a cat
    // that is not taken in the end makes the piece a group output, which the lowering refuses;
    // settle then gives the cats back).
    // A view of the piece reads its memory too, so it is one of these readers.
    for (int32_t r : root_readers_[in])
      if (r != i && member_[r] != ci && g_.nodes[r].op != OpId::cat) return;
    seen.push_back(in);
  }
  if (!can_add(ci, i)) return;
  add(ci, i);
  cands_[ci].closed = true;
}

// A contraction's tail that its GEMM call does not fold (anything past a row bias and relu) runs
// as a generated kernel of its own after the GEMM. When a pointwise chain of the same shape reads
// that tail, the tail can run inside the chain's kernel instead, reading the product where the
// GEMM left it: one launch and one round trip of the tail's results fewer (an LSTM's backward
// step: the hidden state's gradient, a product plus the incoming gradient, feeds the gate
// arithmetic). The tail leaves the contraction as a Pointwise candidate; the caller merges it
// into the chain or back into the contraction. Returns that candidate, or -1 when there is none.
int32_t Fuser::detach_gemm_tail(int32_t cj) {
  const Candidate& c = cands_[cj];
  if (c.kind != GroupKind::GemmEpilogue || c.closed || c.nodes.size() < 2) return -1;
  const std::optional<Group> tail = gemm_tail_group(g_, group_of(cj));
  if (!tail || tail->kind != GroupKind::Pointwise || tail->nodes.empty()) return -1;
  for (int32_t m : tail->nodes)
    if (member_[m] != cj || !is_pointwise_node(g_.nodes[m])) return -1;
  const int32_t t = open(GroupKind::Pointwise, tail->nodes.front());
  for (size_t k = 1; k < tail->nodes.size(); ++k) add(t, tail->nodes[k]);
  Candidate& rest = cands_[cj];  // open() may have moved the vector
  rest.nodes.erase(std::remove_if(rest.nodes.begin(), rest.nodes.end(),
                                  [&](int32_t m) { return member_[m] == t; }),
                   rest.nodes.end());
  return t;
}

}  // namespace ember::jit::fusion

namespace ember::jit::fusion {
namespace {

// A cast the multi-tensor kernel can run: dense floating tensors on a GPU.
bool is_gpu_cast(const Graph& g, const Node& n) {
  if (n.op != OpId::cast || n.inplace || n.out == kNoValue || n.inputs.size() != 1) return false;
  const Value &in = g.values[n.inputs[0]], &out = g.values[n.out];
  return out.device.is_cuda() && in.device == out.device && is_floating(in.dtype) &&
         is_floating(out.dtype) && lower_util::dense(in) && lower_util::dense(out);
}

}  // namespace

// A cast reading a leaf (state, an input, a constant) moves up to just after the first such
// cast when nothing between writes the leaf: an autocast step casts each weight where a layer
// first uses it, so its casts lie between the layers' work and no group could run them together
// (a group runs at its last member, after the first layer has already read its cast). The casts
// are pure, so the move changes nothing else.
void Fuser::hoist_casts_of_leaves() {
  std::vector<int32_t> casts;
  for (size_t k = 0; k < g_.nodes.size(); ++k) {
    const Node& n = g_.nodes[k];
    if (is_gpu_cast(g_, n) && g_.values[g_.values[n.inputs[0]].root].kind != ValueKind::Node)
      casts.push_back(static_cast<int32_t>(k));
  }
  if (casts.size() < 2) return;
  std::vector<ValueId> w;
  std::vector<int32_t> hoisted{casts[0]};
  for (size_t c = 1; c < casts.size(); ++c) {
    const ValueId in = g_.nodes[casts[c]].inputs[0];
    const ValueId leaf = g_.values[in].root;
    // A view of the leaf made after the first cast (its node runs there) keeps the cast after it.
    bool written = g_.values[in].producer >= casts[0];
    for (int32_t k = casts[0] + 1; k < casts[c] && !written; ++k) {
      g_.writes(g_.nodes[k], w);
      written = contains(w, leaf);
    }
    if (!written) hoisted.push_back(casts[c]);
  }
  if (hoisted.size() < 2) return;
  std::vector<Node> order;
  order.reserve(g_.nodes.size());
  for (int32_t k = 0; k <= casts[0]; ++k) order.push_back(std::move(g_.nodes[k]));
  for (size_t c = 1; c < hoisted.size(); ++c) order.push_back(std::move(g_.nodes[hoisted[c]]));
  for (size_t k = casts[0] + 1; k < g_.nodes.size(); ++k)
    if (!contains(hoisted, static_cast<int32_t>(k))) order.push_back(std::move(g_.nodes[k]));
  g_.nodes = std::move(order);
  g_.reindex();
}

// Casts on a GPU that no group took (alone in their candidate) join a Casts candidate: the first
// open one on their device they may join (can_add: moving the earlier members to this cast's
// position changes nothing), else a new one. The lowering is asked as for any group; a cluster
// of one dissolves.
void Fuser::gather_casts() {
  std::vector<int32_t> open_casts;
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const auto k = static_cast<int32_t>(i);
    if (!is_gpu_cast(g_, g_.nodes[k])) continue;
    if (member_[k] >= 0) {
      Candidate& own = cands_[member_[k]];
      if (own.kind != GroupKind::Pointwise || own.nodes.size() != 1) continue;
      own.nodes.clear();  // a pointwise group of one cast: dissolved anyway
      member_[k] = -1;
    }
    const Device dev = g_.values[g_.nodes[k].out].device;
    bool placed = false;
    for (int32_t ci : open_casts)
      if (cands_[ci].device == dev && can_add(ci, k)) {
        add(ci, k);
        placed = true;
        break;
      }
    if (!placed) open_casts.push_back(open(GroupKind::Casts, k));
  }
}

}  // namespace ember::jit::fusion
