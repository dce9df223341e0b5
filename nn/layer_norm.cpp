#include "nn/layer_norm.h"

#include "core/factory.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace ember::nn {

LayerNormImpl::LayerNormImpl(const LayerNormOptions& opts) : options(opts) {
  const Shape& s = options.normalized_shape();
  EMBER_CHECK(!s.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t d : s)
    EMBER_CHECK(d > 0, "LayerNorm: normalized_shape ", s, " must have positive sizes");
  EMBER_CHECK(options.eps() >= 0, "LayerNorm: eps must be non-negative, got ", options.eps());
  if (options.elementwise_affine()) {
    weight = register_parameter("weight", empty(s));
    bias = register_parameter("bias", empty(s));
  }
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  return detail::layer_norm(x, options.normalized_shape(), weight, bias, options.eps(),
                            "LayerNorm");
}

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm(" << options.normalized_shape() << ", eps=" << options.eps()
     << ", elementwise_affine=" << (options.elementwise_affine() ? "true" : "false") << ")";
}

}  // namespace ember::nn
