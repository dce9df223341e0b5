#include "optim/lr_scheduler.h"

#include <cmath>

#include "core/error.h"

namespace ember::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) base_lrs_.push_back(optimizer_.get_lr(g));
  last_lr_ = base_lrs_;
}

void LRScheduler::step() {
  ++last_epoch_;
  std::vector<double> lrs = compute_lr();
  EMBER_CHECK(lrs.size() == optimizer_.num_groups(), "lr scheduler: ", lrs.size(),
              " learning rates for ", optimizer_.num_groups(), " parameter groups");
  for (size_t g = 0; g < lrs.size(); ++g)
    if (lrs[g] != optimizer_.get_lr(g)) optimizer_.set_lr(g, lrs[g]);
  last_lr_ = std::move(lrs);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  EMBER_CHECK(std::isfinite(gamma) && gamma >= 0, "StepLR: gamma must be finite and >= 0, got ",
              gamma);
}

std::vector<double> StepLR::compute_lr() const {
  std::vector<double> lrs;
  const bool decay = last_epoch() % step_size_ == 0;
  for (size_t g = 0; g < optimizer_.num_groups(); ++g)
    lrs.push_back(decay ? optimizer_.get_lr(g) * gamma_ : optimizer_.get_lr(g));
  return lrs;
}

}  // namespace ember::optim
