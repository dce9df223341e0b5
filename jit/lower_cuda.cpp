// Picks the lowering of each fused group kind, and answers the fusion pass's question of whether
// a proposed group has one. Each lowering lives in its own file.
#include "jit/lower.h"
#include "jit/pointwise_codegen.h"
#include "jit/reduction_codegen.h"

#if defined(EMBER_WITH_CUDA)
#include <chrono>

#include "jit/disk_store.h"
#include "jit/log.h"
#include "kernels/cuda/nvrtc.h"
#endif

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
      case GroupKind::Casts:
        if (why) *why = "casts on the CPU run one by one (nothing to gain from one launch)";
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
    case GroupKind::Casts:
      return casts_group_lowerable(g, group, why);
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
    case GroupKind::Casts:
      return casts_lowering_storage(g, group);
    case GroupKind::Reduction:
      return reduction_lowering_storage(g, group);
  }
  return std::nullopt;
}

int64_t cuda_lowering_workspace(const Graph& g, const Group& group) {
  switch (group.kind) {
    case GroupKind::GemmEpilogue:
      return gemm_lowering_workspace(g, group);
    case GroupKind::Reduction:
      return reduction_lowering_workspace(g, group);
    case GroupKind::Pointwise:
    case GroupKind::CrossEntropy:
    case GroupKind::Casts:
      return 0;
  }
  return 0;
}

std::unique_ptr<LoweredGroup> lower_cuda_group(const LoweringContext& ctx) {
  switch (ctx.group.kind) {
    case GroupKind::Pointwise:
      return lower_pointwise_cuda(ctx);
    case GroupKind::GemmEpilogue:
      return lower_gemm_cuda(ctx);
    case GroupKind::CrossEntropy:
      return lower_cross_entropy_cuda(ctx);
    case GroupKind::Casts:
      return lower_casts_cuda(ctx);
    case GroupKind::Reduction:
      return lower_reduction_cuda(ctx);
  }
  return nullptr;
}

namespace {

std::optional<GeneratedSource> generated_source(const Graph& g, const Group& group) {
  switch (group.kind) {
    case GroupKind::Pointwise:
      return pointwise_generated_source(g, group);
    case GroupKind::Reduction:
      return reduction_generated_source(g, group);
    case GroupKind::GemmEpilogue:
      if (std::optional<Group> tail = gemm_tail_group(g, group)) return generated_source(g, *tail);
      return std::nullopt;
    case GroupKind::CrossEntropy:
    case GroupKind::Casts:
      return std::nullopt;  // a handwritten kernel
  }
  return std::nullopt;
}

}  // namespace

void precompile_cuda_lowerings(const Graph& g, const std::vector<int32_t>& groups) {
#if defined(EMBER_WITH_CUDA)
  namespace rtc = kernels::cuda::nvrtc;
  std::vector<rtc::KernelSource> sources;
  int dev = -1;
  for (int32_t gi : groups) {
    const Group& group = g.groups[static_cast<size_t>(gi)];
    const Device d = group_device(g, group);
    if (!d.is_cuda()) continue;
    if (dev < 0) dev = d.index;
    if (d.index != dev) continue;  // one device per executable; others compile as they come
    try {
      if (std::optional<GeneratedSource> s = generated_source(g, group))
        sources.push_back({std::move(s->source), std::move(s->tag)});
    } catch (const std::exception& e) {
      // The lowering meets the same problem and decides what to do about it.
      log(Log::perf, std::string("precompile: group skipped: ") + e.what());
    }
  }
  if (dev < 0 || sources.size() < 2) return;
  const auto t0 = std::chrono::steady_clock::now();
  const rtc::PrecompileStats before = rtc::precompile_stats();
  rtc::precompile(sources, dev, disk_store());
  if (log_enabled(Log::perf)) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const rtc::PrecompileStats after = rtc::precompile_stats();
    log(Log::perf,
        "precompiled " + std::to_string(after.compiled - before.compiled) + " (" +
            std::to_string(after.in_workers - before.in_workers) + " in worker processes; read " +
            std::to_string(after.from_store - before.from_store) + " from the disk cache) of " +
            std::to_string(sources.size()) + " generated kernels, up to " +
            std::to_string(rtc::default_compile_threads()) + " at once, in " + std::to_string(ms) +
            " ms");
  }
#else
  (void)g;
  (void)groups;
#endif
}

void drop_precompiled_kernels() {
#if defined(EMBER_WITH_CUDA)
  kernels::cuda::nvrtc::drop_precompiled();
#endif
}

}  // namespace ember::jit
