#pragma once
// RMSprop with PyTorch's exact semantics (torch.optim.RMSprop, the single-tensor loop): lr,
// alpha, eps, weight_decay, momentum, centered, maximize. Per parameter and step:
//   g = maximize ? -grad : grad;  g += weight_decay * p
//   square_avg = alpha * square_avg + (1 - alpha) * g * g
//   centered: grad_avg = alpha * grad_avg + (1 - alpha) * g
//             avg = sqrt(square_avg - grad_avg^2) + eps,   else avg = sqrt(square_avg) + eps
//   momentum > 0: momentum_buffer = momentum * momentum_buffer + g / avg;  p -= lr * buffer
//   else:         p -= lr * g / avg
// One rmsprop_update op per (group, device, dtype) and step, hyperparameters on the device
// (optim/foreach_optimizer.h). States: square_avg, momentum_buffer (momentum > 0), grad_avg
// (centered).
#include <memory>
#include <string_view>
#include <vector>

#include "optim/foreach_optimizer.h"

namespace ember::optim {

class RMSpropOptions final : public OptimizerOptions {
 public:
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  RMSpropOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  RMSpropOptions& alpha(double v) {
    alpha_ = v;
    return *this;
  }
  RMSpropOptions& eps(double v) {
    eps_ = v;
    return *this;
  }
  RMSpropOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  RMSpropOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  RMSpropOptions& centered(bool v) {
    centered_ = v;
    return *this;
  }
  RMSpropOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double alpha() const { return alpha_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  double momentum() const { return momentum_; }
  bool centered() const { return centered_; }
  bool maximize() const { return maximize_; }

  // PyTorch's checks: lr, eps, momentum, weight_decay, alpha >= 0 (and finite).
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

class RMSprop final : public ForeachOptimizer {
 public:
  RMSprop(std::vector<Tensor> params, const RMSpropOptions& options);
  RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& defaults);

  std::string_view name() const override { return "RMSprop"; }
  const RMSpropOptions& options(size_t group = 0) const;
  // Numbers go to the device in place; centered, maximize and momentum turning on or off change
  // the update's flags (a compiled step retraces).
  void set_options(size_t group, const RMSpropOptions& options);

 protected:
  void validate_options(const OptimizerOptions& options) const override;
  UpdateSpec spec(const OptimizerOptions& o) const override;
  // {lr, alpha, eps, weight_decay, momentum}, all on the device.
  std::vector<double> option_values(const OptimizerOptions& o) const override;
  std::vector<bool> flag_values(const OptimizerOptions& o) const override;  // centered, maximize
  std::unique_ptr<OptimizerOptions> make_options(const std::vector<double>& values,
                                                 const std::vector<bool>& flags) const override;
};

}  // namespace ember::optim
