// The CUDA lowering of fused pointwise groups: the kernel jit/pointwise_codegen.cpp writes,
// compiled with NVRTC (or taken from the kernel caches) when the executor builds the lowering,
// then launched once per replay with the slots' current addresses.
#include <atomic>

#include "jit/lower.h"
#include "jit/pointwise_codegen.h"

#if defined(EMBER_WITH_CUDA)
#include <algorithm>
#include <cstring>

#include "core/dispatch.h"
#include "core/error.h"
#include "jit/disk_store.h"
#include "jit/log.h"
#include "kernels/cuda/nvrtc.h"
#endif

namespace ember::jit {
namespace {

std::atomic<int64_t> g_groups{0}, g_compiled{0}, g_from_disk{0}, g_from_memory{0}, g_fallbacks{0};
std::atomic<bool> g_fail_for_testing{false};

#if defined(EMBER_WITH_CUDA)
namespace rtc = kernels::cuda::nvrtc;

constexpr int kThreads = 256;  // fused::kThreads (fused_pointwise.cuh)

std::string cache_tag() { return "pointwise_v" + std::to_string(kPointwiseCodegenVersion); }

unsigned grid_for(int64_t items, int sms) {
  // Enough blocks to fill every SM at full occupancy; the grid-stride loop covers the rest.
  const int64_t cap = static_cast<int64_t>(sms) * (2048 / kThreads);
  const int64_t need = (items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(need, cap)));
}

class PointwiseLowering final : public LoweredGroup {
 public:
  explicit PointwiseLowering(const LoweringContext& ctx)
      : kernel_(generate_pointwise_kernel(ctx.graph, ctx.group)) {
    EMBER_CHECK(!g_fail_for_testing.load(), "fused pointwise kernel: failure injected by a test");
    const Value& first = ctx.graph.values[ctx.graph.nodes[ctx.group.nodes.front()].out];
    dev_ = first.device.index;
    const std::string tag = cache_tag();
    if (log_enabled(Log::code))
      log(Log::code, "fused pointwise kernel: " + kernel_.summary + "\n" + kernel_.source);
    if (kernel_.numel == 0) return;  // nothing ever runs
    const char* names[2] = {FusedPointwiseKernel::kElementKernel,
                            FusedPointwiseKernel::kVectorKernel};
    const rtc::Module m = rtc::get_module(kernel_.source, tag,
                                          std::span<const char* const>(names, kernel_.vec ? 2 : 1),
                                          dev_, disk_store());
    switch (m.origin) {
      case rtc::Origin::Memory:
        ++g_from_memory;
        break;
      case rtc::Origin::Store:
        ++g_from_disk;
        break;
      case rtc::Origin::Compiled:
        ++g_compiled;
        break;
    }
    ++g_groups;
    log(Log::cache, "kernel " + m.key + " (" + kernel_.summary + ") from " +
                        rtc::origin_name(m.origin) + " in " +
                        std::to_string(static_cast<int>(m.milliseconds * 1000)) + " us");
    element_ = m.kernels[0];
    vector_ = kernel_.vec ? m.kernels[1] : nullptr;
    const int sms = rtc::sm_count(dev_);
    element_grid_ = grid_for(kernel_.numel, sms);
    vector_grid_ = kernel_.vec ? grid_for(kernel_.numel / kernel_.vec, sms) : 0;
    element_what_ = std::string("cudaLaunchKernel(") + FusedPointwiseKernel::kElementKernel + ": " +
                    kernel_.summary + ")";
    vector_what_ = std::string("cudaLaunchKernel(") + FusedPointwiseKernel::kVectorKernel + ": " +
                   kernel_.summary + ")";
    for (const FusedOperand& o : kernel_.operands) {
      Bound b;
      b.slot = ctx.slots[o.value];
      b.word = o.slot;
      b.bytes = o.elem_size;
      b.offset_bytes = static_cast<uintptr_t>(o.elem_offset * o.elem_size);
      b.align_mask = o.vec_align > 0 ? static_cast<uintptr_t>(o.vec_align - 1) : 0;
      (o.scalar ? scalars_ : pointers_).push_back(std::move(b));
    }
    words_.assign(static_cast<size_t>(kernel_.words), 0);
  }

  void run() override {
    if (kernel_.numel == 0) return;
    uintptr_t misaligned = 0;
    for (const Bound& b : pointers_) {
      const auto p = reinterpret_cast<uintptr_t>(b.slot->data()) + b.offset_bytes;
      words_[b.word] = static_cast<uint64_t>(p);
      misaligned |= p & b.align_mask;
    }
    // A 0-dim host tensor: its current value, like the eager kernels' inline scalars.
    for (const Bound& b : scalars_) {
      uint64_t bits = 0;
      std::memcpy(&bits, b.slot->data(), static_cast<size_t>(b.bytes));
      words_[b.word] = bits;
    }
    if (vector_ && misaligned == 0)
      rtc::launch(vector_, vector_grid_, kThreads, words_.data(), dev_, vector_what_.c_str());
    else
      rtc::launch(element_, element_grid_, kThreads, words_.data(), dev_, element_what_.c_str());
  }

  int32_t kernels() const override { return kernel_.numel == 0 ? 0 : 1; }
  bool self_contained() const override { return true; }
  std::string describe() const override { return "nvrtc pointwise kernel: " + kernel_.summary; }

 private:
  struct Bound {
    std::shared_ptr<TensorImpl> slot;
    int32_t word = 0;
    int64_t bytes = 0;
    uintptr_t offset_bytes = 0;  // a cat piece's place in the cat's result
    uintptr_t align_mask = 0;
  };

  FusedPointwiseKernel kernel_;
  int dev_ = 0;
  const void* element_ = nullptr;
  const void* vector_ = nullptr;
  unsigned element_grid_ = 1, vector_grid_ = 1;
  std::string element_what_, vector_what_;
  std::vector<Bound> pointers_, scalars_;
  std::vector<uint64_t> words_;  // the argument block: pointers, then scalar bits
};

#endif

}  // namespace

std::optional<GroupStorage> pointwise_lowering_storage(const Graph& g, const Group& group) {
#if defined(EMBER_WITH_CUDA)
  std::string why;
  if (pointwise_codegen_supports(g, group, &why)) return GroupStorage::None;
  if (group.kind == GroupKind::Pointwise)
    log(Log::fusion, "pointwise group not lowered to a fused kernel: " + why);
#else
  (void)g;
  (void)group;
#endif
  return std::nullopt;
}

std::optional<GeneratedSource> pointwise_generated_source(const Graph& g, const Group& group) {
#if defined(EMBER_WITH_CUDA)
  if (group.kind != GroupKind::Pointwise || !pointwise_codegen_supports(g, group))
    return std::nullopt;
  FusedPointwiseKernel k = generate_pointwise_kernel(g, group);
  if (k.numel == 0) return std::nullopt;  // never launched, never compiled
  return GeneratedSource{std::move(k.source), cache_tag()};
#else
  (void)g;
  (void)group;
  return std::nullopt;
#endif
}

std::unique_ptr<LoweredGroup> lower_pointwise_cuda(const LoweringContext& ctx) {
#if defined(EMBER_WITH_CUDA)
  if (!pointwise_codegen_supports(ctx.graph, ctx.group)) return nullptr;
  try {
    return std::make_unique<PointwiseLowering>(ctx);
  } catch (const std::exception& e) {
    ++g_fallbacks;
    log(Log::perf, std::string("fused pointwise kernel unavailable, running the group member by "
                               "member: ") +
                       e.what());
    return lower_member_by_member(ctx, std::string("no generated kernel: ") + e.what());
  }
#else
  (void)ctx;
  return nullptr;
#endif
}

void set_pointwise_kernel_failure_for_testing(bool fail) { g_fail_for_testing.store(fail); }

PointwiseLoweringStats pointwise_lowering_stats() {
  return {g_groups.load(), g_compiled.load(), g_from_disk.load(), g_from_memory.load(),
          g_fallbacks.load()};
}

}  // namespace ember::jit
