#pragma once
// Adagrad with PyTorch's exact semantics (torch.optim.Adagrad, dense gradients): lr, lr_decay,
// weight_decay, initial_accumulator_value, eps, maximize. Per parameter and step t (from 1):
//   g = maximize ? -grad : grad;  g += weight_decay * p
//   clr = lr / (1 + (t - 1) * lr_decay)
//   sum += g * g            (sum starts at initial_accumulator_value)
//   p -= clr * g / (sqrt(sum) + eps)
// One adagrad_update op per (group, device, dtype) and step, hyperparameters and the step on
// the device (optim/foreach_optimizer.h). State: sum.
#include <memory>
#include <string_view>
#include <vector>

#include "optim/foreach_optimizer.h"

namespace ember::optim {

class AdagradOptions final : public OptimizerOptions {
 public:
  explicit AdagradOptions(double lr = 1e-2) : lr_(lr) {}
  AdagradOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  AdagradOptions& lr_decay(double v) {
    lr_decay_ = v;
    return *this;
  }
  AdagradOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  AdagradOptions& initial_accumulator_value(double v) {
    initial_accumulator_value_ = v;
    return *this;
  }
  AdagradOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  AdagradOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double lr_decay() const { return lr_decay_; }
  double weight_decay() const { return weight_decay_; }
  double initial_accumulator_value() const { return initial_accumulator_value_; }
  double eps() const { return eps_; }
  bool maximize() const { return maximize_; }

  // PyTorch's checks: lr, lr_decay, weight_decay, initial_accumulator_value, eps >= 0.
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

class Adagrad final : public ForeachOptimizer {
 public:
  Adagrad(std::vector<Tensor> params, const AdagradOptions& options);
  Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& defaults);

  std::string_view name() const override { return "Adagrad"; }
  const AdagradOptions& options(size_t group = 0) const;
  // initial_accumulator_value only affects sums created afterwards, as in PyTorch (where it is
  // read once, in the constructor).
  void set_options(size_t group, const AdagradOptions& options);

 protected:
  void validate_options(const OptimizerOptions& options) const override;
  UpdateSpec spec(const OptimizerOptions& o) const override;
  // {lr, lr_decay, weight_decay, eps} on the device, then initial_accumulator_value.
  std::vector<double> option_values(const OptimizerOptions& o) const override;
  std::vector<bool> flag_values(const OptimizerOptions& o) const override;  // maximize
  std::unique_ptr<OptimizerOptions> make_options(const std::vector<double>& values,
                                                 const std::vector<bool>& flags) const override;
  double state_init(const OptimizerOptions& o, size_t state) const override;
};

}  // namespace ember::optim
