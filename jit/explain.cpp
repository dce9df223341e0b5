// jit::explain: one traced run, the passes, and a readable report of what compiling would do.
#include <cstdio>
#include <sstream>

#include "jit/compile.h"
#include "jit/executor.h"
#include "jit/passes.h"
#include "jit/tracer.h"

namespace ember::jit {

std::string Explanation::str() const {
  std::ostringstream os;
  os << "=== ember jit explain ===\n";
  if (!captured) {
    os << "not captured; graph breaks:\n";
    for (const std::string& b : breaks) os << "  " << b << "\n";
    return os.str();
  }
  os << "captured whole: " << nodes_traced << " ops traced, " << nodes_optimized
     << " after the passes\n";
  os << "passes:\n";
  for (const std::string& p : passes) os << "  " << p << "\n";
  os << "fused groups (" << groups.size() << "):\n";
  for (const std::string& g : groups) os << "  " << g << "\n";
  for (const std::string& l : lowerings) os << "  lowered " << l << "\n";
  os << "kernel calls per replay: " << kernels_per_replay << "\n";
  os << "arena: " << arena_bytes << " bytes\n";
  os << "--- optimized graph ---\n" << optimized_graph;
  return os.str();
}

namespace detail {

Explanation explain_call(std::span<const Tensor> tensors, EagerCall eager, void* ctx) {
  Explanation ex;
  std::vector<Tensor> outputs;
  Graph g;
  {
    Tracer tracer(false);
    for (size_t i = 0; i < tensors.size(); ++i)
      tracer.add_input(tensors[i], static_cast<int32_t>(i));
    eager(ctx, outputs);
    tracer.finish(outputs);
    if (tracer.broken()) {
      ex.breaks.push_back(tracer.break_info().str());
    } else {
      g = std::move(tracer.graph());
    }
  }
  if (!ex.breaks.empty()) {
    std::fprintf(stderr, "%s", ex.str().c_str());
    return ex;
  }
  ex.captured = true;
  ex.traced_graph = g.str();
  ex.nodes_traced = static_cast<int32_t>(g.nodes.size());
  for (const PassReport& r : optimize(g))
    ex.passes.push_back(r.pass + ": " + std::to_string(r.nodes_before) + " -> " +
                        std::to_string(r.nodes_after) + " nodes");
  ex.nodes_optimized = static_cast<int32_t>(g.nodes.size());
  for (const Group& grp : g.groups) {
    std::string s = std::string(group_kind_name(grp.kind)) + ": " +
                    std::to_string(grp.nodes.size()) + " nodes (";
    for (size_t i = 0; i < grp.nodes.size(); ++i)
      s += (i ? ", " : "") + std::string(op_name(g.nodes[grp.nodes[i]].op));
    ex.groups.push_back(s + ")");
  }
  ex.optimized_graph = g.str();
  ex.dot = g.dot();
  Executor exec(std::move(g));
  ex.kernels_per_replay = exec.stats().kernels;
  ex.lowerings = exec.lowerings();
  ex.arena_bytes = exec.stats().arena_bytes;
  std::fprintf(stderr, "%s", ex.str().c_str());
  return ex;
}

}  // namespace detail
}  // namespace ember::jit
