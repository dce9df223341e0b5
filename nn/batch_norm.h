#pragma once
// BatchNorm1d / BatchNorm2d with PyTorch's semantics and names: per-channel (dim 1) statistics
// over every other dim; in training the batch's mean and biased variance normalise, and the
// running statistics move by `momentum` (running_var takes the unbiased variance), with
// num_batches_tracked counting; in eval the running statistics normalise (without
// track_running_stats there are none, and batch statistics always do). weight (ones) and bias
// (zeros) with affine. 16-bit inputs compute their statistics in float32 and return their own
// dtype.
//
// Built from public ops; the running-statistics updates are in-place writes under no_grad, so
// a compiled training step replays them as effects on the buffers (after a replay they equal
// eager's), and train()/eval() retrace.
#include <cstdint>
#include <ostream>

#include "core/tensor.h"
#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

namespace functional {
// x [N, C, ...]; running_mean / running_var [C] or undefined (then batch statistics always);
// weight / bias [C] or undefined. With training and running stats defined, those are updated.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
}  // namespace functional

struct BatchNormOptions {
  BatchNormOptions(int64_t num_features)  // NOLINT: BatchNorm2d(16) reads well
      : num_features_(num_features) {}
  EMBER_ARG(int64_t, num_features);
  EMBER_ARG(double, eps) = 1e-5;
  EMBER_ARG(double, momentum) = 0.1;
  EMBER_ARG(bool, affine) = true;
  EMBER_ARG(bool, track_running_stats) = true;
};

// Dims: 1 (inputs [N, C] or [N, C, L]) or 2 ([N, C, H, W]).
template <int Dims>
class BatchNormImpl : public Module {
 public:
  explicit BatchNormImpl(const BatchNormOptions& options);
  Tensor forward(const Tensor& x);
  void reset_parameters();
  void reset_running_stats();
  void pretty_print(std::ostream& os) const override;

  BatchNormOptions options;
  Tensor weight, bias;                                     // [C], with affine
  Tensor running_mean, running_var, num_batches_tracked;  // with track_running_stats
};
using BatchNorm1dImpl = BatchNormImpl<1>;
using BatchNorm2dImpl = BatchNormImpl<2>;
EMBER_MODULE(BatchNorm1d);
EMBER_MODULE(BatchNorm2d);

}  // namespace ember::nn
