// Layers as functions: activations, dropout, linear, flatten, layer norm, embedding.
#include "nn/functional.h"

#include "core/autocast.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/ops.h"

namespace ember::nn {
namespace detail {
namespace {

void check_defined(const Tensor& t, const char* who, const char* what) {
  EMBER_CHECK(t.defined(), who, ": ", what, " is an undefined tensor");
}

void check_floating(const Tensor& t, const char* who, const char* what) {
  EMBER_CHECK(is_floating(t.dtype()), who, ": ", what, " must be floating, got ",
              dtype_name(t.dtype()), " ", t.sizes());
}

void check_same_device(const Tensor& a, const char* what_a, const Tensor& b, const char* what_b,
                       const char* who) {
  EMBER_CHECK(a.device() == b.device(), who, ": ", what_a, " is on ", a.device().str(), " but ",
              what_b, " is on ", b.device().str());
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const char* who) {
  check_defined(x_in, who, "input");
  check_defined(weight_in, who, "weight");
  // Linear is one op of autocast's lower list in PyTorch: input, weight and bias all in the
  // low dtype (the bias too, or the add after the product would widen back to float32).
  const Tensor x = autocast_lower(x_in), weight = autocast_lower(weight_in),
               bias = autocast_lower(bias_in);
  EMBER_CHECK(weight.dim() == 2, who, ": weight must be 2-D [out_features, in_features], got ",
              weight.sizes());
  EMBER_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), who, ": input of shape ", x.sizes(),
              " does not end in in_features = ", weight.size(1), " (weight ", weight.sizes(), ")");
  EMBER_CHECK(x.dtype() == weight.dtype(), who, ": input is ", dtype_name(x.dtype()),
              " but weight is ", dtype_name(weight.dtype()), " (convert one: module->to(dtype))");
  check_same_device(x, "input", weight, "weight", who);
  if (bias.defined()) {
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), who, ": bias of shape ",
                bias.sizes(), " does not match out_features = ", weight.size(0));
    EMBER_CHECK(bias.dtype() == weight.dtype(), who, ": bias is ", dtype_name(bias.dtype()),
                " but weight is ", dtype_name(weight.dtype()));
    check_same_device(bias, "bias", weight, "weight", who);
  }
  return ember::linear(x, weight, bias);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen, const char* who) {
  check_defined(x, who, "input");
  EMBER_CHECK(p >= 0 && p <= 1, who, ": drop probability must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  check_floating(x, who, "input");
  if (p == 1) return mul(x, 0.0);
  // The keep mask is drawn in float32 whatever x's dtype, so its rate is exact to 2^-24 and one
  // seed gives one mask for every dtype and device.
  const Tensor u = rand(x.sizes(), TensorOptions(kFloat32).device(x.device()), gen);
  const Tensor mask = mul(cast(lt(u, 1.0 - p), x.dtype()), 1.0 / (1.0 - p));
  return mul(x, mask);
}

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in,
                  const Tensor& bias_in, double eps, const char* who) {
  check_defined(x_in, who, "input");
  // On autocast's float32 list in PyTorch: statistics and output in float32.
  const Tensor x = autocast_fp32(x_in), weight = autocast_fp32(weight_in),
               bias = autocast_fp32(bias_in);
  check_floating(x, who, "input");
  const int k = normalized_shape.size();
  EMBER_CHECK(k >= 1, who, ": normalized_shape must have at least one dim");
  bool fits = x.dim() >= k;
  for (int i = 0; fits && i < k; ++i) fits = x.size(x.dim() - k + i) == normalized_shape[i];
  EMBER_CHECK(fits, who, ": input of shape ", x.sizes(), " does not end in normalized_shape ",
              normalized_shape);
  EMBER_CHECK(eps >= 0, who, ": eps must be non-negative, got ", eps);
  for (const auto& [t, what] : {std::pair{weight, "weight"}, std::pair{bias, "bias"}}) {
    if (!t.defined()) continue;
    EMBER_CHECK(t.sizes() == normalized_shape, who, ": ", what, " of shape ", t.sizes(),
                " must equal normalized_shape ", normalized_shape);
    check_same_device(x, "input", t, what, who);
  }
  // The normalisation is one op (one kernel each way); the affine part stays pointwise ops,
  // which the JIT fuses with what follows.
  Attrs a;
  a.dim = x.dim() - k;
  a.eps = eps;
  Tensor y = dispatch(OpId::layer_norm, {x.contiguous()}, a);
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

Tensor embedding(const Tensor& indices, const Tensor& weight, const char* who) {
  check_defined(indices, who, "indices");
  check_defined(weight, who, "weight");
  EMBER_CHECK(is_integral(indices.dtype()), who, ": indices must be int64 or int32, got ",
              dtype_name(indices.dtype()), " ", indices.sizes());
  EMBER_CHECK(weight.dim() == 2, who, ": weight must be 2-D [num_embeddings, embedding_dim], got ",
              weight.sizes());
  EMBER_CHECK(indices.dim() < kMaxDims, who, ": indices of shape ", indices.sizes(),
              " have too many dims (at most ", kMaxDims - 1, ")");
  check_same_device(indices, "indices", weight, "weight", who);
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  try {
    return index_select(weight, 0, indices.reshape({indices.numel()})).reshape(out_shape);
  } catch (const Error& e) {  // out-of-range indices, reported by the kernel
    EMBER_FAIL(who, ": ", e.what(), " (num_embeddings = ", weight.size(0), ")");
  }
}

}  // namespace detail

namespace functional {

Tensor relu(const Tensor& x) { return ember::relu(x); }
Tensor gelu(const Tensor& x, bool approximate_tanh) { return ember::gelu(x, approximate_tanh); }
Tensor sigmoid(const Tensor& x) { return ember::sigmoid(x); }
Tensor tanh(const Tensor& x) { return ember::tanh(x); }
Tensor relu6(const Tensor& x) { return ember::relu6(x); }
Tensor abs(const Tensor& x) { return ember::abs(x); }
Tensor rsqrt(const Tensor& x) { return ember::rsqrt(x); }
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  return ember::clamp(x, min, max);
}
Tensor minimum(const Tensor& a, const Tensor& b) { return ember::minimum(a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return ember::maximum(a, b); }
Tensor softmax(const Tensor& x, int64_t dim) { return ember::softmax(x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return ember::log_softmax(x, dim); }

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  return detail::dropout(x, p, training, gen, "dropout");
}
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return detail::linear(x, weight, bias, "linear");
}
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  EMBER_CHECK(x.defined(), "flatten: undefined tensor");
  return x.flatten(start_dim, end_dim);
}
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return detail::layer_norm(x, normalized_shape, weight, bias, eps, "layer_norm");
}
Tensor embedding(const Tensor& indices, const Tensor& weight) {
  return detail::embedding(indices, weight, "embedding");
}

}  // namespace functional
}  // namespace ember::nn
