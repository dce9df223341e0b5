// The CUDA lowering of the cross-entropy pair (jit/lower.h): the forward and its backward over
// the same logits and target as one kernel (kernels/cuda/cross_entropy_fused.h) that computes
// exactly what the eager pair computes. The analysis is host code compiled in every build.
#include <initializer_list>
#include <string_view>
#include <type_traits>

#include "jit/log.h"
#include "jit/lower.h"
#include "jit/lower_util.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/cross_entropy_fused.h"
#endif

namespace ember::jit {
namespace {

using lower_util::dense;
using lower_util::fail;
using lower_util::join;

struct CeMatch {
  ValueId logits = kNoValue, target = kNoValue, grad = kNoValue;
  ValueId loss = kNoValue, dlogits = kNoValue;
  Attrs attrs;
};

bool match_ce(const Graph& g, const Group& grp, CeMatch& out, std::string* why) {
  if (grp.kind != GroupKind::CrossEntropy) return fail(why, "not a cross-entropy group");
  if (grp.nodes.size() != 2) return fail(why, "not a forward + backward pair");
  const Node& f = g.nodes[grp.nodes[0]];
  const Node& b = g.nodes[grp.nodes[1]];
  if (f.op != OpId::cross_entropy || b.op != OpId::cross_entropy_backward || f.inplace ||
      b.inplace || f.inputs.size() != 2 || b.inputs.size() != 3 || f.out == kNoValue ||
      b.out == kNoValue)
    return fail(why, "not cross_entropy then cross_entropy_backward");
  if (b.inputs[1] != f.inputs[0] || b.inputs[2] != f.inputs[1] ||
      b.attrs.ignore_index != f.attrs.ignore_index ||
      b.attrs.label_smoothing != f.attrs.label_smoothing || b.attrs.reduction != f.attrs.reduction)
    return fail(why, "the backward is over other logits, targets or loss attributes");
  const Value& x = g.values[f.inputs[0]];
  const Value& t = g.values[f.inputs[1]];
  const Value& gr = g.values[b.inputs[0]];
  const Value& l = g.values[f.out];
  const Value& dx = g.values[b.out];
  if (!is_floating(x.dtype) || gr.dtype != x.dtype || l.dtype != x.dtype || dx.dtype != x.dtype ||
      t.dtype != kInt64)
    return fail(why, "dtypes do not fit");
  const bool reduced = f.attrs.reduction != LossReduction::None;
  // A reduced loss's gradient may be a 0-dim host tensor: the kernel takes it by value.
  const bool host_grad = reduced && gr.device.is_cpu() && gr.shape.empty();
  for (const Value* v : {&x, &t, &gr, &l, &dx})
    if ((v != &gr || !host_grad) && (!v->device.is_cuda() || v->device != x.device))
      return fail(why, "not all on one GPU");
  if (x.shape.size() != 2 || t.shape != Shape{x.shape[0]} ||
      (reduced ? l.shape != Shape{} || gr.shape != Shape{} : l.shape != t.shape) ||
      dx.shape != x.shape || (gr.shape.size() != 0 && gr.shape != t.shape))
    return fail(why, "shapes do not fit");
  if (x.shape[1] == 0) return fail(why, "no classes");
  if (!dense(x) || !dense(t) || !dense(l) || !dense(dx))
    return fail(why, "logits, target or results are not contiguous");
  out.logits = f.inputs[0];
  out.target = f.inputs[1];
  out.grad = b.inputs[0];
  out.loss = f.out;
  out.dlogits = b.out;
  out.attrs = f.attrs;
  return true;
}

#if defined(EMBER_WITH_CUDA)
namespace kc = kernels::cuda;

class LoweredCrossEntropy final : public LoweredGroup {
 public:
  LoweredCrossEntropy(const LoweringContext& ctx, const CeMatch& m) : slots_(&ctx.slots), m_(m) {
    const Graph& g = ctx.graph;
    const Value& x = g.values[m.logits];
    const Value& gr = g.values[m.grad];
    device_ = x.device.index;
    dtype_ = x.dtype;
    n_ = x.shape[0];
    c_ = x.shape[1];
    grad_stride_ = gr.shape.size() == 0 ? 0 : gr.strides[0];
    host_grad_ = gr.device.is_cpu();
    const char* red = m.attrs.reduction == LossReduction::Mean  ? " (mean)"
                      : m.attrs.reduction == LossReduction::Sum ? " (sum)"
                                                                : "";
    what_ = join({"fused cross_entropy forward+backward ", x.shape.str(), red});
    if (log_enabled(Log::code)) log(Log::code, join({"cross-entropy lowering: ", what_}));
  }

  void run() override {
    const auto& s = *slots_;
    kc::CrossEntropyFusedCall c;
    c.device = device_;
    c.dtype = dtype_;
    c.logits = s[m_.logits]->data();
    c.target = reinterpret_cast<const int64_t*>(s[m_.target]->data());
    if (host_grad_) {  // its current value, like the pointwise kernels' inline scalars
      c.grad_value = kc::cross_entropy_grad_value(dtype_, s[m_.grad]->data());
    } else {
      c.grad = s[m_.grad]->data();
    }
    c.grad_stride = grad_stride_;
    c.loss = s[m_.loss]->data();
    c.dlogits = s[m_.dlogits]->data();
    c.n = n_;
    c.c = c_;
    c.ignore_index = m_.attrs.ignore_index;
    c.label_smoothing = m_.attrs.label_smoothing;
    c.reduction = m_.attrs.reduction;
    kc::cross_entropy_fused(c);
  }

  int32_t kernels() const override {
    if (m_.attrs.reduction == LossReduction::None) return 1;
    return kc::cross_entropy_reduced_kernels(n_, c_, m_.attrs.reduction == LossReduction::Mean,
                                             device_);
  }
  std::string describe() const override { return what_; }

 private:
  const std::vector<std::shared_ptr<TensorImpl>>* slots_;
  CeMatch m_;
  int device_ = 0;
  DType dtype_ = kFloat32;
  int64_t n_ = 0, c_ = 0, grad_stride_ = 0;
  bool host_grad_ = false;
  std::string what_;
};
#endif  // EMBER_WITH_CUDA

}  // namespace

bool cross_entropy_group_fusable(const Graph& g, const Group& group, std::string* why) {
  CeMatch m;
  return match_ce(g, group, m, why);
}

#if defined(EMBER_WITH_CUDA)

std::optional<GroupStorage> cross_entropy_lowering_storage(const Graph& g, const Group& group) {
  CeMatch m;
  if (!match_ce(g, group, m, nullptr)) return std::nullopt;
  return GroupStorage::Materialize;
}

std::unique_ptr<LoweredGroup> lower_cross_entropy_cuda(const LoweringContext& ctx) {
  CeMatch m;
  if (!match_ce(ctx.graph, ctx.group, m, nullptr)) return nullptr;
  return std::make_unique<LoweredCrossEntropy>(ctx, m);
}

#else  // CPU-only build: the pair runs op by op.

std::optional<GroupStorage> cross_entropy_lowering_storage(const Graph&, const Group&) {
  return std::nullopt;
}
std::unique_ptr<LoweredGroup> lower_cross_entropy_cuda(const LoweringContext&) { return nullptr; }

#endif

}  // namespace ember::jit
