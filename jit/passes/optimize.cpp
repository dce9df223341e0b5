// The pass pipeline, in the order the passes feed each other: dead code first (less to look
// at), then merging and folding (which leave dead nodes and identity copies behind), products
// sharing an operand joined, sums of slice gradients made one cat, sums of products one
// product, canonical forms, a second sweep of what they made dead, the memory of constants no
// longer read, and fusion last (it needs the final node list; erasing nodes clears groups).
#include "jit/passes.h"

namespace ember::jit {

std::vector<PassReport> optimize(Graph& g) {
  struct Step {
    const char* name;
    void (*run)(Graph&);
  };
  static constexpr Step kPipeline[] = {
      {"dce", eliminate_dead_code},
      {"cse", eliminate_common_subexpressions},
      {"fold", fold_constants},
      {"batch_products", batch_products},
      {"slice_sums", assemble_slice_sums},
      {"sum_products", sum_products},
      {"canonicalize", canonicalize},
      {"dce", eliminate_dead_code},
      {"release_constants", release_unused_constants},
      {"fuse", fuse},
  };
  std::vector<PassReport> reports;
  reports.reserve(std::size(kPipeline));
  for (const Step& s : kPipeline) {
    PassReport r;
    r.pass = s.name;
    r.nodes_before = g.live_node_count();
    s.run(g);
    r.nodes_after = g.live_node_count();
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace ember::jit
