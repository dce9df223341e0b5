#pragma once
/// \file
/// RMSprop with PyTorch's exact semantics (torch.optim.RMSprop, the single-tensor loop): lr,
/// alpha, eps, weight_decay, momentum, centered, maximize.
///
/// Per parameter and step:
/// \code
/// g = maximize ? -grad : grad;  g += weight_decay * p
/// square_avg = alpha * square_avg + (1 - alpha) * g * g
/// centered: grad_avg = alpha * grad_avg + (1 - alpha) * g
///           avg = sqrt(square_avg - grad_avg^2) + eps,   else avg = sqrt(square_avg) + eps
/// momentum > 0: momentum_buffer = momentum * momentum_buffer + g / avg;  p -= lr * buffer
/// else:         p -= lr * g / avg
/// \endcode
/// One rmsprop_update op per (group, device, dtype) and step, hyperparameters on the device
/// (optim/foreach_optimizer.h). States: square_avg, momentum_buffer (momentum > 0), grad_avg
/// (centered).
#include <memory>
#include <string_view>
#include <vector>

#include "optim/foreach_optimizer.h"

namespace ember::optim {

/// Options of RMSprop, chainable: `RMSpropOptions(0.01).alpha(0.9).centered(true)`.
class RMSpropOptions final : public OptimizerOptions {
 public:
  /// Options with learning rate `lr` and PyTorch's defaults (alpha 0.99, eps 1e-8, no weight
  /// decay or momentum, not centered).
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  /// Sets the learning rate.
  RMSpropOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  /// Sets the smoothing constant of the squared-gradient average.
  RMSpropOptions& alpha(double v) {
    alpha_ = v;
    return *this;
  }
  /// Sets the term added to the denominator for numerical stability.
  RMSpropOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  /// Sets the L2 penalty added to the gradient: g += weight_decay * p.
  RMSpropOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  /// Sets the momentum factor (0: no momentum buffer).
  RMSpropOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  /// Normalizes by an estimate of the gradient's variance (keeps grad_avg).
  RMSpropOptions& centered(bool v) {
    centered_ = v;
    return *this;
  }
  /// Maximizes the objective instead of minimizing it (the gradient's sign flipped).
  RMSpropOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  /// The learning rate (default 1e-2).
  double lr() const { return lr_; }
  /// The smoothing constant (default 0.99).
  double alpha() const { return alpha_; }
  /// The denominator's epsilon (default 1e-8).
  double eps() const { return eps_; }
  /// The weight decay (default 0).
  double weight_decay() const { return weight_decay_; }
  /// The momentum factor (default 0).
  double momentum() const { return momentum_; }
  /// Whether the centered variant is on (default false).
  bool centered() const { return centered_; }
  /// Whether the objective is maximized (default false).
  bool maximize() const { return maximize_; }

  /// PyTorch's checks: lr, eps, momentum, weight_decay, alpha >= 0 (and finite).
  /// \throws ember::Error naming the value.
  void validate() const;

  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<RMSpropOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double v) override { lr_ = v; }

 private:
  double lr_;
  double alpha_ = 0.99, eps_ = 1e-8, weight_decay_ = 0, momentum_ = 0;
  bool centered_ = false, maximize_ = false;
};

/// RMSprop (torch.optim.RMSprop); the update rule is in optim/rmsprop.h.
class RMSprop final : public ForeachOptimizer {
 public:
  /// One group of `params` with `options`.
  /// \throws ember::Error if the options are invalid, the list is empty, or a parameter is not
  ///         a floating leaf or repeats.
  RMSprop(std::vector<Tensor> params, const RMSpropOptions& options);
  /// Several groups; groups without options take `defaults`.
  RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& defaults);

  /// "RMSprop".
  std::string_view name() const override { return "RMSprop"; }
  /// The host copy of a group's options.
  const RMSpropOptions& options(size_t group = 0) const;
  /// Replaces a group's options (validated first; an error changes nothing). Numbers go to the
  /// device in place; centered, maximize and momentum turning on or off change the update's
  /// flags (a compiled step retraces).
  void set_options(size_t group, const RMSpropOptions& options);

 protected:
  void validate_options(const OptimizerOptions& options) const override;
  UpdateSpec spec(const OptimizerOptions& o) const override;
  /// {lr, alpha, eps, weight_decay, momentum}, all on the device.
  std::vector<double> option_values(const OptimizerOptions& o) const override;
  /// {centered, maximize}.
  std::vector<bool> flag_values(const OptimizerOptions& o) const override;
  std::unique_ptr<OptimizerOptions> make_options(const std::vector<double>& values,
                                                 const std::vector<bool>& flags) const override;
};

}  // namespace ember::optim
