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

struct Placed {
  int64_t offset, size, first, last;
};

// A buffer to place: a stored value's, or a group's workspace. `first` and `last` are node
// positions, inclusive.
struct Item {
  Device device;
  int64_t bytes, first, last;
  int32_t* arena;  // where the placement is written
  int64_t* offset;
};

// Gives each item of `order`, in turn, the lowest offset in its device's arena that overlaps no
// item already placed there whose lifetime [first, last] meets its own.
void place_first_fit(std::vector<Item>& items, const std::vector<size_t>& order,
                     std::vector<MemoryPlan::Arena>& arenas) {
  std::vector<std::vector<Placed>> placed(arenas.size());
  std::vector<Placed> meets;
  for (size_t i : order) {
    const Item& it = items[i];
    int32_t a = 0;
    while (a < static_cast<int32_t>(arenas.size()) && arenas[a].device != it.device) ++a;
    if (a == static_cast<int32_t>(arenas.size())) {
      arenas.push_back({it.device, 0});
      placed.emplace_back();
    }
    meets.clear();
    for (const Placed& p : placed[a])
      if (!(p.last < it.first || it.last < p.first)) meets.push_back(p);
    std::sort(meets.begin(), meets.end(),
              [](const Placed& x, const Placed& y) { return x.offset < y.offset; });
    int64_t at = 0;
    for (const Placed& p : meets) {  // the lowest gap that holds the item
      if (p.offset - at >= it.bytes) break;
      at = std::max(at, p.offset + p.size);
    }
    placed[a].push_back({at, it.bytes, it.first, it.last});
    *it.arena = a;
    *it.offset = at;
    arenas[a].bytes = std::max(arenas[a].bytes, at + it.bytes);
  }
}

}  // namespace

int64_t MemoryPlan::total_bytes() const {
  int64_t t = 0;
  for (const Arena& a : arenas) t += a.bytes;
  return t;
}

MemoryPlan plan_memory(const Graph& g, const std::vector<GroupStorage>& storage,
                       const std::vector<int64_t>& workspace) {
  const size_t nv = g.values.size();
  const size_t nn = g.nodes.size();
  MemoryPlan plan;
  plan.arena_of.assign(nv, -1);
  plan.offset_of.assign(nv, -1);
  plan.fresh.assign(nv, false);
  plan.workspace_arena.assign(g.groups.size(), -1);
  plan.workspace_offset.assign(g.groups.size(), -1);

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
          std::find(grp.outputs.begin(), grp.outputs.end(), o) == grp.outputs.end() &&
          std::find(grp.stored.begin(), grp.stored.end(), o) == grp.stored.end())
        internal[o] = 1;
    }
  }

  std::vector<ValueId> stored;
  for (size_t v = 0; v < nv; ++v)
    if (first[v] >= 0 && !plan.fresh[v] && !internal[v]) stored.push_back(static_cast<ValueId>(v));
  // The buffers to place: stored values, then the workspaces, each live only at its group's
  // position (where the group runs), alongside the group's operands.
  auto plan_with = [&](MemoryPlan& p, bool largest_first) {
    std::vector<Item> items;
    for (ValueId v : stored)
      items.push_back({g.values[v].device,
                       round_up(g.values[v].numel() * element_size(g.values[v].dtype)), first[v],
                       last[v], &p.arena_of[v], &p.offset_of[v]});
    for (size_t gi = 0; gi < workspace.size() && gi < g.groups.size(); ++gi) {
      if (workspace[gi] <= 0 || g.groups[gi].nodes.empty()) continue;
      const int32_t at = g.groups[gi].nodes.back();
      const Node& n = g.nodes[at];
      const ValueId out = n.out != kNoValue ? n.out : n.inputs.front();
      items.push_back({g.values[out].device, round_up(workspace[gi]), at, at,
                       &p.workspace_arena[gi], &p.workspace_offset[gi]});
    }
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Two orders, the smaller plan kept: first fit in order of definition, and first fit from
    // the largest buffer down. Neither is always the better one; the second avoids the holes
    // the first leaves when a small buffer dies under a large one that is born later, which on
    // deep models at large batches is what keeps the compiled peak near eager's.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (largest_first && items[a].bytes != items[b].bytes) return items[a].bytes > items[b].bytes;
      return items[a].first < items[b].first;
    });
    place_first_fit(items, order, p.arenas);
  };
  MemoryPlan a = plan, b = plan;
  plan_with(a, false);
  plan_with(b, true);
  plan = b.total_bytes() < a.total_bytes() ? std::move(b) : std::move(a);
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
