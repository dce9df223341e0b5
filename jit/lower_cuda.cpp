// Picks the CUDA lowering of each fused group kind. Each lowering lives in its own file; kinds
// (or groups) without one run op by op on the eager kernels.
#include "jit/lower.h"

namespace ember::jit {

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
