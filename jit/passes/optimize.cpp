// The pass pipeline, in the order the passes feed each other: dead code first (less to look
// at), then merging and folding (which leave dead nodes and identity copies behind), canonical
// forms and the dead nodes they leave (so the joining passes see one form of each view chain),
// products sharing an operand joined, sums of slice gradients made one cat, sums of products one
// product, canonical forms again, pointwise results read in slices computed per slice, a second
// sweep of what they made dead, the memory of constants no longer read, and fusion last (it
// needs the final node list; erasing nodes clears groups).
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "jit/passes.h"

namespace ember::jit {
namespace {

// EMBER_JIT_SKIP_PASSES=sum_products,canonicalize leaves the named passes out: a way to find which
// rewrite changes a compiled step's bits or memory against eager's, without rebuilding. Read
// once; the pipeline runs at trace time, never on the replay path.
bool skipped(std::string_view pass) {
  static const std::string_view list = [] {
    const char* e = std::getenv("EMBER_JIT_SKIP_PASSES");
    return std::string_view(e ? e : "");
  }();
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    if (list.substr(at, end - at) == pass) return true;
    at = end + 1;
  }
  return false;
}

}  // namespace

std::vector<PassReport> optimize(Graph& g) {
  struct Step {
    const char* name;
    void (*run)(Graph&);
  };
  static constexpr Step kPipeline[] = {
      {"dce", eliminate_dead_code},
      {"cse", eliminate_common_subexpressions},
      {"fold", fold_constants},
      {"canonicalize", canonicalize},
      {"dce", eliminate_dead_code},
      {"batch_products", batch_products},
      {"slice_sums", assemble_slice_sums},
      {"sum_products", sum_products},
      {"canonicalize", canonicalize},
      {"slice_pointwise", split_sliced_pointwise},
      {"dce", eliminate_dead_code},
      {"host_scalars", host_scalar_constants},
      {"release_constants", release_unused_constants},
      {"fuse", fuse},
  };
  std::vector<PassReport> reports;
  reports.reserve(std::size(kPipeline));
  for (const Step& s : kPipeline) {
    PassReport r;
    r.pass = s.name;
    r.nodes_before = g.live_node_count();
    if (!skipped(s.name)) s.run(g);
    r.nodes_after = g.live_node_count();
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace ember::jit
