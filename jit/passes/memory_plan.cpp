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

// Which gap between the items already placed a new one takes.
enum class Fit {
  Lowest,    // the lowest that holds it
  Smallest,  // the smallest that holds it (the lowest of those), else above them all
};

// Gives each item of `order`, in turn, an offset in its device's arena where it overlaps no item
// already placed there whose lifetime [first, last] meets its own.
void place(std::vector<Item>& items, const std::vector<size_t>& order,
           std::vector<MemoryPlan::Arena>& arenas, Fit fit) {
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
    int64_t at = 0, best = -1, best_gap = 0;
    for (const Placed& p : meets) {
      const int64_t gap = p.offset - at;
      if (gap >= it.bytes) {
        if (fit == Fit::Lowest) break;
        if (best < 0 || gap < best_gap) {
          best = at;
          best_gap = gap;
        }
      }
      at = std::max(at, p.offset + p.size);
    }
    if (fit == Fit::Smallest && best >= 0) at = best;
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
                       const std::vector<int64_t>& workspace, bool graph_statics) {
  const size_t nv = g.values.size();
  const size_t nn = g.nodes.size();
  MemoryPlan plan;
  plan.arena_of.assign(nv, -1);
  plan.offset_of.assign(nv, -1);
  plan.fresh.assign(nv, false);
  plan.workspace_arena.assign(g.groups.size(), -1);
  plan.workspace_offset.assign(g.groups.size(), -1);
  plan.workspace_bytes.assign(g.groups.size(), 0);
  plan.static_arena_of.assign(nv, -1);
  plan.static_offset_of.assign(nv, -1);
  for (size_t gi = 0; gi < workspace.size() && gi < g.groups.size(); ++gi)
    if (!g.groups[gi].nodes.empty()) plan.workspace_bytes[gi] = std::max<int64_t>(0, workspace[gi]);

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

  std::vector<ValueId> stored, statics;
  for (size_t v = 0; v < nv; ++v)
    if (first[v] >= 0 && !plan.fresh[v] && !internal[v]) stored.push_back(static_cast<ValueId>(v));
  if (graph_statics)
    for (size_t v = 0; v < nv; ++v)
      if (plan.fresh[v] && last[v] < static_cast<int64_t>(nn) && g.values[v].numel() > 0)
        statics.push_back(static_cast<ValueId>(v));
  // The buffers to place: stored values, then the workspaces, each live only at its group's
  // position (where the group runs), alongside the group's operands.
  enum class Order { Definition, Largest, Crowded, LargestWorkspacesLast };
  auto plan_with = [&](MemoryPlan& p, Order how, Fit fit) {
    std::vector<Item> items;
    for (ValueId v : stored)
      items.push_back({g.values[v].device,
                       round_up(g.values[v].numel() * element_size(g.values[v].dtype)), first[v],
                       last[v], &p.arena_of[v], &p.offset_of[v]});
    for (size_t gi = 0; gi < g.groups.size(); ++gi) {
      if (p.workspace_bytes[gi] == 0) continue;
      const int32_t at = g.groups[gi].nodes.back();
      const Node& n = g.nodes[at];
      const ValueId out = n.out != kNoValue ? n.out : n.inputs.front();
      items.push_back({g.values[out].device, round_up(p.workspace_bytes[gi]), at, at,
                       &p.workspace_arena[gi], &p.workspace_offset[gi]});
    }
    const size_t workspaces_end = items.size();
    for (ValueId v : statics)
      items.push_back({g.values[v].device,
                       round_up(g.values[v].numel() * element_size(g.values[v].dtype)), first[v],
                       last[v], &p.static_arena_of[v], &p.static_offset_of[v]});
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    switch (how) {
      case Order::Definition:
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return items[a].first < items[b].first; });
        break;
      case Order::Largest:
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          if (items[a].bytes != items[b].bytes) return items[a].bytes > items[b].bytes;
          return items[a].first < items[b].first;
        });
        break;
      case Order::LargestWorkspacesLast:
        // Workspaces live at one position each: placed after every value, they take holes.
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          const bool wa = a >= stored.size() && a < workspaces_end,
                     wb = b >= stored.size() && b < workspaces_end;
          if (wa != wb) return wb;
          if (items[a].bytes != items[b].bytes) return items[a].bytes > items[b].bytes;
          return items[a].first < items[b].first;
        });
        break;
      case Order::Crowded: {
        // Each item's crowd: the most bytes live at one position of its lifetime. Items of
        // the most crowded positions decide the arena's size, so they go first.
        int64_t end = 0;
        for (const Item& it : items) end = std::max(end, it.last + 1);
        std::vector<int64_t> live(static_cast<size_t>(end) + 1, 0);
        for (const Item& it : items) {
          live[static_cast<size_t>(it.first)] += it.bytes;
          live[static_cast<size_t>(it.last) + 1] -= it.bytes;
        }
        for (size_t x = 1; x < live.size(); ++x) live[x] += live[x - 1];
        std::vector<int64_t> crowd(items.size(), 0);
        for (size_t i = 0; i < items.size(); ++i)
          for (int64_t x = items[i].first; x <= items[i].last; ++x)
            crowd[i] = std::max(crowd[i], live[static_cast<size_t>(x)]);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          if (crowd[a] != crowd[b]) return crowd[a] > crowd[b];
          if (items[a].bytes != items[b].bytes) return items[a].bytes > items[b].bytes;
          return items[a].first < items[b].first;
        });
        break;
      }
    }
    place(items, order, p.arenas, fit);
    // Per arena, the largest sum of sizes live at one position (a sweep over births and deaths).
    for (size_t a = 0; a < p.arenas.size(); ++a) {
      std::vector<std::pair<int64_t, int64_t>> events;  // (position, +bytes / -bytes after last)
      for (const Item& it : items)
        if (*it.arena == static_cast<int32_t>(a)) {
          events.push_back({2 * it.first, it.bytes});
          events.push_back({2 * it.last + 1, -it.bytes});
        }
      std::sort(events.begin(), events.end());
      int64_t live = 0;
      for (const auto& [at, delta] : events) {
        live += delta;
        p.arenas[a].live_bound = std::max(p.arenas[a].live_bound, live);
      }
    }
  };
  // Laying out buffers of known lifetimes in the least memory is NP-hard; each of these orders
  // and gap choices wins on some graph (holes left when a small buffer dies under a large one
  // born later; a crowded moment packed last), so every combination is tried and the smallest
  // arena kept (the earliest of equals).
  bool have_best = false;
  MemoryPlan best;
  for (Order how :
       {Order::Definition, Order::Largest, Order::Crowded, Order::LargestWorkspacesLast})
    for (Fit fit : {Fit::Lowest, Fit::Smallest}) {
      if (how == Order::LargestWorkspacesLast && workspace.empty()) continue;  // = Largest
      MemoryPlan p = plan;
      plan_with(p, how, fit);
      if (!have_best || p.total_bytes() < best.total_bytes()) best = std::move(p);
      have_best = true;
    }
  plan = std::move(best);
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
      case GroupKind::Casts:
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
