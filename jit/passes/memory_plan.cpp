// Memory planning: every buffer a replay computes into (a root made by an out-of-place node)
// gets a byte range in one arena per device, reused once the value is dead. Returned outputs
// are allocated fresh per call instead, so a caller never holds arena memory.
#include <algorithm>
#include <vector>

#include "jit/passes.h"

namespace ember::jit {
namespace {

constexpr int64_t kAlign = 256;

int64_t round_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Live {
  int64_t offset, size, last;
};

}  // namespace

int64_t MemoryPlan::total_bytes() const {
  int64_t t = 0;
  for (const Arena& a : arenas) t += a.bytes;
  return t;
}

MemoryPlan plan_memory(const Graph& g, const std::vector<GroupStorage>& storage) {
  const size_t nv = g.values.size();
  const size_t nn = g.nodes.size();
  MemoryPlan plan;
  plan.arena_of.assign(nv, -1);
  plan.offset_of.assign(nv, -1);
  plan.fresh.assign(nv, false);

  // Where each node runs: a group member runs with its group, at the group's last member.
  std::vector<int64_t> pos(nn);
  for (size_t i = 0; i < nn; ++i) {
    const int32_t gi = g.nodes[i].group;
    pos[i] = gi >= 0 && gi < static_cast<int32_t>(g.groups.size()) ? g.groups[gi].nodes.back()
                                                                   : static_cast<int64_t>(i);
  }
  auto owns_storage = [&](ValueId v) {
    const Value& x = g.values[v];
    if (x.kind != ValueKind::Node || x.root != v || x.producer < 0) return false;
    const Node& n = g.nodes[x.producer];
    return n.out == v && !n.inplace && op_info(n.op).kind != OpKind::View;
  };

  // Liveness of each owned root: from its producer to the last node touching its memory.
  std::vector<int64_t> first(nv, -1), last(nv, -1);
  for (size_t v = 0; v < nv; ++v)
    if (owns_storage(static_cast<ValueId>(v))) {
      first[v] = g.values[v].producer;
      last[v] = pos[first[v]];
    }
  std::vector<ValueId> w;
  for (size_t i = 0; i < nn; ++i) {
    const Node& n = g.nodes[i];
    for (ValueId in : n.inputs) {
      const ValueId r = g.values[in].root;
      if (first[r] >= 0) last[r] = std::max(last[r], pos[i]);
    }
    g.writes(n, w);
    for (ValueId r : w)
      if (first[r] >= 0) last[r] = std::max(last[r], pos[i]);
  }
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) {
      const ValueId r = g.values[e.value].root;
      if (first[r] >= 0) last[r] = static_cast<int64_t>(nn);  // read after the replay
    }
  for (ValueId o : g.outputs) {
    const ValueId r = g.values[o].root;
    if (first[r] >= 0) plan.fresh[r] = true;
  }
  // Values that never leave their fused group exist only in registers / cache-sized chunks.
  std::vector<char> internal(nv, 0);
  for (size_t gi = 0; gi < g.groups.size(); ++gi) {
    const Group& grp = g.groups[gi];
    const GroupStorage how = gi < storage.size() ? storage[gi] : GroupStorage::Materialize;
    if (how == GroupStorage::Materialize) continue;
    for (size_t i = how == GroupStorage::Tail ? 1 : 0; i < grp.nodes.size(); ++i) {
      const ValueId o = g.nodes[grp.nodes[i]].out;
      if (o != kNoValue &&
          std::find(grp.outputs.begin(), grp.outputs.end(), o) == grp.outputs.end())
        internal[o] = 1;
    }
  }

  std::vector<ValueId> order;
  for (size_t v = 0; v < nv; ++v)
    if (first[v] >= 0 && !plan.fresh[v] && !internal[v]) order.push_back(static_cast<ValueId>(v));
  std::stable_sort(order.begin(), order.end(),
                   [&](ValueId a, ValueId b) { return first[a] < first[b]; });

  std::vector<std::vector<Live>> active;  // per arena, sorted by offset
  for (ValueId v : order) {
    const Value& val = g.values[v];
    int32_t a = 0;
    while (a < static_cast<int32_t>(plan.arenas.size()) && plan.arenas[a].device != val.device) ++a;
    if (a == static_cast<int32_t>(plan.arenas.size())) {
      plan.arenas.push_back({val.device, 0});
      active.emplace_back();
    }
    auto& live = active[a];
    // Values are placed in order of definition, so one dead before this one is dead for good.
    live.erase(
        std::remove_if(live.begin(), live.end(), [&](const Live& l) { return l.last < first[v]; }),
        live.end());
    const int64_t size = round_up(val.numel() * element_size(val.dtype));
    int64_t at = 0;
    for (const Live& l : live) {  // first fit: the lowest gap that holds `size`
      if (l.offset - at >= size) break;
      at = std::max(at, l.offset + l.size);
    }
    const Live placed{at, size, last[v]};
    live.insert(std::upper_bound(live.begin(), live.end(), placed,
                                 [](const Live& x, const Live& y) { return x.offset < y.offset; }),
                placed);
    plan.arena_of[v] = a;
    plan.offset_of[v] = at;
    plan.arenas[a].bytes = std::max(plan.arenas[a].bytes, at + size);
  }
  return plan;
}

}  // namespace ember::jit

namespace ember::jit {

std::vector<GroupStorage> default_group_storage(const Graph& g, bool materialize) {
  std::vector<GroupStorage> out(g.groups.size(), GroupStorage::Materialize);
  if (materialize) return out;
  for (size_t i = 0; i < g.groups.size(); ++i) {
    switch (g.groups[i].kind) {
      case GroupKind::Pointwise:
      case GroupKind::Reduction:
        out[i] = GroupStorage::None;
        break;
      case GroupKind::GemmEpilogue:
        out[i] = GroupStorage::Tail;
        break;
      case GroupKind::CrossEntropy:
        out[i] = GroupStorage::Materialize;
        break;
    }
  }
  return out;
}

MemoryPlan plan_memory(const Graph& g, bool materialize_group_internals) {
  return plan_memory(g, default_group_storage(g, materialize_group_internals));
}

}  // namespace ember::jit
