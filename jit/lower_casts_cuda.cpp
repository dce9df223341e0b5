// The CUDA lowering of Casts groups (jit/lower.h): independent dtype casts of dense tensors, of
// any shapes, as one multi-tensor launch (kernels/cuda/multi_cast.h) that converts each element
// as the eager cast kernel does. The analysis is host code compiled in every build.
#include <vector>

#include "jit/log.h"
#include "jit/lower.h"
#include "jit/lower_util.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/multi_cast.h"
#endif

namespace ember::jit {
namespace {

using lower_util::dense;
using lower_util::fail;

}  // namespace

bool casts_group_lowerable(const Graph& g, const Group& group, std::string* why) {
#if defined(EMBER_WITH_CUDA)
  if (group.kind != GroupKind::Casts) return fail(why, "not a casts group");
  if (group.nodes.size() < 2) return fail(why, "a cast alone");
  Device dev;
  for (size_t i = 0; i < group.nodes.size(); ++i) {
    const Node& n = g.nodes[group.nodes[i]];
    if (n.op != OpId::cast || n.inplace || n.out == kNoValue || n.inputs.size() != 1)
      return fail(why, "a member is not an out-of-place cast");
    const Value& in = g.values[n.inputs[0]];
    const Value& out = g.values[n.out];
    if (i == 0) dev = out.device;
    if (!out.device.is_cuda() || out.device != dev || in.device != dev)
      return fail(why, "not all on one GPU");
    if (!kernels::cuda::cast_many_supports(in.dtype, out.dtype))
      return fail(why, "a cast between dtypes the multi-tensor kernel does not convert");
    if (!dense(in) || !dense(out)) return fail(why, "a cast of a strided tensor");
    // A member reading another's result would need it first: they are independent by
    // construction (the fusion rule), checked here so no other path can build one.
    for (int32_t m : group.nodes)
      if (g.nodes[m].out == n.inputs[0]) return fail(why, "a cast of another member's result");
  }
  return true;
#else
  (void)g;
  (void)group;
  return fail(why, "no CUDA in this build");
#endif
}

#if defined(EMBER_WITH_CUDA)
namespace {

namespace kc = kernels::cuda;

class LoweredCasts final : public LoweredGroup {
 public:
  explicit LoweredCasts(const LoweringContext& ctx) : slots_(&ctx.slots) {
    const Graph& g = ctx.graph;
    for (int32_t m : ctx.group.nodes) {
      const Node& n = g.nodes[m];
      const Value& in = g.values[n.inputs[0]];
      const Value& out = g.values[n.out];
      device_ = out.device.index;
      Member c;
      c.in = n.inputs[0];
      c.out = n.out;
      members_.push_back(c);
      kc::CastJob j;
      j.numel = out.numel();
      j.from = in.dtype;
      j.to = out.dtype;
      jobs_.push_back(j);
    }
    what_ = "multi-tensor cast of " + std::to_string(members_.size()) + " tensors";
    if (log_enabled(Log::code)) log(Log::code, "casts lowering: " + what_);
  }

  void run() override {
    const auto& s = *slots_;
    for (size_t k = 0; k < members_.size(); ++k) {
      jobs_[k].src = s[members_[k].in]->data();
      jobs_[k].dst = s[members_[k].out]->data();
    }
    kc::cast_many(device_, jobs_);
  }

  int32_t kernels() const override {
    return static_cast<int32_t>((jobs_.size() + kc::kMultiCastMax - 1) / kc::kMultiCastMax);
  }
  // Reads its inputs and writes its outputs, nothing shared.
  bool self_contained() const override { return true; }
  std::string describe() const override { return what_; }

 private:
  struct Member {
    ValueId in = kNoValue, out = kNoValue;
  };
  const std::vector<std::shared_ptr<TensorImpl>>* slots_;
  std::vector<Member> members_;
  std::vector<kc::CastJob> jobs_;
  int device_ = 0;
  std::string what_;
};

}  // namespace

std::optional<GroupStorage> casts_lowering_storage(const Graph& g, const Group& group) {
  if (!casts_group_lowerable(g, group)) return std::nullopt;
  return GroupStorage::None;
}

std::unique_ptr<LoweredGroup> lower_casts_cuda(const LoweringContext& ctx) {
  if (!casts_group_lowerable(ctx.graph, ctx.group)) return nullptr;
  return std::make_unique<LoweredCasts>(ctx);
}

#else  // CPU-only build: casts run one by one.

std::optional<GroupStorage> casts_lowering_storage(const Graph&, const Group&) {
  return std::nullopt;
}
std::unique_ptr<LoweredGroup> lower_casts_cuda(const LoweringContext&) { return nullptr; }

#endif

}  // namespace ember::jit
