#pragma once
// Adam and AdamW with PyTorch's exact semantics (torch.optim.Adam / AdamW, the single-tensor
// loop): lr, betas, eps, weight_decay, amsgrad, maximize. Per parameter and step t (from 1):
//   g = maximize ? -grad : grad
//   Adam:  g += weight_decay * p              AdamW: p *= 1 - lr * weight_decay
//   exp_avg = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   amsgrad: max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), used in place of exp_avg_sq
//   p -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
// One adam_update op per (group, device, dtype) and step; the hyperparameters and the step live
// in device memory (optim/foreach_optimizer.h), so set_lr / set_options / schedulers never
// recompile a jit::compile'd step. State names are PyTorch's: exp_avg, exp_avg_sq,
// max_exp_avg_sq; the step is the group's ("param_groups.<g>.step").
#include <memory>
#include <string_view>
#include <vector>

#include "optim/foreach_optimizer.h"

namespace ember::optim {

// Options of Adam (Decoupled = false) and AdamW (true); they differ in the weight decay's
// meaning and default (0 for Adam, 1e-2 for AdamW), as in PyTorch.
template <bool Decoupled>
class AdamOptionsT final : public OptimizerOptions {
 public:
  explicit AdamOptionsT(double lr = 1e-3) : lr_(lr) {}

  AdamOptionsT& lr(double v) {
    lr_ = v;
    return *this;
  }
  AdamOptionsT& betas(double beta1, double beta2) {
    beta1_ = beta1;
    beta2_ = beta2;
    return *this;
  }
  AdamOptionsT& eps(double v) {
    eps_ = v;
    return *this;
  }
  AdamOptionsT& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  AdamOptionsT& amsgrad(bool v) {
    amsgrad_ = v;
    return *this;
  }
  AdamOptionsT& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
  bool amsgrad() const { return amsgrad_; }
  bool maximize() const { return maximize_; }

  // PyTorch's checks: lr >= 0, eps >= 0, 0 <= beta1, beta2 < 1, weight_decay >= 0 (all finite).
  // Throws ember::Error naming the value.
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

using AdamOptions = AdamOptionsT<false>;
using AdamWOptions = AdamOptionsT<true>;

template <bool Decoupled>
class AdamT final : public ForeachOptimizer {
 public:
  using Options = AdamOptionsT<Decoupled>;
  AdamT(std::vector<Tensor> params, const Options& options);
  // Groups without options take `defaults`.
  AdamT(std::vector<ParamGroup> groups, const Options& defaults);

  std::string_view name() const override { return Decoupled ? "AdamW" : "Adam"; }

  const Options& options(size_t group = 0) const;
  // Replaces a group's options (validated first; an error changes nothing). Numbers go to the
  // device in place; amsgrad and maximize change the update's flags (a compiled step retraces).
  void set_options(size_t group, const Options& options);
  void set_betas(size_t group, double beta1, double beta2);
  void set_eps(size_t group, double eps);
  void set_weight_decay(size_t group, double weight_decay);

 protected:
  void validate_options(const OptimizerOptions& options) const override;
  UpdateSpec spec(const OptimizerOptions& o) const override;
  // {lr, beta1, beta2, eps, weight_decay}, all on the device.
  std::vector<double> option_values(const OptimizerOptions& o) const override;
  std::vector<bool> flag_values(const OptimizerOptions& o) const override;  // amsgrad, maximize
  std::unique_ptr<OptimizerOptions> make_options(const std::vector<double>& values,
                                                 const std::vector<bool>& flags) const override;
};

using Adam = AdamT<false>;
using AdamW = AdamT<true>;

extern template class AdamT<false>;
extern template class AdamT<true>;

}  // namespace ember::optim
