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
// Patterns the growth alone would not find (the cross-entropy pair, lone column sums, pointwise
// siblings of a reduction, small-K products inside reductions, independent casts) are rewrite
// rules, in jit/passes/fusion_rules.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include "jit/log.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "jit/passes/fusion.h"

namespace ember::jit {
namespace fusion {
namespace {

bool is_fusable_reduce(const Node& n) {
  return (n.op == OpId::sum || n.op == OpId::mean || n.op == OpId::amax || n.op == OpId::amin) &&
         !n.inplace && n.out != kNoValue;
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

}  // namespace

bool is_pointwise_node(const Node& n) {
  const OpKind k = op_info(n.op).kind;
  return (k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Ternary) && !n.inplace &&
         n.out != kNoValue;
}

void Fuser::run() {
  g_.groups.clear();
  for (Node& n : g_.nodes) n.group = -1;
  sink_loss_consumers();
  hoist_casts_of_leaves();
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
    else if (op_info(n.op).kind == OpKind::View)
      place_view(k);
    else if (is_pointwise_node(n))
      place_pointwise(k);
    else if (is_fusable_reduce(n))
      place_reduction(k);
    else if (op_info(n.op).kind == OpKind::Cat)
      merge_cat_producers(k);
  }
  merge_reduction_siblings();
  absorb_small_k_products();
  gather_casts();
  finish();
}

// A product whose memory nothing writes afterwards can take a tail: the tail reads it where
// the GEMM left it (readers outside the group just make it a group output).
bool Fuser::epilogue_capable(ValueId out) const {
  for (size_t k = 0; k < writes_.size(); ++k)
    if (contains(writes_[k], out)) return false;
  return true;
}

int32_t Fuser::open(GroupKind kind, int32_t node) {
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

void Fuser::add(int32_t ci, int32_t node) {
  cands_[ci].nodes.push_back(node);
  member_[node] = ci;
}

// The candidate producing `v` as a member output, or -1.
int32_t Fuser::cand_of_value(ValueId v) const {
  // (A view is a member only when place_view made it one.)
  const int32_t p = g_.values[v].producer;
  if (p < 0 || g_.nodes[p].out != v) return -1;
  return member_[p];
}

// Whether node `i` (after every member) may join candidate `ci`; see the file comment.
bool Fuser::can_add(int32_t ci, int32_t i) const {
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

bool Fuser::fits(const Candidate& c, const Value& out) const {
  return !c.closed && c.shape == out.shape && c.device == out.device &&
         (c.kind == GroupKind::Pointwise || c.kind == GroupKind::GemmEpilogue);
}

void Fuser::place_pointwise(int32_t i) {
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
      // The other pointwise chains this node joins up (a per-channel scale and shift computed
      // apart, then combined) come along: one kernel instead of one per chain. So does a
      // product's tail that would otherwise be a kernel of its own after the GEMM.
      for (int32_t cj : options) {
        if (cj == ci || cands_[ci].kind != GroupKind::Pointwise || cands_[cj].nodes.empty())
          continue;
        if (cands_[cj].kind == GroupKind::Pointwise) {
          if (can_merge(ci, cj)) merge(ci, cj);
        } else if (const int32_t t = detach_gemm_tail(cj); t >= 0) {
          merge(can_merge(ci, t) ? ci : cj, t);
        }
      }
      return;
    }
  open(GroupKind::Pointwise, i);
}

// Whether candidate `cj` (whose members all precede the last member of `ci`) may join `ci`: the
// merged group runs at ci's last member, so no non-member between the first member of either and
// that position may write memory a member reads or produces, or read a member's output.
// Conservative: every such node is checked against every member.
bool Fuser::can_merge(int32_t ci, int32_t cj) const {
  const Candidate &a = cands_[ci], &b = cands_[cj];
  if (b.closed || b.shape != a.shape || b.device != a.device) return false;
  std::vector<ValueId> reads, outs;
  for (const Candidate* c : {&a, &b})
    for (int32_t m : c->nodes) {
      outs.push_back(g_.nodes[m].out);
      for (ValueId in : g_.nodes[m].inputs) reads.push_back(g_.values[in].root);
    }
  const int32_t f = std::min(a.nodes.front(), b.nodes.front()), l = a.nodes.back();
  if (b.nodes.back() > l) return false;
  for (int32_t k = f + 1; k < l; ++k) {
    if (member_[k] == ci || member_[k] == cj) continue;
    for (ValueId r : writes_[k])
      if (contains(reads, r) || contains(outs, r)) return false;
    for (ValueId in : g_.nodes[k].inputs)
      if (contains(outs, g_.values[in].root)) return false;
  }
  return true;
}

void Fuser::merge(int32_t ci, int32_t cj) {
  Candidate &a = cands_[ci], &b = cands_[cj];
  for (int32_t m : b.nodes) member_[m] = ci;
  a.nodes.insert(a.nodes.end(), b.nodes.begin(), b.nodes.end());
  std::sort(a.nodes.begin(), a.nodes.end());
  b.nodes.clear();
}

// A Linear over inputs of any rank traces as mm over the rows, then a view back to the leading
// dims: the view joins the product's candidate so the tail (bias, activation) follows it there.
// Only a reshape that keeps the product's rows whole (same memory, same last dim).
void Fuser::place_view(int32_t i) {
  const Node& n = g_.nodes[i];
  if (n.inplace || n.out == kNoValue || n.inputs.size() != 1) return;
  const int32_t ci = cand_of_value(n.inputs[0]);
  if (ci < 0) return;
  Candidate& c = cands_[ci];
  if (c.kind != GroupKind::GemmEpilogue || c.closed || c.nodes.size() != 1) return;
  if (!keeps_rows(g_, n.inputs[0], n.out) || !can_add(ci, i)) return;
  add(ci, i);
  c.shape = g_.values[n.out].shape;
}

void Fuser::place_reduction(int32_t i) {
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

// Whether every member after the first reads an earlier member's output.
bool Fuser::connected(const Candidate& c) const {
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

bool Fuser::ends_in_reduction(const Candidate& c) const {
  return op_info(g_.nodes[c.nodes.back()].op).kind == OpKind::Reduce;
}

void Fuser::dissolve(Candidate& c) {
  for (int32_t m : c.nodes) member_[m] = -1;
  c.nodes.clear();
}

// The group candidate `ci` would become: what its members read from outside, and which of
// their results are needed after it (returned, read by a non-member, or written later).
Group Fuser::group_of(int32_t ci) const {
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
Group Fuser::settle(int32_t ci) {
  Candidate& c = cands_[ci];
  while (!c.nodes.empty()) {
    // A group runs at its last member: never a view (views run nowhere, they are aliases).
    while (!c.nodes.empty() && op_info(g_.nodes[c.nodes.back()].op).kind == OpKind::View) {
      member_[c.nodes.back()] = -1;
      c.nodes.pop_back();
    }
    if (c.nodes.size() < 2 && c.kind != GroupKind::Reduction) break;
    if (Group grp; product_inside_reduction(ci, grp)) return grp;
    Group grp = group_of(ci);
    std::string why;
    if (lowering_accepts(g_, grp, &grp.stored, &why)) return grp;
    if (log_enabled(Log::fusion))
      log(Log::fusion, std::string("not fused (") + group_kind_name(c.kind) + " from %" +
                           std::to_string(g_.nodes[c.nodes.front()].out) + "): " + why);
    if (c.kind == GroupKind::Pointwise && g_.nodes[c.nodes.back()].op == OpId::cat) {
      member_[c.nodes.back()] = -1;  // the pieces without the cat (absorb_cat)
      c.nodes.pop_back();
      c.closed = false;
    } else if (c.kind == GroupKind::GemmEpilogue && ends_in_reduction(c) && c.nodes.size() >= 3) {
      member_[c.nodes.back()] = -1;  // the product and its pointwise tail, without the reduction
      c.nodes.pop_back();
      c.closed = false;
    } else if (c.kind == GroupKind::GemmEpilogue) {
      // The product runs as itself (with its view); its tail may still be a group.
      member_[c.nodes.front()] = -1;
      c.nodes.erase(c.nodes.begin());
      while (!c.nodes.empty() && op_info(g_.nodes[c.nodes.front()].op).kind == OpKind::View) {
        member_[c.nodes.front()] = -1;
        c.nodes.erase(c.nodes.begin());
      }
      if (!c.nodes.empty()) c.shape = g_.values[g_.nodes[c.nodes.front()].out].shape;
      c.kind =
          !c.nodes.empty() && ends_in_reduction(c) ? GroupKind::Reduction : GroupKind::Pointwise;
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
void Fuser::finish() {
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

}  // namespace fusion

void fuse(Graph& g) { fusion::Fuser(g).run(); }

}  // namespace ember::jit
