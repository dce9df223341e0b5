#pragma once
// The learning-rate schedules beyond StepLR, with PyTorch's semantics (torch.optim.lr_scheduler
// as of 1.13/2.x): each sets the groups' lr through Optimizer::set_lr, which writes the
// optimizer's device hyperparameters in place, so a compiled training step follows the schedule
// with no recompile. They are host objects: call step() after optimizer.step(), outside (or
// inside, as host code between compiled calls) the compiled function.
//
// The rates come from each schedule's closed form in the epoch (PyTorch's chainable forms are
// the same numbers up to rounding); a schedule's epoch-0 rate is set when it is built, as
// PyTorch's constructors do.
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "optim/lr_scheduler.h"

namespace ember::optim {

// lr = base_lr * gamma^(number of milestones <= epoch); milestones ascending.
class MultiStepLR final : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string_view name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr = base_lr * gamma^epoch.
class ExponentialLR final : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  std::string_view name() const override { return "ExponentialLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);
  std::string_view name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Warmup: lr = base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters).
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);
  std::string_view name() const override { return "LinearLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  double start_, end_;
  int64_t total_;
};

// lr = base_lr * lambda(epoch), with a host function (not saved by state_dict).
class LambdaLR final : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lambda);
  std::string_view name() const override { return "LambdaLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  std::function<double(int64_t)> lambda_;
};

// The 1cycle policy (two phases): from max_lr / div_factor up to max_lr over the first
// pct_start of total_steps, then down to max_lr / div_factor / final_div_factor, annealed by
// cosine or linearly. It sets each group's initial lr itself (PyTorch's group["initial_lr"]).
// Momentum cycling (PyTorch's cycle_momentum) is not offered: use set_options for betas.
struct OneCycleOptions {
  double pct_start = 0.3;
  bool cosine = true;  // false: linear annealing
  double div_factor = 25, final_div_factor = 1e4;
};
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
             OneCycleOptions options = {});
  std::string_view name() const override { return "OneCycleLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  double max_lr_;
  int64_t total_;
  OneCycleOptions o_;
};

// Runs `schedulers` one after another, switching at `milestones` (one fewer than schedulers):
// at a milestone the next scheduler restarts at its epoch 0. The schedulers must belong to the
// same optimizer and be built before this (their constructors' lr changes are undone here, as
// PyTorch does).
class SequentialLR final : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  std::string_view name() const override { return "SequentialLR"; }
  void step() override;

 protected:
  std::vector<double> compute_lr() const override;  // the current child's rates
  // Each child's state under "scheduler.<k>.".
  void save_extra(OptimizerState& out) const override;
  void load_extra(const OptimizerState& in) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// Lowers the lr by `factor` when a metric the user passes stops improving for `patience`
// epochs (mode min or max, relative or absolute threshold, cooldown, min_lr), PyTorch's rules.
// The metric is a host number: reading a loss for it is the caller's (one) synchronize.
struct PlateauOptions {
  bool mode_max = false;
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  bool threshold_abs = false;  // false: relative
  int64_t cooldown = 0;
  double min_lr = 0;
  double eps = 1e-8;
};
class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});
  void step(double metric);
  // A 0-dim tensor metric (a loss): read on the host here, one synchronize.
  void step(const Tensor& metric);
  std::vector<double> get_last_lr() const;
  int64_t last_epoch() const { return last_epoch_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  double best() const { return best_; }

  // best, num_bad_epochs, cooldown_counter, last_epoch (metadata "scheduler" =
  // "ReduceLROnPlateau").
  OptimizerState state_dict() const;
  void load_state_dict(const OptimizerState& state);

 private:
  bool better(double a) const;
  Optimizer& optimizer_;
  PlateauOptions o_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace ember::optim
