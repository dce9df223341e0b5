#pragma once
// Learning-rate schedulers with PyTorch's semantics. They change a group's lr through
// Optimizer::set_lr, which writes the optimizer's device hyperparameters in place: a compiled
// training step picks up the new rate without a recompile.
#include <cstdint>
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
  void step();
  // The lr of each group as this scheduler last set it.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 protected:
  // The lr of each group for epoch last_epoch(), from the groups' current lrs (chainable form,
  // like PyTorch's get_lr()).
  virtual std::vector<double> compute_lr() const = 0;

  Optimizer& optimizer_;

 private:
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

 protected:
  std::vector<double> compute_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

}  // namespace ember::optim
