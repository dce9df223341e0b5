#pragma once
/// \file
/// nn::Dropout: in training, zeroes each element with probability p and scales the rest by
/// 1/(1-p), with a mask from the Philox generator; in eval mode, the identity.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// Dropout, like torch.nn.Dropout: random zeroing in training, the identity in eval mode.
/// In training each element is kept with probability 1 - p and scaled by 1/(1-p), so the
/// expected value is unchanged. The mask comes from the default Philox generator, so CPU and
/// CUDA draw the same mask for the same seed. No parameters.
class DropoutImpl : public Module {
 public:
  /// \throws ember::Error if p is outside [0, 1].
  explicit DropoutImpl(const DropoutOptions& options = {});
  /// `Dropout(0.1)`. \throws ember::Error if p is outside [0, 1].
  explicit DropoutImpl(double p) : DropoutImpl(DropoutOptions(p)) {}
  /// x (any shape) with dropout applied in training; `x` itself in eval mode or with p = 0.
  /// \throws ember::Error in training with p > 0 if `x` is not floating.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  /// The options the layer was built with.
  DropoutOptions options;
};
/// The module holder of DropoutImpl: `nn::Dropout(0.1)`.
EMBER_MODULE(Dropout);

}  // namespace ember::nn
