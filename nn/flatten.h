#pragma once
/// \file
/// nn::Flatten: merges dims start_dim..end_dim (by default all but the batch dim) into one.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// Merges dims start_dim..end_dim (inclusive) into one, like torch.nn.Flatten: by default
/// [N, C, H, W] -> [N, C * H * W]. No parameters.
class FlattenImpl : public Module {
 public:
  /// `Flatten()`: start_dim 1, end_dim -1.
  explicit FlattenImpl(const FlattenOptions& opts = {}) : options(opts) {}
  /// `Flatten(0)`, `Flatten(1, 2)`; negative dims count from the end.
  FlattenImpl(int64_t start_dim, int64_t end_dim = -1)
      : options(FlattenOptions().start_dim(start_dim).end_dim(end_dim)) {}
  /// `x` with dims start_dim..end_dim merged (like Tensor::flatten: a view when the strides
  /// allow). \throws ember::Error if `x` is undefined or the dims are out of range for it.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  /// The options the layer was built with.
  FlattenOptions options;
};
/// The module holder of FlattenImpl: `nn::Flatten()`.
EMBER_MODULE(Flatten);

}  // namespace ember::nn
