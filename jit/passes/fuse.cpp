// Fusion: groups of nodes the executor runs as one unit, at the position of the group's last
// member. Groups grow greedily in node order. A group is legal when moving its members to that
// position changes nothing: no non-member between its first and last member writes memory a
// member reads or produces, or reads a member's output (it would run before the group has).
//
// Fusion proposes, the lowering disposes: before a candidate becomes a group, the lowering of
// its device is asked whether it runs it fused (jit/lower.h, lowering_accepts). A refused
// contraction gives up its product (the tail is asked again as a group of its own), a refused
// reduction its closing reduction, anything else dissolves: its members run as themselves.
//
// The cross-entropy pair needs one reordering first: the loss reduction reads the forward's
// per-sample losses between the forward and its backward, so the nodes that depend on the
// forward's output (and nothing the backward needs) are moved after the backward when that is
// safe.
#include <algorithm>
#include <vector>

#include "jit/log.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "jit/reduction_codegen.h"

namespace ember::jit {
namespace {

bool is_pointwise_node(const Node& n) {
  const OpKind k = op_info(n.op).kind;
  return (k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Ternary) && !n.inplace &&
         n.out != kNoValue;
}

bool is_fusable_reduce(const Node& n) {
  return (n.op == OpId::sum || n.op == OpId::mean || n.op == OpId::amax || n.op == OpId::amin) &&
         !n.inplace && n.out != kNoValue;
}

bool same_loss_attrs(const Attrs& a, const Attrs& b) {
  return a.ignore_index == b.ignore_index && a.label_smoothing == b.label_smoothing &&
         a.reduction == b.reduction;
}

template <class V, class T>
bool contains(const V& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Values a caller holds after the replay (by name or through their memory).
std::vector<char> returned_values(const Graph& g) {
  std::vector<char> r(g.values.size(), 0);
  auto mark = [&](ValueId v) { r[v] = r[g.values[v].root] = 1; };
  for (ValueId o : g.outputs) mark(o);
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) mark(e.value);
  return r;
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

struct Candidate {
  GroupKind kind = GroupKind::Pointwise;
  std::vector<int32_t> nodes;  // ascending
  Shape shape;                 // output shape of the pointwise members
  Device device;
  bool closed = false;  // a reduction ends its group
};

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g) {}

  void run() {
    g_.groups.clear();
    for (Node& n : g_.nodes) n.group = -1;
    sink_loss_consumers();
    const size_t nn = g_.nodes.size();
    writes_.assign(nn, {});
    for (size_t i = 0; i < nn; ++i) g_.writes(g_.nodes[i], writes_[i]);
    member_.assign(nn, -1);
    returned_ = returned_values(g_);
    root_readers_.assign(g_.values.size(), {});
    for (size_t i = 0; i < nn; ++i)
      for (ValueId in : g_.nodes[i].inputs)
        root_readers_[g_.values[in].root].push_back(static_cast<int32_t>(i));

    pair_cross_entropy();
    for (size_t i = 0; i < nn; ++i) {
      const auto k = static_cast<int32_t>(i);
      if (member_[k] >= 0) continue;
      const Node& n = g_.nodes[k];
      if (op_info(n.op).kind == OpKind::Matmul && !n.inplace && n.out != kNoValue &&
          epilogue_capable(n.out))
        open(GroupKind::GemmEpilogue, k);
      else if (is_pointwise_node(n))
        place_pointwise(k);
      else if (is_fusable_reduce(n))
        place_reduction(k);
    }
    absorb_small_k_products();
    finish();
  }

 private:
  // Pairs every cross_entropy_backward with its forward, moving the loss reduction out of the
  // way first. Node indices change with each move, so pairs are found by rescanning.
  void sink_loss_consumers() {
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

  void pair_cross_entropy() {
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

  // A product whose memory nothing writes afterwards can take a tail: the tail reads it where
  // the GEMM left it (readers outside the group just make it a group output).
  bool epilogue_capable(ValueId out) const {
    for (size_t k = 0; k < writes_.size(); ++k)
      if (contains(writes_[k], out)) return false;
    return true;
  }

  int32_t open(GroupKind kind, int32_t node) {
    Candidate c;
    c.kind = kind;
    c.nodes = {node};
    const Value& v = g_.values[g_.nodes[node].out];
    c.shape = v.shape;
    c.device = v.device;
    cands_.push_back(std::move(c));
    const auto ci = static_cast<int32_t>(cands_.size() - 1);
    member_[node] = ci;
    return ci;
  }

  void add(int32_t ci, int32_t node) {
    cands_[ci].nodes.push_back(node);
    member_[node] = ci;
  }

  // The candidate producing `v` as a member output, or -1.
  int32_t cand_of_value(ValueId v) const {
    const int32_t p = g_.values[v].producer;
    if (p < 0 || g_.nodes[p].out != v || g_.is_view(v)) return -1;
    return member_[p];
  }

  // Whether node `i` (after every member) may join candidate `ci`; see the file comment.
  bool can_add(int32_t ci, int32_t i) const {
    const Candidate& c = cands_[ci];
    const int32_t f = c.nodes.front(), l = c.nodes.back();
    std::vector<ValueId> new_reads, reads, outs;
    for (ValueId in : g_.nodes[i].inputs) new_reads.push_back(g_.values[in].root);
    for (int32_t m : c.nodes) {
      outs.push_back(g_.nodes[m].out);
      for (ValueId in : g_.nodes[m].inputs) reads.push_back(g_.values[in].root);
    }
    // Non-members before l were checked against the older members when those joined.
    for (int32_t k = f + 1; k < i; ++k) {
      if (member_[k] == ci) continue;
      for (ValueId r : writes_[k])
        if (contains(new_reads, r)) return false;
      if (k <= l) continue;
      for (ValueId r : writes_[k])
        if (contains(reads, r) || contains(outs, r)) return false;
      for (ValueId in : g_.nodes[k].inputs)
        if (contains(outs, g_.values[in].root)) return false;
    }
    return true;
  }

  bool fits(const Candidate& c, const Value& out) const {
    return !c.closed && c.shape == out.shape && c.device == out.device &&
           (c.kind == GroupKind::Pointwise || c.kind == GroupKind::GemmEpilogue);
  }

  void place_pointwise(int32_t i) {
    const Node& n = g_.nodes[i];
    const Value& out = g_.values[n.out];
    std::vector<int32_t> options;
    for (ValueId in : n.inputs) {
      const int32_t ci = cand_of_value(in);
      if (ci >= 0 && fits(cands_[ci], out) && !contains(options, ci)) options.push_back(ci);
    }
    // Pointwise chains first (a relu-backward mask chain rather than the GEMM producing the
    // incoming gradient: the chain can still take the bias-gradient reduction); then the
    // candidate that ran last.
    std::sort(options.begin(), options.end(), [&](int32_t a, int32_t b) {
      const bool pa = cands_[a].kind == GroupKind::Pointwise;
      const bool pb = cands_[b].kind == GroupKind::Pointwise;
      if (pa != pb) return pa;
      return cands_[a].nodes.back() > cands_[b].nodes.back();
    });
    for (int32_t ci : options)
      if (can_add(ci, i)) {
        add(ci, i);
        return;
      }
    open(GroupKind::Pointwise, i);
  }

  void place_reduction(int32_t i) {
    const Node& n = g_.nodes[i];
    const int32_t ci = cand_of_value(n.inputs[0]);
    if (ci >= 0) {
      Candidate& c = cands_[ci];
      // A contraction's reduction must close its tail: the tail's generated kernel reduces a
      // value it computes. (A sum of the product alone is a lone sum, below.)
      const bool tail = c.kind == GroupKind::Pointwise ||
                        (c.kind == GroupKind::GemmEpilogue && c.nodes.size() >= 2 &&
                         g_.nodes[c.nodes.front()].out != n.inputs[0]);
      if (tail && !c.closed && can_add(ci, i)) {
        add(ci, i);
        if (c.kind == GroupKind::Pointwise) c.kind = GroupKind::Reduction;
        c.closed = true;
        return;
      }
    }
    if (lone_column_sum(n)) cands_[open(GroupKind::Reduction, i)].closed = true;
  }

  // A sum over leading dims of a contiguous CUDA value that no pointwise chain produced (the
  // bias gradient of a layer whose incoming gradient a GEMM or the cross entropy wrote) becomes
  // a Reduction group of its own: the generated kernel finishes a split sum in the same launch
  // (the last block to finish folds the partials), where eager's launches a second kernel for
  // them, and in this columns layout it sums in eager's order exactly (fused_reduce.cuh), so the
  // bits stay eager's. Sums over the last dim are left to eager: the generated rows layout
  // associates differently. Only narrow sums (a classifier's bias, up to kLoneSumMaxCols
  // columns): the generated kernel keeps its split's partials for the executable's life where
  // eager's are a temporary, which for wide sums raised deep_mlp's peak memory by 0.1-0.4 MiB.
  static constexpr int64_t kLoneSumMaxCols = 64;
  bool lone_column_sum(const Node& n) const {
    if (n.op != OpId::sum) return false;
    const Value& in = g_.values[n.inputs[0]];
    const int64_t nd = static_cast<int64_t>(in.shape.size());
    if (!in.device.is_cuda() || nd < 2 || in.shape.back() < 2 ||
        in.shape.back() > kLoneSumMaxCols || n.attrs.dims.empty() || g_.is_view(n.inputs[0]) ||
        in.producer < 0 || in.strides != contiguous_strides(in.shape))
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
  void absorb_small_k_products() {
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
      if (own >= 0 &&
          !(cands_[own].kind == GroupKind::GemmEpilogue && cands_[own].nodes.size() == 1))
        continue;
      const int32_t ci = member_[root_readers_[v].front()];
      if (ci < 0 || ci == own) continue;
      Candidate& c = cands_[ci];
      if (c.kind != GroupKind::Reduction || c.shape != out.shape || c.device != out.device)
        continue;
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

  // Whether every member after the first reads an earlier member's output.
  bool connected(const Candidate& c) const {
    for (size_t j = 1; j < c.nodes.size(); ++j) {
      bool reads_member = false;
      for (ValueId in : g_.nodes[c.nodes[j]].inputs) {
        const int32_t p = g_.values[in].producer;
        reads_member = reads_member ||
                       (p >= 0 && g_.nodes[p].out == in && contains(c.nodes, p) && p < c.nodes[j]);
      }
      if (!reads_member) return false;
    }
    return true;
  }

  bool ends_in_reduction(const Candidate& c) const {
    return op_info(g_.nodes[c.nodes.back()].op).kind == OpKind::Reduce;
  }

  void dissolve(Candidate& c) {
    for (int32_t m : c.nodes) member_[m] = -1;
    c.nodes.clear();
  }

  // The group candidate `ci` would become: what its members read from outside, and which of
  // their results are needed after it (returned, read by a non-member, or written later).
  Group group_of(int32_t ci) const {
    const Candidate& c = cands_[ci];
    Group grp;
    grp.kind = c.kind;
    grp.nodes = c.nodes;
    std::vector<ValueId> member_outs;
    for (int32_t m : grp.nodes) member_outs.push_back(g_.nodes[m].out);
    for (int32_t m : grp.nodes)
      for (ValueId in : g_.nodes[m].inputs)
        if (!contains(member_outs, in) && !contains(grp.inputs, in)) grp.inputs.push_back(in);
    for (ValueId o : member_outs) {
      bool needed = returned_[o];
      for (int32_t r : root_readers_[o]) needed = needed || member_[r] != ci;
      for (size_t k = 0; k < writes_.size() && !needed; ++k) needed = contains(writes_[k], o);
      if (needed) grp.outputs.push_back(o);
    }
    return grp;
  }

  // Asks the lowering about candidate `ci`, shrinking it until it is accepted or gone. Returns
  // the accepted group (nodes empty when nothing is left).
  Group settle(int32_t ci) {
    Candidate& c = cands_[ci];
    while (!c.nodes.empty()) {
      if (c.nodes.size() < 2 && c.kind != GroupKind::Reduction) break;
      // A small-K product closing into a reduction is computed inside the reduction's kernel
      // where each element is used (jit/reduction_codegen.h): no GEMM launch, no stored product.
      if (c.kind == GroupKind::GemmEpilogue && ends_in_reduction(c) &&
          small_k_product_problem(g_, g_.nodes[c.nodes.front()]).empty()) {
        c.kind = GroupKind::Reduction;
        Group grp = group_of(ci);
        if (lowering_accepts(g_, grp, &grp.stored)) return grp;
        c.kind = GroupKind::GemmEpilogue;
      }
      Group grp = group_of(ci);
      std::string why;
      if (lowering_accepts(g_, grp, &grp.stored, &why)) return grp;
      if (log_enabled(Log::fusion))
        log(Log::fusion, std::string("not fused (") + group_kind_name(c.kind) + " from %" +
                             std::to_string(g_.nodes[c.nodes.front()].out) + "): " + why);
      if (c.kind == GroupKind::GemmEpilogue && ends_in_reduction(c) && c.nodes.size() >= 3) {
        member_[c.nodes.back()] = -1;  // the product and its pointwise tail, without the reduction
        c.nodes.pop_back();
        c.closed = false;
      } else if (c.kind == GroupKind::GemmEpilogue) {
        // The product runs as itself; its tail may still be a group.
        member_[c.nodes.front()] = -1;
        c.nodes.erase(c.nodes.begin());
        c.kind = !c.nodes.empty() && ends_in_reduction(c) ? GroupKind::Reduction
                                                          : GroupKind::Pointwise;
        if (!c.nodes.empty() && !connected(c)) break;
      } else if (c.kind == GroupKind::Reduction && c.nodes.size() >= 3) {
        member_[c.nodes.back()] = -1;  // the pointwise chain without its reduction
        c.nodes.pop_back();
        c.kind = GroupKind::Pointwise;
      } else {
        break;
      }
    }
    dissolve(c);
    return {};
  }

  // Settles every candidate with the lowering and records the groups in the graph.
  void finish() {
    std::vector<Group> kept;
    for (size_t ci = 0; ci < cands_.size(); ++ci) {
      if (cands_[ci].nodes.empty()) continue;
      Group grp = settle(static_cast<int32_t>(ci));
      if (!grp.nodes.empty()) kept.push_back(std::move(grp));
    }
    std::sort(kept.begin(), kept.end(),
              [](const Group& a, const Group& b) { return a.nodes[0] < b.nodes[0]; });
    for (Node& n : g_.nodes) n.group = -1;
    for (size_t gi = 0; gi < kept.size(); ++gi)
      for (int32_t m : kept[gi].nodes) g_.nodes[m].group = static_cast<int32_t>(gi);
    g_.groups = std::move(kept);
  }

  Graph& g_;
  std::vector<std::vector<ValueId>> writes_;  // per node: the roots it writes
  std::vector<int32_t> member_;               // per node: its candidate, or -1
  std::vector<Candidate> cands_;
  std::vector<char> returned_;
  std::vector<std::vector<int32_t>> root_readers_;  // per root: nodes reading its memory
};

}  // namespace

void fuse(Graph& g) { Fuser(g).run(); }

}  // namespace ember::jit
