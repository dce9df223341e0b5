#pragma once
/// \file
/// BatchNorm1d / BatchNorm2d with PyTorch's semantics and names.
/// Per-channel (dim 1) statistics over every other dim; in training the batch's mean and
/// biased variance normalise, and the running statistics move by `momentum` (running_var takes
/// the unbiased variance), with num_batches_tracked counting; in eval the running statistics
/// normalise (without track_running_stats there are none, and batch statistics always do).
/// weight (ones) and bias (zeros) with affine. 16-bit inputs compute their statistics in
/// float32 and return their own dtype.
///
/// Built from public ops; the running-statistics updates are in-place writes under no_grad, so
/// a compiled training step replays them as effects on the buffers (after a replay they equal
/// eager's), and train()/eval() retrace.
#include <cstdint>
#include <ostream>

#include "core/tensor.h"
#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

namespace functional {
/// Batch normalization (F.batch_norm): y = (x - mean) / sqrt(var + eps) * weight + bias per
/// channel (dim 1).
/// x [N, C, ...] (floating); running_mean / running_var [C] or both undefined (then batch
/// statistics always); weight / bias [C] or undefined, all on x's device. With `training` (or
/// without running stats) the batch's mean and biased variance normalise, and in training the
/// running stats, when defined, are updated in place:
/// running = (1 - momentum) running + momentum batch (running_var from the unbiased
/// variance). Otherwise the running stats normalise. 16-bit x computes in float32 and returns
/// its own dtype.
/// \throws ember::Error on a bad shape or device, only one running stat defined, eps < 0,
/// momentum outside [0, 1], or training with a single value per channel.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
}  // namespace functional

/// Options of BatchNorm1d and BatchNorm2d, like torch.nn.BatchNorm2d's arguments.
struct BatchNormOptions {
  /// Batch norm over `num_features` channels: `BatchNorm2d(16)`.
  BatchNormOptions(int64_t num_features)  // NOLINT: BatchNorm2d(16) reads well
      : num_features_(num_features) {}
  /// Channels C, the input's dim 1 (positive); `.num_features(v)` / `.num_features()`.
  EMBER_ARG(int64_t, num_features);
  /// Added to the variance inside the square root (default 1e-5); `.eps(v)` / `.eps()`.
  EMBER_ARG(double, eps) = 1e-5;
  /// Weight of the batch statistic in each running-statistics update (default 0.1, in
  /// [0, 1]; no cumulative-average `None`); `.momentum(v)` / `.momentum()`.
  EMBER_ARG(double, momentum) = 0.1;
  /// Whether the layer learns a per-channel scale (weight) and shift (bias) (default true);
  /// `.affine(v)` / `.affine()`.
  EMBER_ARG(bool, affine) = true;
  /// Whether the layer keeps running_mean / running_var buffers for eval (default true);
  /// without them batch statistics are used in eval too; `.track_running_stats(v)` /
  /// `.track_running_stats()`.
  EMBER_ARG(bool, track_running_stats) = true;
};

/// Batch normalization over the channel dim, like torch.nn.BatchNorm1d (Dims = 1: inputs
/// [N, C] or [N, C, L]) and torch.nn.BatchNorm2d (Dims = 2: [N, C, H, W]).
/// Parameters "weight" (ones) and "bias" (zeros) [C] with affine; buffers "running_mean"
/// (zeros) and "running_var" (ones) [C] and "num_batches_tracked" (int64, 0-dim) with
/// track_running_stats, all on the CPU until moved. Training mode normalises with batch
/// statistics and updates the running ones; eval mode normalises with the running ones.
/// See functional::batch_norm.
template <int Dims>
class BatchNormImpl : public Module {
 public:
  /// \throws ember::Error if num_features is not positive.
  explicit BatchNormImpl(const BatchNormOptions& options);
  /// Normalizes `x` (same shape out); in training also updates the running statistics and
  /// adds 1 to num_batches_tracked.
  /// \throws ember::Error if `x` has the wrong number of dims or not num_features channels,
  /// or (in training) a single value per channel.
  Tensor forward(const Tensor& x);
  /// Resets the running statistics and sets weight to ones and bias to zeros.
  void reset_parameters();
  /// Sets running_mean to zeros, running_var to ones and num_batches_tracked to 0.
  void reset_running_stats();
  void pretty_print(std::ostream& os) const override;

  /// The options the layer was built with.
  BatchNormOptions options;
  /// \var weight
  /// Per-channel scale [C] (ones at init); undefined without affine.
  /// \var bias
  /// Per-channel shift [C] (zeros at init); undefined without affine.
  Tensor weight, bias;  // [C], with affine
  /// \var running_mean
  /// Running per-channel mean [C] (a buffer); undefined without track_running_stats.
  /// \var running_var
  /// Running per-channel unbiased variance [C] (a buffer); undefined without
  /// track_running_stats.
  /// \var num_batches_tracked
  /// Training forward passes so far (an int64 0-dim buffer); undefined without
  /// track_running_stats.
  Tensor running_mean, running_var, num_batches_tracked;  // with track_running_stats
};
/// BatchNormImpl for [N, C] or [N, C, L] inputs.
using BatchNorm1dImpl = BatchNormImpl<1>;
/// BatchNormImpl for [N, C, H, W] inputs.
using BatchNorm2dImpl = BatchNormImpl<2>;
/// The module holder of BatchNorm1dImpl: `nn::BatchNorm1d(64)`.
EMBER_MODULE(BatchNorm1d);
/// The module holder of BatchNorm2dImpl: `nn::BatchNorm2d(16)`.
EMBER_MODULE(BatchNorm2d);

}  // namespace ember::nn
