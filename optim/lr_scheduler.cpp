#include "optim/lr_scheduler.h"

#include <cmath>

#include "core/error.h"
#include "core/factory.h"

namespace ember::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  // The first scheduler of an optimizer records each group's lr; later ones start from it.
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) {
    if (optimizer_.initial_lr(g) < 0) optimizer_.set_initial_lr(g, optimizer_.get_lr(g));
    base_lrs_.push_back(optimizer_.initial_lr(g));
  }
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) last_lr_.push_back(optimizer_.get_lr(g));
}

void LRScheduler::apply(std::vector<double> lrs) {
  EMBER_CHECK(lrs.size() == optimizer_.num_groups(), name(), ": ", lrs.size(),
              " learning rates for ", optimizer_.num_groups(), " parameter groups");
  for (size_t g = 0; g < lrs.size(); ++g)
    if (lrs[g] != optimizer_.get_lr(g)) optimizer_.set_lr(g, lrs[g]);
  last_lr_ = std::move(lrs);
}

void LRScheduler::step() {
  ++last_epoch_;
  apply(compute_lr());
}

void LRScheduler::step_to(int64_t epoch) {
  last_epoch_ = epoch;
  apply(closed_form_lr());
}

OptimizerState LRScheduler::state_dict() const {
  OptimizerState out;
  out.metadata["scheduler"] = std::string(name());
  out.tensors["last_epoch"] = full({}, static_cast<double>(last_epoch_), kFloat64);
  out.tensors["base_lrs"] = from_vector(base_lrs_, {static_cast<int64_t>(base_lrs_.size())});
  out.tensors["last_lr"] = from_vector(last_lr_, {static_cast<int64_t>(last_lr_.size())});
  save_extra(out);
  return out;
}

void LRScheduler::load_state_dict(const OptimizerState& in) {
  const std::string who = std::string(name()) + ".load_state_dict: ";
  auto it = in.metadata.find("scheduler");
  EMBER_CHECK(it != in.metadata.end() && it->second == name(), who, "the state is for '",
              it == in.metadata.end() ? std::string("(no scheduler)") : it->second, "'");
  auto vec = [&](const char* key, size_t want) {
    auto t = in.tensors.find(key);
    EMBER_CHECK(t != in.tensors.end() && t->second.defined() && is_floating(t->second.dtype()) &&
                    t->second.numel() == static_cast<int64_t>(want),
                who, "'", key, "' must hold ", want, " floating numbers");
    return t->second.cpu().to(kFloat64).contiguous().to_vector<double>();
  };
  const size_t n = optimizer_.num_groups();
  const double epoch = vec("last_epoch", 1)[0];
  EMBER_CHECK(epoch == std::floor(epoch) && std::fabs(epoch) < 9e15, who,
              "'last_epoch' must be a whole number, got ", epoch);
  std::vector<double> base = vec("base_lrs", n), last = vec("last_lr", n);
  load_extra(in);  // checks its own keys before it changes anything
  last_epoch_ = static_cast<int64_t>(epoch);
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  EMBER_CHECK(std::isfinite(gamma) && gamma >= 0, "StepLR: gamma must be finite and >= 0, got ",
              gamma);
}

std::vector<double> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs())
    lrs.push_back(base * std::pow(gamma_, static_cast<double>(last_epoch() / step_size_)));
  return lrs;
}

std::vector<double> StepLR::compute_lr() const {
  std::vector<double> lrs;
  const bool decay = last_epoch() % step_size_ == 0;
  for (size_t g = 0; g < optimizer_.num_groups(); ++g)
    lrs.push_back(decay ? optimizer_.get_lr(g) * gamma_ : optimizer_.get_lr(g));
  return lrs;
}

}  // namespace ember::optim
