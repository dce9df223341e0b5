#include "nn/batch_norm.h"

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/init.h"

namespace ember::nn {
namespace functional {

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  const char* who = "batch_norm";
  EMBER_CHECK(x_in.defined() && x_in.dim() >= 2, who, ": expected an input [N, C, ...], got ",
              x_in.defined() ? x_in.sizes() : Shape{});
  EMBER_CHECK(is_floating(x_in.dtype()), who, ": expected a floating input, got ",
              dtype_name(x_in.dtype()));
  const int64_t C = x_in.size(1);
  for (const auto& [t, what] : {std::pair{running_mean, "running_mean"},
                                std::pair{running_var, "running_var"}, std::pair{weight, "weight"},
                                std::pair{bias, "bias"}})
    if (t.defined())
      EMBER_CHECK(t.dim() == 1 && t.size(0) == C && t.device() == x_in.device(), who, ": ", what,
                  " must be [", C, "] on ", x_in.device().str(), " for input ", x_in.sizes(),
                  ", got ", t.sizes(), " on ", t.device().str());
  EMBER_CHECK(running_mean.defined() == running_var.defined(), who,
              ": running_mean and running_var come together");
  EMBER_CHECK(eps >= 0 && momentum >= 0 && momentum <= 1, who, ": eps ", eps, " and momentum ",
              momentum, " must be non-negative (momentum at most 1)");
  const bool low = x_in.dtype() == kFloat16 || x_in.dtype() == kBFloat16;
  const Tensor x = low ? x_in.to(kFloat32) : x_in;  // the JIT fuses the cast into its reader
  Shape bshape;
  for (int d = 0; d < x.dim(); ++d) bshape.push_back(d == 1 ? C : 1);
  auto per_channel = [&](const Tensor& t) { return t.to(x.dtype()).view(bshape); };
  Tensor y;
  const bool batch_stats = training || !running_mean.defined();
  if (batch_stats) {
    Dims dims = {0};
    for (int d = 2; d < x.dim(); ++d) dims.push_back(d);
    const int64_t n = C == 0 ? 0 : x.numel() / C;
    EMBER_CHECK(!training || n > 1, who, ": training needs more than one value per channel, got input ",
                x_in.sizes());
    // Gradients take the short way. The variance is of x - mean with the mean held constant: its
    // derivative through the mean is zero (the deviations sum to zero), which autograd would
    // otherwise compute as a reduction over x. The mean's gradient goes through the per-channel
    // shift, whose value is the bias (mean.detach() - mean is zero) and whose gradient reaches the
    // mean as -scale * sum(dy); as (x - mean) * scale + bias autograd would form it from
    // sum(dy * scale), another reduction over x. So the backward reduces x-sized tensors twice,
    // sum(dy) and sum(dy * (x - mean)).
    const Tensor mean = ember::mean(x, dims, true), fixed_mean = mean.detach();
    const Tensor centered = sub(x, fixed_mean);
    const Tensor var = ember::mean(mul(centered, centered), dims, true);  // biased, for normalising
    if (training && running_mean.defined()) {
      NoGradGuard no_grad;
      // Updated through [1, C, 1, ...] views of the buffers (the writes land in them), the
      // statistics' own shape, so each update is one pointwise chain.
      const double unbias = n > 1 ? static_cast<double>(n) / static_cast<double>(n - 1) : 1.0;
      Tensor rm = running_mean.view(bshape), rv = running_var.view(bshape);
      rm.copy_(add(mul(rm, 1 - momentum), mul(fixed_mean.to(rm.dtype()), momentum)));
      rv.copy_(add(mul(rv, 1 - momentum),
                   mul(var.detach().to(rv.dtype()), momentum * unbias)));
    }
    Tensor scale = rsqrt(add(var, eps));
    if (weight.defined()) scale = mul(scale, per_channel(weight));
    Tensor shift = mul(sub(fixed_mean, mean), scale);
    if (bias.defined()) shift = add(shift, per_channel(bias));
    y = add(mul(centered, scale), shift);
  } else {
    Tensor scale = rsqrt(add(running_var.to(x.dtype()), eps));
    if (weight.defined()) scale = mul(scale, weight.to(x.dtype()));
    y = mul(sub(x, per_channel(running_mean)), per_channel(scale));
    if (bias.defined()) y = add(y, per_channel(bias));
  }
  return low ? y.to(x_in.dtype()) : y;
}

}  // namespace functional

template <int Dims>
BatchNormImpl<Dims>::BatchNormImpl(const BatchNormOptions& o) : options(o) {
  EMBER_CHECK(o.num_features() > 0, Dims == 1 ? "BatchNorm1d" : "BatchNorm2d",
              ": num_features must be positive, got ", o.num_features());
  const int64_t C = o.num_features();
  if (o.affine()) {
    weight = register_parameter("weight", empty({C}));
    bias = register_parameter("bias", empty({C}));
  }
  if (o.track_running_stats()) {
    running_mean = register_buffer("running_mean", zeros({C}));
    running_var = register_buffer("running_var", ones({C}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, TensorOptions(kInt64)));
  }
  reset_parameters();
}

template <int Dims>
void BatchNormImpl<Dims>::reset_running_stats() {
  if (!running_mean.defined()) return;
  NoGradGuard no_grad;
  running_mean.fill_(0.0);
  running_var.fill_(1.0);
  num_batches_tracked.fill_(0);
}

template <int Dims>
void BatchNormImpl<Dims>::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

template <int Dims>
Tensor BatchNormImpl<Dims>::forward(const Tensor& x) {
  const char* who = Dims == 1 ? "BatchNorm1d" : "BatchNorm2d";
  EMBER_CHECK(x.defined(), who, ": input is an undefined tensor");
  if (Dims == 1)
    EMBER_CHECK(x.dim() == 2 || x.dim() == 3, who, ": expected a 2-D or 3-D input, got shape ",
                x.sizes());
  else
    EMBER_CHECK(x.dim() == 4, who, ": expected a 4-D input [N, C, H, W], got shape ", x.sizes());
  EMBER_CHECK(x.size(1) == options.num_features(), who, ": input of shape ", x.sizes(), " has ",
              x.size(1), " channels, expected num_features = ", options.num_features());
  const bool training = is_training();
  if (training && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return functional::batch_norm(x, running_mean, running_var, weight, bias, training,
                                options.momentum(), options.eps());
}

template <int Dims>
void BatchNormImpl<Dims>::pretty_print(std::ostream& os) const {
  os << (Dims == 1 ? "BatchNorm1d(" : "BatchNorm2d(") << options.num_features()
     << ", eps=" << options.eps() << ", momentum=" << options.momentum()
     << ", affine=" << (options.affine() ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false") << ")";
}

template class BatchNormImpl<1>;
template class BatchNormImpl<2>;

}  // namespace ember::nn
