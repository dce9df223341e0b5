#pragma once
/// \file
/// nn::LayerNorm: normalizes over the trailing `normalized_shape` dims (biased variance, eps
/// inside the square root) with an optional learned scale (ones) and shift (zeros).
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// Layer normalization, like torch.nn.LayerNorm:
/// y = (x - mean) / sqrt(var + eps) * weight + bias, with the mean and biased variance taken
/// over the trailing `normalized_shape` dims of each sample.
/// Parameters "weight" (ones) and "bias" (zeros) of shape normalized_shape with
/// elementwise_affine, float32 on the CPU until moved. The same in training and eval. Under
/// autocast it computes in float32.
class LayerNormImpl : public Module {
 public:
  /// \throws ember::Error if normalized_shape is empty or has a non-positive size, or eps is
  /// negative.
  explicit LayerNormImpl(const LayerNormOptions& options);
  /// `LayerNorm(512)`: normalizes over a last dim of 512.
  explicit LayerNormImpl(int64_t normalized_size) : LayerNormImpl(Shape{normalized_size}) {}
  /// x [*, normalized_shape...] (floating) -> the same shape.
  /// \throws ember::Error if `x` is not floating, does not end in normalized_shape, or lies on
  /// another device than the parameters.
  Tensor forward(const Tensor& x);
  /// Sets weight to ones and bias to zeros.
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  /// The options the layer was built with.
  LayerNormOptions options;
  Tensor weight;  ///< normalized_shape; undefined without elementwise_affine.
  Tensor bias;    ///< normalized_shape; undefined without elementwise_affine.
};
/// The module holder of LayerNormImpl: `nn::LayerNorm(512)`,
/// `nn::LayerNorm(nn::LayerNormOptions({512}).eps(1e-6))`.
EMBER_MODULE(LayerNorm);

}  // namespace ember::nn
