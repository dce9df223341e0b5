#pragma once
/// \file
/// nn::Linear: y = x W^T + b, with PyTorch's default initialization (like torch.nn.Linear).
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// A fully connected layer, y = x W^T + b, like torch.nn.Linear.
/// Parameters "weight" [out_features, in_features] and (with `bias`) "bias" [out_features],
/// float32 on the CPU until moved with to(), initialized by reset_parameters(). The same in
/// training and eval. Under autocast it computes in the low dtype.
class LinearImpl : public Module {
 public:
  /// `Linear(784, 512)`: a layer with a bias.
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  /// `Linear(LinearOptions(784, 512).bias(false))`.
  /// \throws ember::Error if in_features or out_features is negative.
  explicit LinearImpl(const LinearOptions& options);

  /// x [*, in_features] (at least 1-D) -> [*, out_features].
  /// \throws ember::Error if `x` does not end in in_features, or its dtype or device differs
  /// from the weight's.
  Tensor forward(const Tensor& x);
  /// Redraws weight ~ kaiming_uniform(a = sqrt(5)), which is U(-1/sqrt(in), 1/sqrt(in)), and
  /// bias ~ U(-1/sqrt(in), 1/sqrt(in)), from the default Philox generator (PyTorch's default
  /// init).
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  /// The options the layer was built with.
  LinearOptions options;
  Tensor weight;  ///< [out_features, in_features].
  Tensor bias;    ///< [out_features]; undefined with bias(false).
};
/// The module holder of LinearImpl: `nn::Linear fc(784, 512); Tensor y = fc(x);`.
EMBER_MODULE(Linear);

}  // namespace ember::nn
