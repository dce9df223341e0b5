#pragma once
/// \file
/// Loss modules, like torch.nn's. Each holds its options and calls the nn::functional form.
/// \code
/// nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1));
/// Tensor loss = criterion(logits, target);
/// \endcode
/// With the default Mean (or Sum) reduction a loss is a 0-dim tensor on the input's device;
/// with Reduction::None it keeps the per-sample (or per-element) shape. Errors name the module
/// ("CrossEntropyLoss: ...").
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// Softmax cross entropy of logits [N, C] (or [C], [N, C, d1, ...]) against class indices,
/// like torch.nn.CrossEntropyLoss (with ignore_index and label_smoothing; no class weights or
/// probability targets). Computed as one fused op. See functional::cross_entropy.
class CrossEntropyLossImpl : public Module {
 public:
  /// \throws ember::Error if label_smoothing is outside [0, 1].
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});
  /// The loss of logits `input` [N, C] against `target` [N] of int64 class indices (also
  /// [C] with [], or [N, C, d1, ...] with [N, d1, ...]).
  /// \throws ember::Error on a shape, dtype or device mismatch or an out-of-range target.
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  /// The options the loss was built with.
  CrossEntropyLossOptions options;
};
/// The module holder of CrossEntropyLossImpl: `nn::CrossEntropyLoss criterion;`.
EMBER_MODULE(CrossEntropyLoss);

/// Negative log likelihood of log-probabilities [N, C] against class indices, like
/// torch.nn.NLLLoss (no class weights). Pair it with log_softmax. See functional::nll_loss.
class NLLLossImpl : public Module {
 public:
  /// A loss with the given ignore_index and reduction.
  explicit NLLLossImpl(const NLLLossOptions& options = {});
  /// -input[n, target[n]], reduced; the shapes of CrossEntropyLossImpl::forward.
  /// \throws ember::Error on a shape, dtype or device mismatch or an out-of-range target.
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  /// The options the loss was built with.
  NLLLossOptions options;
};
/// The module holder of NLLLossImpl: `nn::NLLLoss()`.
EMBER_MODULE(NLLLoss);

/// Mean (or summed) squared error between tensors of one shape, like torch.nn.MSELoss.
class MSELossImpl : public Module {
 public:
  /// `MSELoss()`, `MSELoss(Reduction::Sum)`.
  explicit MSELossImpl(const MSELossOptions& options = {});
  /// (input - target)^2 reduced; `input` (floating) and `target` must have the same shape (no
  /// broadcasting) and device. \throws ember::Error otherwise.
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  /// The options the loss was built with.
  MSELossOptions options;
};
/// The module holder of MSELossImpl: `nn::MSELoss()`.
EMBER_MODULE(MSELoss);

/// Sigmoid + binary cross entropy in one numerically stable expression, like
/// torch.nn.BCEWithLogitsLoss. weight and pos_weight are registered as buffers, so to(device)
/// moves them with the module. See functional::binary_cross_entropy_with_logits.
class BCEWithLogitsLossImpl : public Module {
 public:
  /// Registers the options' weight and pos_weight (when defined) as buffers "weight" and
  /// "pos_weight", sharing the options' tensors.
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});
  /// The loss of logits `input` against probabilities `target` of the same shape (both
  /// floating, on one device). \throws ember::Error on a shape, dtype or device mismatch, or
  /// a weight that does not broadcast to the input.
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  /// The options the loss was built with (their weight tensors are the buffers).
  BCEWithLogitsLossOptions options;
};
/// The module holder of BCEWithLogitsLossImpl: `nn::BCEWithLogitsLoss()`.
EMBER_MODULE(BCEWithLogitsLoss);

}  // namespace ember::nn
