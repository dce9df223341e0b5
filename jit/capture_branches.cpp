#include "jit/capture_branches.h"

#include <algorithm>
#include <sstream>

#include "jit/log.h"

namespace ember::jit {

// Two steps conflict when one writes bytes the other reads or writes (address ranges of the
// roots they touch, as bound for this capture, so buffers the memory plan reuses count as the
// same bytes). Steps that are not self-contained (eager kernels, GEMMs, the cross entropy: they
// share the device's workspace and scratch) stay on the main stream in order; a self-contained
// step (a generated pointwise or reduction kernel) goes to a side branch unless it could overlap
// nothing there. A step waits for the events of the conflicting earlier steps on other branches.
BranchPlan plan_branches(const Graph& g, const StepList& steps,
                         const std::vector<std::shared_ptr<TensorImpl>>& slots,
                         const std::vector<BesideRead>& beside) {
  constexpr int kSideBranches = BranchPlan::kSideBranches;
  const size_t n = steps.size();
  BranchPlan plan;
  plan.branch.assign(n, 0);
  plan.waits.assign(n, {});
  plan.signals.assign(n, 0);
  plan.join_early.assign(n, 0);
  struct Range {
    uintptr_t lo, hi;
  };
  std::vector<std::vector<Range>> reads(n), writes(n);
  auto range_of = [&](ValueId v, std::vector<Range>& out) {
    const ValueId r = g.values[v].root;
    const TensorImpl& t = *slots[r];
    if (!t.storage || !t.storage->data) return;  // internal to a fused group: never in memory
    const auto lo = reinterpret_cast<uintptr_t>(t.data());
    const auto bytes =
        static_cast<uintptr_t>(g.values[r].numel() * element_size(g.values[r].dtype));
    if (bytes > 0) out.push_back({lo, lo + bytes});
  };
  const std::vector<int32_t>& node_step = steps.node_step();
  const std::vector<int32_t>& node_done = steps.node_done();
  std::vector<ValueId> roots;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& nd = g.nodes[ni];
    // A collective touches its tensor from its start to its wait: both steps.
    for (const int32_t si : {node_step[ni], node_done[ni]}) {
      if (si < 0) continue;
      for (ValueId in : nd.inputs) range_of(in, reads[si]);
      if (nd.out != kNoValue) range_of(nd.out, writes[si]);
      g.writes(nd, roots);
      for (ValueId r : roots) range_of(r, writes[si]);
      if (node_done[ni] == node_step[ni]) break;
    }
  }
  // A lowering's workspace is arena bytes that other steps' values use at other times.
  for (size_t si = 0; si < n; ++si)
    if (const auto [p, bytes] = steps.workspace_range(si); p && bytes > 0) {
      const auto lo = reinterpret_cast<uintptr_t>(p);
      writes[si].push_back({lo, lo + static_cast<uintptr_t>(bytes)});
    }
  auto overlap = [](const std::vector<Range>& a, const std::vector<Range>& b) {
    for (const Range& x : a)
      for (const Range& y : b)
        if (x.lo < y.hi && y.lo < x.hi) return true;
    return false;
  };
  // Every step after a beside copy that writes bytes it reads joins its branch first.
  for (const BesideRead& b : beside) {
    const auto lo = reinterpret_cast<uintptr_t>(b.data);
    const std::vector<Range> read = {{lo, lo + static_cast<uintptr_t>(b.bytes)}};
    for (size_t j = static_cast<size_t>(std::max<int32_t>(b.after_step + 1, 0)); j < n; ++j)
      if (overlap(writes[j], read)) plan.join_early[j] = 1;
  }
  std::vector<char> contained(n, 0);
  for (size_t i = 0; i < n; ++i) contained[i] = steps.self_contained(i);
  // deps[j]: earlier steps j must follow.
  std::vector<std::vector<int32_t>> deps(n);
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < j; ++i)
      if (overlap(writes[i], reads[j]) || overlap(writes[i], writes[j]) ||
          overlap(reads[i], writes[j]))
        deps[j].push_back(static_cast<int32_t>(i));
  auto depends = [&](size_t j, int32_t i) {
    return std::find(deps[j].begin(), deps[j].end(), i) != deps[j].end();
  };
  std::vector<int32_t> last_on(kSideBranches + 1, -1);  // per branch: its latest step
  for (size_t j = 0; j < n; ++j) {
    int b = 0;
    if (contained[j]) {
      // Main when it would wait for the main stream's latest step and the next main step waits
      // for it: then it overlaps nothing.
      size_t next = j + 1;
      while (next < n && contained[next]) ++next;
      const bool after_main = last_on[0] < 0 || depends(j, last_on[0]);
      const bool before_main = next < n && depends(next, static_cast<int32_t>(j));
      if (!(after_main && before_main)) {
        for (int k = 1; k <= kSideBranches && b == 0; ++k)  // a side that ran a step it needs
          if (last_on[k] >= 0 && depends(j, last_on[k])) b = k;
        if (b == 0) {  // else the side idle the longest
          b = 1;
          for (int k = 2; k <= kSideBranches; ++k)
            if (last_on[k] < last_on[b]) b = k;
        }
        plan.sides = std::max(plan.sides, b);
      }
    }
    plan.branch[j] = static_cast<int8_t>(b);
    for (int32_t i : deps[j])
      if (plan.branch[i] != b) {
        plan.waits[j].push_back(i);
        plan.signals[i] = 1;
      }
    last_on[b] = static_cast<int32_t>(j);
  }
  if (plan.sides > 0 && log_enabled(Log::perf)) {
    std::ostringstream os;
    os << "CUDA graph branches:";
    for (size_t j = 0; j < n; ++j) os << " " << j << "@" << int{plan.branch[j]};
    log(Log::perf, os.str());
  }
  return plan;
}

}  // namespace ember::jit
