// The CUDA lowering of fused Reduction groups: the kernel jit/reduction_codegen.cpp writes,
// compiled with NVRTC (or taken from the kernel caches) when the executor builds the lowering,
// then launched once per replay with the slots' current addresses. A split reduction's partial
// states go in the workspace the memory plan placed for the group (cuda_lowering_workspace);
// its tickets, one per tile, come from the device's ticket pool (kernels/cuda/tickets.h) once.
// run() only fills the argument block and launches, so it can be captured.
#include <atomic>

#include "jit/lower.h"
#include "jit/reduction_codegen.h"

#if defined(EMBER_WITH_CUDA)
#include <algorithm>
#include <cstring>
#include <utility>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"
#include "jit/disk_store.h"
#include "jit/log.h"
#include "kernels/cuda/nvrtc.h"
#include "kernels/cuda/tickets.h"
#endif

namespace ember::jit {
namespace {

std::atomic<int64_t> g_groups{0}, g_compiled{0}, g_from_disk{0}, g_from_memory{0}, g_fallbacks{0};
std::atomic<bool> g_fail_for_testing{false};

#if defined(EMBER_WITH_CUDA)
namespace rtc = kernels::cuda::nvrtc;

std::string cache_tag() { return "reduction_v" + std::to_string(kReductionCodegenVersion); }

// The device the group's reduction reads from.
int reduction_device(const Graph& g, const Group& group) {
  return g.values[g.nodes[group.nodes.back()].inputs[0]].device.index;
}

class ReductionLowering final : public LoweredGroup {
 public:
  explicit ReductionLowering(const LoweringContext& ctx) {
    dev_ = reduction_device(ctx.graph, ctx.group);
    kernel_ = generate_reduction_kernel(ctx.graph, ctx.group, rtc::sm_count(dev_));
    EMBER_CHECK(!g_fail_for_testing.load(), "fused reduction kernel: failure injected by a test");
    if (log_enabled(Log::code))
      log(Log::code, "fused reduction kernel: " + kernel_.summary + "\n" + kernel_.source);
    const std::string tag = cache_tag();
    const char* names[1] = {FusedReductionKernel::kKernel};
    const rtc::Module m = rtc::get_module(
        kernel_.source, tag, std::span<const char* const>(names, 1), dev_, disk_store());
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
    fn_ = m.kernels[0];
    what_ = std::string("cudaLaunchKernel(") + FusedReductionKernel::kKernel + ": " +
            kernel_.summary + ")";
    for (const FusedOperand& o : kernel_.operands) {
      Bound b;
      b.slot = ctx.slots[o.value];
      b.word = o.slot;
      b.bytes = o.elem_size;
      (o.scalar ? scalars_ : pointers_).push_back(std::move(b));
    }
    words_.assign(static_cast<size_t>(kernel_.words), 0);
    // Scratch: the partial states live in the workspace the memory plan gave the group (bytes
    // dead while it runs) or, built without one, in memory of its own; the tickets are a range of
    // the device's pool, zero before the first launch (the kernel leaves them at zero).
    const Device d = Device::cuda(dev_);
    if (kernel_.partial_bytes > 0) {
      if (ctx.workspace.storage && ctx.workspace.bytes >= kernel_.partial_bytes) {
        workspace_ = ctx.workspace;
      } else {
        partial_ = empty({(kernel_.partial_bytes + 7) / 8}, TensorOptions(kInt64).device(d));
        words_[kernel_.partial_word] = reinterpret_cast<uintptr_t>(partial_.raw_data());
      }
      tickets_ = Tickets(dev_, kernel_.ticket_count);
      words_[kernel_.ticket_word] = reinterpret_cast<uintptr_t>(tickets_.ptr);
    }
  }

  std::pair<void*, int64_t> workspace_range() const override {
    if (!workspace_.storage) return {nullptr, 0};
    return {workspace_.data(), kernel_.partial_bytes};
  }

  void run() override {
    if (workspace_.storage)
      words_[kernel_.partial_word] = reinterpret_cast<uintptr_t>(workspace_.data());
    for (const Bound& b : pointers_)
      words_[b.word] = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(b.slot->data()));
    for (const Bound& b : scalars_) {
      uint64_t bits = 0;
      std::memcpy(&bits, b.slot->data(), static_cast<size_t>(b.bytes));
      words_[b.word] = bits;
    }
    rtc::launch(fn_, static_cast<unsigned>(kernel_.grid()), static_cast<unsigned>(kernel_.block()),
                words_.data(), dev_, what_.c_str());
  }

  int32_t kernels() const override { return 1; }
  bool self_contained() const override { return true; }
  std::string describe() const override { return "nvrtc reduction kernel: " + kernel_.summary; }

 private:
  struct Bound {
    std::shared_ptr<TensorImpl> slot;
    int32_t word = 0;
    int64_t bytes = 0;
  };

  FusedReductionKernel kernel_;
  int dev_ = 0;
  const void* fn_ = nullptr;
  std::string what_;
  std::vector<Bound> pointers_, scalars_;
  std::vector<uint64_t> words_;  // pointers, scalar bits, partials, tickets
  GroupWorkspace workspace_;     // where the partials go, when the plan gave the group one
  Tensor partial_;
  // The tickets' range of the device's pool (kernels/cuda/tickets.h), returned when the lowering
  // goes.
  struct Tickets {
    int dev = 0;
    unsigned* ptr = nullptr;
    int64_t count = 0;
    Tickets() = default;
    Tickets(int d, int64_t n) : dev(d), ptr(kernels::cuda::acquire_tickets(d, n)), count(n) {}
    Tickets(const Tickets&) = delete;
    Tickets& operator=(Tickets&& o) noexcept {
      std::swap(dev, o.dev);
      std::swap(ptr, o.ptr);
      std::swap(count, o.count);
      return *this;
    }
    ~Tickets() { kernels::cuda::release_tickets(dev, ptr, count); }
  } tickets_;
};

#endif

}  // namespace

std::optional<GroupStorage> reduction_lowering_storage(const Graph& g, const Group& group) {
#if defined(EMBER_WITH_CUDA)
  std::string why;
  if (reduction_codegen_supports(g, group, &why)) return GroupStorage::None;
  if (group.kind == GroupKind::Reduction)
    log(Log::fusion, "reduction group not lowered to a fused kernel: " + why);
#else
  (void)g;
  (void)group;
#endif
  return std::nullopt;
}

std::optional<GeneratedSource> reduction_generated_source(const Graph& g, const Group& group) {
#if defined(EMBER_WITH_CUDA)
  if (group.kind != GroupKind::Reduction || !reduction_codegen_supports(g, group))
    return std::nullopt;
  FusedReductionKernel k =
      generate_reduction_kernel(g, group, rtc::sm_count(reduction_device(g, group)));
  return GeneratedSource{std::move(k.source), cache_tag()};
#else
  (void)g;
  (void)group;
  return std::nullopt;
#endif
}

int64_t reduction_lowering_workspace(const Graph& g, const Group& group) {
#if defined(EMBER_WITH_CUDA)
  if (group.kind != GroupKind::Reduction || !reduction_codegen_supports(g, group)) return 0;
  return generate_reduction_kernel(g, group, rtc::sm_count(reduction_device(g, group)))
      .partial_bytes;
#else
  (void)g;
  (void)group;
  return 0;
#endif
}

std::unique_ptr<LoweredGroup> lower_reduction_cuda(const LoweringContext& ctx) {
#if defined(EMBER_WITH_CUDA)
  if (!reduction_codegen_supports(ctx.graph, ctx.group)) return nullptr;
  try {
    return std::make_unique<ReductionLowering>(ctx);
  } catch (const std::exception& e) {
    ++g_fallbacks;
    log(Log::perf, std::string("fused reduction kernel unavailable, running the group member by "
                               "member: ") +
                       e.what());
    return lower_member_by_member(ctx, std::string("no generated reduction kernel: ") + e.what());
  }
#else
  (void)ctx;
  return nullptr;
#endif
}

void set_reduction_kernel_failure_for_testing(bool fail) { g_fail_for_testing.store(fail); }

ReductionLoweringStats reduction_lowering_stats() {
  return {g_groups.load(), g_compiled.load(), g_from_disk.load(), g_from_memory.load(),
          g_fallbacks.load()};
}

}  // namespace ember::jit
