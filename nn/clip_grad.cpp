#include "nn/clip_grad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"

namespace ember::nn::utils {

namespace {
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, const char* who) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    EMBER_CHECK(params[i].defined(), who, ": parameter ", i, " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    EMBER_CHECK(is_floating(g.dtype()), who, ": the gradient of parameter ", i, " is ",
                dtype_name(g.dtype()), "; expected a floating dtype");
    if (!grads.empty())
      EMBER_CHECK(g.device() == grads[0].device(), who, ": the gradient of parameter ", i,
                  " is on ", g.device().str(), ", an earlier one on ", grads[0].device().str(),
                  "; all gradients must share a device");
    grads.push_back(std::move(g));
  }
  return grads;
}
}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  const char* who = "clip_grad_norm_";
  EMBER_CHECK(!std::isnan(max_norm), who, ": max_norm is NaN");
  EMBER_CHECK(std::isinf(norm_type) ? norm_type > 0 : norm_type >= 1, who,
              ": norm_type must be >= 1 or inf, got ", norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_of(params, who);
  if (grads.empty()) return zeros({});
  // Per-gradient norms (one launch for all of them), then the norm of those: PyTorch's order,
  // so the rounding matches.
  const Tensor norms = multi_norm(grads, norm_type);
  Tensor total;
  if (std::isinf(norm_type))
    total = amax(norms);
  else if (norm_type == 2)
    total = sqrt(sum(norms * norms));
  else
    total = pow(sum(pow(norms, norm_type)), 1.0 / norm_type);
  const Tensor scale = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  // float32 gradients in one multi-tensor launch (GradScaler's unscale: g * scale in float, as
  // PyTorch's _foreach_mul_; the inf flag it also sets is not needed here); others one by one.
  std::vector<Tensor> in;
  if (scale.dtype() == kFloat32) {
    in.push_back(scale.view({1}));
    in.push_back(zeros({}, TensorOptions(kFloat32).device(scale.device())));
  }
  for (const Tensor& g : grads) {
    if (!in.empty() && g.dtype() == kFloat32 && g.is_contiguous()) {
      in.push_back(g);
      continue;
    }
    Tensor t = g;
    t.mul_(scale.dtype() == g.dtype() ? scale : scale.to(g.dtype()));
  }
  if (in.size() > 2) {
    Attrs a;
    a.num_tensors = static_cast<int64_t>(in.size() - 2);
    a.grads_only = true;
    dispatch(OpId::amp_unscale, std::span<const Tensor>(in), a);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  const char* who = "clip_grad_value_";
  EMBER_CHECK(std::isfinite(clip_value) && clip_value >= 0, who,
              ": clip_value must be finite and >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& g : grads_of(params, who)) {
    Tensor t = g;
    t.copy_(clamp(g, -clip_value, clip_value));
  }
}

}  // namespace ember::nn::utils
