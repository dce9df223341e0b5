#pragma once
// Learning-rate schedulers with PyTorch's semantics. They change a group's lr through
// Optimizer::set_lr, which writes the optimizer's device hyperparameters in place: a compiled
// training step picks up the new rate without a recompile.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (call after optimizer.step()) and sets every group's new lr.
  virtual void step();
  // PyTorch's step(epoch): jumps to `epoch` and sets the closed-form lr there (SequentialLR
  // restarts its schedulers this way at their milestones).
  void step_to(int64_t epoch);
  virtual std::string_view name() const = 0;

  // last_epoch, base_lrs, last_lr and the scheduler's own counters as float64 tensors, metadata
  // "scheduler" = name(); load_state_dict checks everything before it changes anything (it does
  // not touch the optimizer: the optimizer's own state holds the lr in use). Host functions
  // (LambdaLR's) are not saved, as in PyTorch.
  OptimizerState state_dict() const;
  void load_state_dict(const OptimizerState& state);
  // The lr of each group as this scheduler last set it.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 protected:
  // The lr of each group for epoch last_epoch(), from the groups' current lrs (chainable form,
  // like PyTorch's get_lr()).
  virtual std::vector<double> compute_lr() const = 0;
  // The lr of each group at epoch last_epoch() from base_lrs() alone.
  virtual std::vector<double> closed_form_lr() const { return compute_lr(); }
  // Sets every group's lr to `lrs` (and last_lr).
  void apply(std::vector<double> lrs);
  // PyTorch's constructor step: epoch 0's lr, for schedulers whose epoch 0 is not the current lr.
  void initial_step() { step_to(0); }
  // Extra state of a derived scheduler (keys of its own), saved and restored with the rest.
  virtual void save_extra(OptimizerState& /*out*/) const {}
  virtual void load_extra(const OptimizerState& /*in*/) {}

  Optimizer& optimizer_;

 private:
  friend class SequentialLR;
  int64_t last_epoch_ = 0;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
};

// Multiplies each group's lr by `gamma` every `step_size` epochs:
// lr(epoch) = base_lr * gamma^floor(epoch / step_size) (applied to the current lr, so a
// change made to the lr in between carries over, as in PyTorch).
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  int64_t step_size() const { return step_size_; }
  double gamma() const { return gamma_; }
  std::string_view name() const override { return "StepLR"; }

 protected:
  std::vector<double> compute_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

}  // namespace ember::optim
