#pragma once
/// \file
/// The learning-rate scheduler base class and StepLR, with PyTorch's semantics.
///
/// Schedulers change a group's lr through Optimizer::set_lr(), which writes the optimizer's
/// device hyperparameters in place: a compiled training step picks up the new rate without a
/// recompile. The other schedules are in optim/schedulers.h.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

/// Base class of the epoch-based learning-rate schedulers (torch.optim.lr_scheduler.LRScheduler).
///
/// A scheduler is a host object bound to one optimizer. Its epoch starts at 0; each step()
/// advances it and sets every group's lr. Call step() after `optimizer.step()`, outside the
/// compiled function (or between compiled calls): the new rate reaches a compiled step
/// through device memory, with no recompile.
///
/// The base rates (base_lrs()) are each group's ParamGroup::initial_lr, which the first
/// scheduler built on the optimizer records from the groups' lr at that time; later schedulers
/// (those a SequentialLR chains) start from the same rates.
/// \code
/// optim::StepLR sched(opt, /*step_size=*/30, /*gamma=*/0.1);
/// for (int epoch = 0; epoch < 90; ++epoch) {
///   train_one_epoch();  // optimizer.step() per batch
///   sched.step();
/// }
/// \endcode
class LRScheduler {
 public:
  /// Binds the scheduler to `optimizer` (which must outlive it) and records the base rates.
  explicit LRScheduler(Optimizer& optimizer);
  /// Virtual: schedulers are used through this base (SequentialLR holds them so).
  virtual ~LRScheduler() = default;
  /// Not copyable: it is bound to one optimizer.
  LRScheduler(const LRScheduler&) = delete;
  /// Not copyable: it is bound to one optimizer.
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one epoch (call after `optimizer.step()`) and sets every group's new lr.
  /// \throws ember::Error if the optimizer rejects a rate (e.g. negative), or a schedule is
  ///         stepped past its end (OneCycleLR).
  virtual void step();
  /// PyTorch's `step(epoch)`: jumps to `epoch` and sets the closed-form lr there (SequentialLR
  /// restarts its schedulers this way at their milestones).
  void step_to(int64_t epoch);
  /// The scheduler's PyTorch class name ("StepLR"), also the state's `scheduler` metadata.
  virtual std::string_view name() const = 0;

  /// The schedule's position: float64 tensors `last_epoch`, `base_lrs`, `last_lr` and the
  /// scheduler's own counters, metadata `scheduler` = name(). Host functions (LambdaLR's) are
  /// not saved, as in PyTorch.
  OptimizerState state_dict() const;
  /// Restores a state_dict() of a scheduler of the same kind and group count. It does not
  /// touch the optimizer: the optimizer's own state holds the lr in use.
  /// \throws ember::Error if the kind differs or a value is missing or malformed; everything
  ///         is checked first, so the scheduler is then unchanged.
  void load_state_dict(const OptimizerState& state);
  /// The lr of each group as this scheduler last set it (PyTorch's `get_last_lr()`).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// The current epoch: 0 after construction, +1 per step().
  int64_t last_epoch() const { return last_epoch_; }
  /// The base lr of each group (ParamGroup::initial_lr).
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 protected:
  /// The lr of each group for epoch last_epoch() (PyTorch's `get_lr()`): the chainable form,
  /// which may start from the groups' current rates (StepLR's), or the closed form in the
  /// epoch from base_lrs().
  virtual std::vector<double> compute_lr() const = 0;
  /// The lr of each group at epoch last_epoch() from base_lrs() alone (for step_to()).
  virtual std::vector<double> closed_form_lr() const { return compute_lr(); }
  /// Sets every group's lr to `lrs` (and last_lr).
  void apply(std::vector<double> lrs);
  /// PyTorch's constructor step: epoch 0's lr, for schedulers whose epoch 0 is not the current
  /// lr.
  void initial_step() { step_to(0); }
  /// Writes the extra state of a derived scheduler (keys of its own) into `out`.
  virtual void save_extra(OptimizerState& /*out*/) const {}
  /// Restores what save_extra() wrote; checks its keys before it changes anything.
  virtual void load_extra(const OptimizerState& /*in*/) {}

  /// The optimizer whose rates this scheduler sets.
  Optimizer& optimizer_;

 private:
  friend class SequentialLR;
  int64_t last_epoch_ = 0;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
};

/// Multiplies each group's lr by `gamma` every `step_size` epochs
/// (torch.optim.lr_scheduler.StepLR).
///
/// lr(epoch) = base_lr * gamma^floor(epoch / step_size). step() applies the factor to the
/// current lr, so a change made to the lr in between carries over, as in PyTorch; step_to()
/// uses the closed form.
class StepLR final : public LRScheduler {
 public:
  /// \throws ember::Error if step_size < 1 or gamma is negative or not finite.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  /// Epochs between two decays.
  int64_t step_size() const { return step_size_; }
  /// The decay factor.
  double gamma() const { return gamma_; }
  /// "StepLR".
  std::string_view name() const override { return "StepLR"; }

 protected:
  std::vector<double> compute_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

}  // namespace ember::optim
