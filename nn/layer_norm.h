#pragma once
// LayerNorm: normalizes over the trailing `normalized_shape` dims (biased variance, eps inside
// the square root) with an optional learned scale (ones) and shift (zeros).
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

class LayerNormImpl : public Module {
 public:
  explicit LayerNormImpl(const LayerNormOptions& options);
  explicit LayerNormImpl(int64_t normalized_size) : LayerNormImpl(Shape{normalized_size}) {}
  Tensor forward(const Tensor& x);
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  LayerNormOptions options;
  Tensor weight;  // normalized_shape, undefined without elementwise_affine
  Tensor bias;
};
EMBER_MODULE(LayerNorm);

}  // namespace ember::nn
