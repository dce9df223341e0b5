// Picks the lowering of each fused group kind, and answers the fusion pass's question of whether
// a proposed group has one. Each lowering lives in its own file.
#include "jit/lower.h"
#include "jit/pointwise_codegen.h"
#include "jit/reduction_codegen.h"

namespace ember::jit {
namespace {

Device group_device(const Graph& g, const Group& group) {
  for (int32_t m : group.nodes)
    if (g.nodes[m].out != kNoValue) return g.values[g.nodes[m].out].device;
  return Device::cpu();
}

}  // namespace

bool lowering_accepts(const Graph& g, const Group& group, std::vector<ValueId>* stored,
                      std::string* why) {
  if (group.nodes.empty()) {
    if (why) *why = "an empty group";
    return false;
  }
  if (!group_device(g, group).is_cuda()) {
    // The CPU executor runs pointwise and pointwise + reduction groups chunked, and a
    // contraction's tail chunked after its GEMM; it has no fused cross-entropy pair.
    switch (group.kind) {
      case GroupKind::Pointwise:
      case GroupKind::Reduction:
        return true;
      case GroupKind::GemmEpilogue:
        if (group.nodes.size() < 2) {
          if (why) *why = "a product alone";
          return false;
        }
        for (int32_t m : group.nodes)
          if (op_info(g.nodes[m].op).kind == OpKind::View) {
            if (why) *why = "a view of the product (the chunked tail reads whole rows)";
            return false;
          }
        return true;
      case GroupKind::CrossEntropy:
        if (why) *why = "no fused cross-entropy kernel on the CPU";
        return false;
    }
    return false;
  }
  switch (group.kind) {
    case GroupKind::Pointwise:
      return pointwise_codegen_supports(g, group, why);
    case GroupKind::Reduction:
      return reduction_codegen_supports(g, group, why);
    case GroupKind::GemmEpilogue:
      return contraction_group_lowerable(g, group, stored, why);
    case GroupKind::CrossEntropy:
      return cross_entropy_group_fusable(g, group, why);
  }
  return false;
}

std::optional<GroupStorage> cuda_lowering_storage(const Graph& g, const Group& group) {
  switch (group.kind) {
    case GroupKind::Pointwise:
      return pointwise_lowering_storage(g, group);
    case GroupKind::GemmEpilogue:
      return gemm_lowering_storage(g, group);
    case GroupKind::CrossEntropy:
      return cross_entropy_lowering_storage(g, group);
    case GroupKind::Reduction:
      return reduction_lowering_storage(g, group);
  }
  return std::nullopt;
}

std::unique_ptr<LoweredGroup> lower_cuda_group(const LoweringContext& ctx) {
  switch (ctx.group.kind) {
    case GroupKind::Pointwise:
      return lower_pointwise_cuda(ctx);
    case GroupKind::GemmEpilogue:
      return lower_gemm_cuda(ctx);
    case GroupKind::CrossEntropy:
      return lower_cross_entropy_cuda(ctx);
    case GroupKind::Reduction:
      return lower_reduction_cuda(ctx);
  }
  return nullptr;
}

}  // namespace ember::jit
