#pragma once
/// \file
/// Adagrad with PyTorch's exact semantics (torch.optim.Adagrad, dense gradients): lr,
/// lr_decay, weight_decay, initial_accumulator_value, eps, maximize.
///
/// Per parameter and step t (counted from 1):
/// \code
/// g = maximize ? -grad : grad;  g += weight_decay * p
/// clr = lr / (1 + (t - 1) * lr_decay)
/// sum += g * g            (sum starts at initial_accumulator_value)
/// p -= clr * g / (sqrt(sum) + eps)
/// \endcode
/// One adagrad_update op per (group, device, dtype) and step, hyperparameters and the step on
/// the device (optim/foreach_optimizer.h). State: sum.
#include <memory>
#include <string_view>
#include <vector>

#include "optim/foreach_optimizer.h"

namespace ember::optim {

/// Options of Adagrad, chainable: `AdagradOptions(0.01).lr_decay(1e-4)`.
class AdagradOptions final : public OptimizerOptions {
 public:
  /// Options with learning rate `lr` and PyTorch's defaults (eps 1e-10, everything else 0).
  explicit AdagradOptions(double lr = 1e-2) : lr_(lr) {}
  /// Sets the learning rate.
  AdagradOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  /// Sets the learning-rate decay: step t uses lr / (1 + (t - 1) * lr_decay).
  AdagradOptions& lr_decay(double v) {
    lr_decay_ = v;
    return *this;
  }
  /// Sets the L2 penalty added to the gradient: g += weight_decay * p.
  AdagradOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  /// Sets the value the sum of squared gradients starts from.
  AdagradOptions& initial_accumulator_value(double v) {
    initial_accumulator_value_ = v;
    return *this;
  }
  /// Sets the term added to the denominator for numerical stability.
  AdagradOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  /// Maximizes the objective instead of minimizing it (the gradient's sign flipped).
  AdagradOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  /// The learning rate (default 1e-2).
  double lr() const { return lr_; }
  /// The learning-rate decay (default 0).
  double lr_decay() const { return lr_decay_; }
  /// The weight decay (default 0).
  double weight_decay() const { return weight_decay_; }
  /// The initial value of the sum (default 0).
  double initial_accumulator_value() const { return initial_accumulator_value_; }
  /// The denominator's epsilon (default 1e-10).
  double eps() const { return eps_; }
  /// Whether the objective is maximized (default false).
  bool maximize() const { return maximize_; }

  /// PyTorch's checks: lr, lr_decay, weight_decay, initial_accumulator_value, eps >= 0 (and
  /// finite).
  /// \throws ember::Error naming the value.
  void validate() const;

  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<AdagradOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double v) override { lr_ = v; }

 private:
  double lr_;
  double lr_decay_ = 0, weight_decay_ = 0, initial_accumulator_value_ = 0, eps_ = 1e-10;
  bool maximize_ = false;
};

/// Adagrad (torch.optim.Adagrad); the update rule is in optim/adagrad.h.
class Adagrad final : public ForeachOptimizer {
 public:
  /// One group of `params` with `options`.
  /// \throws ember::Error if the options are invalid, the list is empty, or a parameter is not
  ///         a floating leaf or repeats.
  Adagrad(std::vector<Tensor> params, const AdagradOptions& options);
  /// Several groups; groups without options take `defaults`.
  Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& defaults);

  /// "Adagrad".
  std::string_view name() const override { return "Adagrad"; }
  /// The host copy of a group's options.
  const AdagradOptions& options(size_t group = 0) const;
  /// Replaces a group's options (validated first; an error changes nothing); numbers go to the
  /// device in place, maximize makes a compiled step retrace. initial_accumulator_value only
  /// affects sums created afterwards, as in PyTorch (where it is read once, in the
  /// constructor).
  void set_options(size_t group, const AdagradOptions& options);

 protected:
  void validate_options(const OptimizerOptions& options) const override;
  UpdateSpec spec(const OptimizerOptions& o) const override;
  /// {lr, lr_decay, weight_decay, eps} on the device, then initial_accumulator_value.
  std::vector<double> option_values(const OptimizerOptions& o) const override;
  /// {maximize}.
  std::vector<bool> flag_values(const OptimizerOptions& o) const override;
  std::unique_ptr<OptimizerOptions> make_options(const std::vector<double>& values,
                                                 const std::vector<bool>& flags) const override;
  double state_init(const OptimizerOptions& o, size_t state) const override;
};

}  // namespace ember::optim
