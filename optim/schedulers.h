#pragma once
/// \file
/// The learning-rate schedules beyond StepLR, with PyTorch's semantics
/// (torch.optim.lr_scheduler as of 1.13/2.x).
///
/// Each sets the groups' lr through Optimizer::set_lr(), which writes the optimizer's device
/// hyperparameters in place, so a compiled training step follows the schedule with no
/// recompile. They are host objects: call step() after `optimizer.step()`, outside the
/// compiled function (as host code between compiled calls).
///
/// The rates come from each schedule's closed form in the epoch (PyTorch's chainable forms are
/// the same numbers up to rounding), so a rate set by hand between steps does not carry over;
/// a schedule's epoch-0 rate is set when it is built, as PyTorch's constructors do.
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "optim/lr_scheduler.h"

namespace ember::optim {

/// Decays the lr by `gamma` at each milestone epoch (torch.optim.lr_scheduler.MultiStepLR).
///
/// lr = base_lr * gamma^(number of milestones <= epoch).
class MultiStepLR final : public LRScheduler {
 public:
  /// \param milestones epochs, ascending.
  /// \throws ember::Error if the milestones are not ascending or gamma is negative or not
  ///         finite.
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  /// "MultiStepLR".
  std::string_view name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

/// Decays the lr by `gamma` every epoch (torch.optim.lr_scheduler.ExponentialLR).
///
/// lr = base_lr * gamma^epoch.
class ExponentialLR final : public LRScheduler {
 public:
  /// \throws ember::Error if gamma is negative or not finite.
  ExponentialLR(Optimizer& optimizer, double gamma);
  /// "ExponentialLR".
  std::string_view name() const override { return "ExponentialLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  double gamma_;
};

/// Cosine annealing from base_lr down to eta_min over T_max epochs
/// (torch.optim.lr_scheduler.CosineAnnealingLR, without restarts).
///
/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2; past T_max the
/// cosine climbs back, as PyTorch's closed form does.
class CosineAnnealingLR final : public LRScheduler {
 public:
  /// \throws ember::Error if T_max < 1 or eta_min is negative or not finite.
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);
  /// "CosineAnnealingLR".
  std::string_view name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warmup (or decay) of the lr's factor (torch.optim.lr_scheduler.LinearLR).
///
/// lr = base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters).
class LinearLR final : public LRScheduler {
 public:
  /// \throws ember::Error if start_factor is not in (0, 1], end_factor not in [0, 1], or
  ///         total_iters < 1.
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);
  /// "LinearLR".
  std::string_view name() const override { return "LinearLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  double start_, end_;
  int64_t total_;
};

/// The lr as a user function of the epoch (torch.optim.lr_scheduler.LambdaLR, one function for
/// every group).
///
/// lr = base_lr * lambda(epoch), with a host function (not saved by state_dict()).
class LambdaLR final : public LRScheduler {
 public:
  /// \throws ember::Error if `lambda` is empty.
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lambda);
  /// "LambdaLR".
  std::string_view name() const override { return "LambdaLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  std::function<double(int64_t)> lambda_;
};

/// Options of OneCycleLR, PyTorch's arguments and defaults.
struct OneCycleOptions {
  double pct_start = 0.3;  ///< the fraction of total_steps spent raising the lr, in [0, 1]
  bool cosine = true;      ///< true: cosine annealing (`anneal_strategy="cos"`); false: linear
  /// The initial lr is max_lr / div_factor (> 0).
  double div_factor = 25, final_div_factor = 1e4;  ///< the final lr: initial / this (> 0)
};
/// The 1cycle policy, two phases (torch.optim.lr_scheduler.OneCycleLR, `three_phase=false`).
///
/// From max_lr / div_factor up to max_lr over the first pct_start of total_steps, then down to
/// max_lr / div_factor / final_div_factor, annealed by cosine or linearly. Step it once per
/// batch, total_steps times at most. The rates come from max_lr alone, the same for every
/// group (base_lrs() are not used): building it sets each group's lr to max_lr / div_factor.
/// Momentum cycling (PyTorch's `cycle_momentum`) is not offered: use `set_options()` for
/// betas.
class OneCycleLR final : public LRScheduler {
 public:
  /// \throws ember::Error if total_steps < 1, max_lr is negative or not finite, pct_start is
  ///         not in [0, 1] or makes a warm-up of exactly one step, or a div factor is not
  ///         positive.
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
             OneCycleOptions options = {});
  /// "OneCycleLR".
  std::string_view name() const override { return "OneCycleLR"; }

 protected:
  std::vector<double> compute_lr() const override;

 private:
  double max_lr_;
  int64_t total_;
  OneCycleOptions o_;
};

/// Runs schedulers one after another, switching at milestones
/// (torch.optim.lr_scheduler.SequentialLR): warmup then cosine, say.
///
/// At a milestone the next scheduler restarts at its epoch 0. The schedulers must belong to the
/// same optimizer and be built before this (their constructors' lr changes are undone here, as
/// PyTorch does).
/// \code
/// auto warmup = std::make_shared<optim::LinearLR>(opt, 0.01, 1.0, 100);
/// auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 900);
/// optim::SequentialLR sched(opt, {warmup, cosine}, {100});
/// \endcode
class SequentialLR final : public LRScheduler {
 public:
  /// \param milestones epochs at which to switch to the next scheduler, ascending, one fewer
  ///        than `schedulers`.
  /// \throws ember::Error if the counts do not match, the milestones are not ascending, or a
  ///         scheduler is null or belongs to another optimizer.
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  /// "SequentialLR".
  std::string_view name() const override { return "SequentialLR"; }
  /// Advances one epoch: steps the current scheduler, or restarts the next one at its epoch 0
  /// on a milestone.
  void step() override;

 protected:
  /// The current child's rates.
  std::vector<double> compute_lr() const override;
  /// Each child's state under `scheduler.<k>.`.
  void save_extra(OptimizerState& out) const override;
  /// Restores every child's state; if one fails, those already loaded are restored.
  void load_extra(const OptimizerState& in) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

/// Options of ReduceLROnPlateau, PyTorch's arguments and defaults.
struct PlateauOptions {
  bool mode_max = false;       ///< false: `mode="min"` (lower is better); true: `mode="max"`
  double factor = 0.1;         ///< new lr = lr * factor, in [0, 1)
  int64_t patience = 10;       ///< bad epochs tolerated before the lr is lowered
  double threshold = 1e-4;     ///< how much better than the best a metric must be to count
  bool threshold_abs = false;  ///< false: `threshold_mode="rel"`; true: `"abs"`
  int64_t cooldown = 0;        ///< epochs after a reduction during which bad epochs are not counted
  double min_lr = 0;           ///< the lr never goes below this
  double eps = 1e-8;           ///< a reduction smaller than this is skipped
};
/// Lowers the lr when a metric stops improving (torch.optim.lr_scheduler.ReduceLROnPlateau).
///
/// Multiplies every group's lr by `factor` when the metric the user passes has not improved
/// for more than `patience` epochs (mode min or max, relative or absolute threshold,
/// cooldown, min_lr), PyTorch's rules. The metric is a host number: reading a loss for it is
/// the caller's (one) synchronize. Not an LRScheduler: it steps on a metric, not an epoch.
class ReduceLROnPlateau {
 public:
  /// Binds it to `optimizer` (which must outlive it).
  /// \throws ember::Error if factor is not in [0, 1), or patience, cooldown, min_lr or
  ///         threshold is negative.
  explicit ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});
  /// One epoch with this metric value; lowers the lr if it has stopped improving.
  void step(double metric);
  /// A one-element tensor metric (a loss): read on the host here, one synchronize.
  /// \throws ember::Error if `metric` is undefined or has more than one element.
  void step(const Tensor& metric);
  /// The current lr of each group.
  std::vector<double> get_last_lr() const;
  /// The number of step() calls so far.
  int64_t last_epoch() const { return last_epoch_; }
  /// Epochs in a row without improvement (reset by a reduction and during cooldown).
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  /// The best metric so far (+inf or -inf before the first step()).
  double best() const { return best_; }

  /// A float64 tensor `state` {best, num_bad_epochs, cooldown_counter, last_epoch}, metadata
  /// `scheduler` = "ReduceLROnPlateau".
  OptimizerState state_dict() const;
  /// Restores a state_dict(); the options and the optimizer are not touched.
  /// \throws ember::Error if the state is not a ReduceLROnPlateau's or a counter is not a
  ///         whole number >= 0; the scheduler is then unchanged.
  void load_state_dict(const OptimizerState& state);

 private:
  bool better(double a) const;
  Optimizer& optimizer_;
  PlateauOptions o_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace ember::optim
