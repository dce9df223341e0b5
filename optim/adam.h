#pragma once
/// \file
/// Adam and AdamW with PyTorch's exact semantics (torch.optim.Adam / AdamW, the single-tensor
/// loop): lr, betas, eps, weight_decay, amsgrad, maximize.
///
/// Per parameter and step t (counted from 1):
/// \code
/// g = maximize ? -grad : grad
/// Adam:  g += weight_decay * p              AdamW: p *= 1 - lr * weight_decay
/// exp_avg = beta1 * exp_avg + (1 - beta1) * g
/// exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
/// amsgrad: max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), used in place of exp_avg_sq
/// p -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
/// \endcode
/// One adam_update op per (group, device, dtype) and step; the hyperparameters and the step
/// live in device memory (optim/foreach_optimizer.h), so set_lr(), set_options() and
/// schedulers never recompile a jit::compile'd step. State names are PyTorch's: exp_avg,
/// exp_avg_sq, max_exp_avg_sq (amsgrad only); the step is the group's
/// (`param_groups.<g>.step`).
#include <memory>
#include <string_view>
#include <vector>

#include "optim/foreach_optimizer.h"

namespace ember::optim {

/// Options of Adam (`Decoupled` = false) and AdamW (true), chainable; use the aliases
/// AdamOptions and AdamWOptions.
///
/// The two differ in the weight decay's meaning (an L2 term added to the gradient, or AdamW's
/// decoupled decay of the parameter) and default (0 for Adam, 1e-2 for AdamW), as in PyTorch.
template <bool Decoupled>
class AdamOptionsT final : public OptimizerOptions {
 public:
  /// Options with learning rate `lr` and PyTorch's defaults: betas (0.9, 0.999), eps 1e-8,
  /// weight_decay 0 (Adam) or 1e-2 (AdamW), amsgrad and maximize off.
  explicit AdamOptionsT(double lr = 1e-3) : lr_(lr) {}

  /// Sets the learning rate.
  AdamOptionsT& lr(double v) {
    lr_ = v;
    return *this;
  }
  /// Sets the decay rates of the first and second moment averages (PyTorch's `betas`).
  AdamOptionsT& betas(double beta1, double beta2) {
    beta1_ = beta1;
    beta2_ = beta2;
    return *this;
  }
  /// Sets the term added to the denominator for numerical stability.
  AdamOptionsT& eps(double v) {
    eps_ = v;
    return *this;
  }
  /// Sets the weight decay: Adam adds weight_decay * p to the gradient; AdamW multiplies p by
  /// 1 - lr * weight_decay before the update.
  AdamOptionsT& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  /// Uses the maximum of all second-moment averages so far (AMSGrad), kept as max_exp_avg_sq.
  AdamOptionsT& amsgrad(bool v) {
    amsgrad_ = v;
    return *this;
  }
  /// Maximizes the objective instead of minimizing it (the gradient's sign flipped).
  AdamOptionsT& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  /// The learning rate (default 1e-3).
  double lr() const { return lr_; }
  /// The first moment's decay rate (default 0.9).
  double beta1() const { return beta1_; }
  /// The second moment's decay rate (default 0.999).
  double beta2() const { return beta2_; }
  /// The denominator's epsilon (default 1e-8).
  double eps() const { return eps_; }
  /// The weight decay (default 0 for Adam, 1e-2 for AdamW).
  double weight_decay() const { return weight_decay_; }
  /// Whether AMSGrad is on (default false).
  bool amsgrad() const { return amsgrad_; }
  /// Whether the objective is maximized (default false).
  bool maximize() const { return maximize_; }

  /// PyTorch's checks: lr >= 0, eps >= 0, 0 <= beta1, beta2 < 1, weight_decay >= 0 (all
  /// finite).
  /// \throws ember::Error naming the value.
  void validate() const;

  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<AdamOptionsT>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double v) override { lr_ = v; }

 private:
  double lr_;
  double beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8;
  double weight_decay_ = Decoupled ? 1e-2 : 0.0;
  bool amsgrad_ = false, maximize_ = false;
};

/// Options of Adam (torch.optim.Adam): weight decay as an L2 term on the gradient.
using AdamOptions = AdamOptionsT<false>;
/// Options of AdamW (torch.optim.AdamW): decoupled weight decay, default 1e-2.
using AdamWOptions = AdamOptionsT<true>;

/// Adam (`Decoupled` = false) and AdamW (true); use the aliases Adam and AdamW. The update
/// rule is in optim/adam.h.
/// \code
/// optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-4).weight_decay(0.1));
/// \endcode
template <bool Decoupled>
class AdamT final : public ForeachOptimizer {
 public:
  /// AdamOptions or AdamWOptions.
  using Options = AdamOptionsT<Decoupled>;
  /// One group of `params` with `options`.
  /// \throws ember::Error if the options are invalid, the list is empty, or a parameter is not
  ///         a floating leaf or repeats.
  AdamT(std::vector<Tensor> params, const Options& options);
  /// Several groups; groups without options take `defaults`.
  AdamT(std::vector<ParamGroup> groups, const Options& defaults);

  /// "Adam" or "AdamW".
  std::string_view name() const override { return Decoupled ? "AdamW" : "Adam"; }

  /// The host copy of a group's options.
  const Options& options(size_t group = 0) const;
  /// Replaces a group's options (validated first; an error changes nothing). Numbers go to the
  /// device in place; amsgrad and maximize change the update's flags (a compiled step
  /// retraces).
  void set_options(size_t group, const Options& options);
  /// Sets a group's betas, as set_options().
  void set_betas(size_t group, double beta1, double beta2);
  /// Sets a group's eps, as set_options().
  void set_eps(size_t group, double eps);
  /// Sets a group's weight decay, as set_options().
  void set_weight_decay(size_t group, double weight_decay);

 protected:
  void validate_options(const OptimizerOptions& options) const override;
  UpdateSpec spec(const OptimizerOptions& o) const override;
  /// {lr, beta1, beta2, eps, weight_decay}, all on the device.
  std::vector<double> option_values(const OptimizerOptions& o) const override;
  /// {amsgrad, maximize}.
  std::vector<bool> flag_values(const OptimizerOptions& o) const override;
  std::unique_ptr<OptimizerOptions> make_options(const std::vector<double>& values,
                                                 const std::vector<bool>& flags) const override;
};

/// Adam (torch.optim.Adam).
using Adam = AdamT<false>;
/// AdamW (torch.optim.AdamW): Adam with decoupled weight decay.
using AdamW = AdamT<true>;

extern template class AdamT<false>;
extern template class AdamT<true>;

}  // namespace ember::optim
