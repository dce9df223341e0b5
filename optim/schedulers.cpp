#include "optim/schedulers.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>

#include "core/error.h"
#include "core/factory.h"

namespace ember::optim {

namespace {
template <class F>
std::vector<double> per_group(const std::vector<double>& base, F&& f) {
  std::vector<double> out;
  out.reserve(base.size());
  for (double b : base) out.push_back(f(b));
  return out;
}
}  // namespace

// ---- MultiStepLR ----------------------------------------------------------------------------

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  EMBER_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
              "MultiStepLR: milestones must be ascending");
  EMBER_CHECK(std::isfinite(gamma) && gamma >= 0,
              "MultiStepLR: gamma must be finite and >= 0, got ", gamma);
  initial_step();
}

std::vector<double> MultiStepLR::compute_lr() const {
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) - milestones_.begin();
  return per_group(base_lrs(),
                   [&](double b) { return b * std::pow(gamma_, static_cast<double>(passed)); });
}

// ---- ExponentialLR --------------------------------------------------------------------------

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  EMBER_CHECK(std::isfinite(gamma) && gamma >= 0,
              "ExponentialLR: gamma must be finite and >= 0, got ", gamma);
  initial_step();
}

std::vector<double> ExponentialLR::compute_lr() const {
  return per_group(base_lrs(), [&](double b) {
    return b * std::pow(gamma_, static_cast<double>(last_epoch()));
  });
}

// ---- CosineAnnealingLR ----------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  EMBER_CHECK(T_max >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", T_max);
  EMBER_CHECK(std::isfinite(eta_min) && eta_min >= 0,
              "CosineAnnealingLR: eta_min must be finite and >= 0, got ", eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingLR::compute_lr() const {
  const double c =
      std::cos(std::numbers::pi * static_cast<double>(last_epoch()) / static_cast<double>(t_max_));
  return per_group(base_lrs(), [&](double b) { return eta_min_ + (b - eta_min_) * (1 + c) / 2; });
}

// ---- LinearLR -------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer), start_(start_factor), end_(end_factor), total_(total_iters) {
  EMBER_CHECK(start_factor > 0 && start_factor <= 1,
              "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  EMBER_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ",
              end_factor);
  EMBER_CHECK(total_iters >= 1, "LinearLR: total_iters must be >= 1, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::compute_lr() const {
  const double e = static_cast<double>(std::min(last_epoch(), total_));
  return per_group(base_lrs(), [&](double b) {
    return b * (start_ + (end_ - start_) * e / static_cast<double>(total_));
  });
}

// ---- LambdaLR -------------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lambda)
    : LRScheduler(optimizer), lambda_(std::move(lambda)) {
  EMBER_CHECK(static_cast<bool>(lambda_), "LambdaLR: the lr function is empty");
  initial_step();
}

std::vector<double> LambdaLR::compute_lr() const {
  const double f = lambda_(last_epoch());
  return per_group(base_lrs(), [&](double b) { return b * f; });
}

// ---- OneCycleLR -----------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
                       OneCycleOptions options)
    : LRScheduler(optimizer), max_lr_(max_lr), total_(total_steps), o_(options) {
  EMBER_CHECK(total_steps >= 1, "OneCycleLR: total_steps must be >= 1, got ", total_steps);
  EMBER_CHECK(o_.pct_start >= 0 && o_.pct_start <= 1,
              "OneCycleLR: pct_start must be in [0, 1], got ", o_.pct_start);
  EMBER_CHECK(std::isfinite(max_lr) && max_lr >= 0, "OneCycleLR: invalid max_lr ", max_lr);
  EMBER_CHECK(o_.div_factor > 0 && o_.final_div_factor > 0,
              "OneCycleLR: div_factor and final_div_factor must be > 0, got ", o_.div_factor,
              " and ", o_.final_div_factor);
  // The warm-up phase ends at step pct_start * total_steps - 1; at 0 its first step would be
  // 0 / 0 (a NaN rate here, a ZeroDivisionError in PyTorch).
  EMBER_CHECK(o_.pct_start * static_cast<double>(total_steps) != 1.0, "OneCycleLR: pct_start ",
              o_.pct_start, " of ", total_steps,
              " total steps is a warm-up of one step, which has no length; use pct_start 0 or a "
              "warm-up of at least two steps");
  initial_step();
}

std::vector<double> OneCycleLR::compute_lr() const {
  const int64_t step = last_epoch();
  EMBER_CHECK(step <= total_, "OneCycleLR: tried to step ", step + 1,
              " times; the specified number of total steps is ", total_);
  const double initial = max_lr_ / o_.div_factor, min_lr = initial / o_.final_div_factor;
  const double end1 = o_.pct_start * static_cast<double>(total_) - 1;
  const double end2 = static_cast<double>(total_) - 1;
  const double s = static_cast<double>(step);
  auto anneal = [&](double from, double to, double pct) {
    if (o_.cosine) return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
    return (to - from) * pct + from;
  };
  double lr;
  if (s <= end1)
    lr = anneal(initial, max_lr_, s / end1);
  else
    lr = anneal(max_lr_, min_lr, (s - end1) / (end2 - end1));
  return std::vector<double>(optimizer_.num_groups(), lr);
}

// ---- SequentialLR ---------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  EMBER_CHECK(!schedulers_.empty(), "SequentialLR: expects at least one scheduler");
  EMBER_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
              " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  EMBER_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()),
              "SequentialLR: milestones must be ascending");
  for (size_t k = 0; k < schedulers_.size(); ++k)
    EMBER_CHECK(schedulers_[k] && &schedulers_[k]->optimizer_ == &optimizer_,
                "SequentialLR: scheduler ", k, " is missing or belongs to another optimizer");
  // Back to the initial rates, each child one epoch back, then the first child's epoch 0.
  for (size_t g = 0; g < optimizer_.num_groups(); ++g)
    optimizer_.set_lr(g, optimizer_.initial_lr(g));
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->step();
  apply(schedulers_[0]->get_last_lr());
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = static_cast<size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_)
    s.step_to(0);
  else
    s.step();
  last_lr_ = s.get_last_lr();
}

std::vector<double> SequentialLR::compute_lr() const {
  const size_t idx = static_cast<size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) - milestones_.begin());
  return schedulers_[idx]->get_last_lr();
}

void SequentialLR::save_extra(OptimizerState& out) const {
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    const OptimizerState child = schedulers_[k]->state_dict();
    const std::string prefix = "scheduler." + std::to_string(k) + ".";
    for (const auto& [key, t] : child.tensors) out.tensors[prefix + key] = t;
    for (const auto& [key, v] : child.metadata) out.metadata[prefix + key] = v;
  }
}

void SequentialLR::load_extra(const OptimizerState& in) {
  std::vector<OptimizerState> children(schedulers_.size());
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    const std::string prefix = "scheduler." + std::to_string(k) + ".";
    for (const auto& [key, t] : in.tensors)
      if (key.rfind(prefix, 0) == 0) children[k].tensors[key.substr(prefix.size())] = t;
    for (const auto& [key, v] : in.metadata)
      if (key.rfind(prefix, 0) == 0) children[k].metadata[key.substr(prefix.size())] = v;
  }
  // Each child checks before it changes; a later child's failure could leave earlier ones
  // loaded, so check them all on copies of their state first.
  std::vector<OptimizerState> before;
  for (auto& s : schedulers_) before.push_back(s->state_dict());
  size_t k = 0;
  try {
    for (; k < schedulers_.size(); ++k) schedulers_[k]->load_state_dict(children[k]);
  } catch (...) {
    for (size_t j = 0; j < k; ++j) schedulers_[j]->load_state_dict(before[j]);
    throw;
  }
}

// ---- ReduceLROnPlateau ----------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : optimizer_(optimizer), o_(options) {
  EMBER_CHECK(o_.factor < 1.0 && o_.factor >= 0, "ReduceLROnPlateau: factor should be < 1.0, got ",
              o_.factor);
  EMBER_CHECK(o_.patience >= 0 && o_.cooldown >= 0 && o_.min_lr >= 0 && o_.threshold >= 0,
              "ReduceLROnPlateau: patience, cooldown, min_lr and threshold must be >= 0");
  best_ = o_.mode_max ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::better(double a) const {
  if (!o_.mode_max)
    return o_.threshold_abs ? a < best_ - o_.threshold : a < best_ * (1 - o_.threshold);
  return o_.threshold_abs ? a > best_ + o_.threshold : a > best_ * (o_.threshold + 1);
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > o_.patience) {
    for (size_t g = 0; g < optimizer_.num_groups(); ++g) {
      const double old_lr = optimizer_.get_lr(g);
      const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
      if (old_lr - new_lr > o_.eps) optimizer_.set_lr(g, new_lr);
    }
    cooldown_counter_ = o_.cooldown;
    num_bad_epochs_ = 0;
  }
}

void ReduceLROnPlateau::step(const Tensor& metric) {
  EMBER_CHECK(metric.defined() && metric.numel() == 1,
              "ReduceLROnPlateau.step: the metric must be one number, got ",
              metric.defined() ? metric.sizes() : Shape{});
  step(metric.detach().cpu().to(kFloat64).item<double>());
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) out.push_back(optimizer_.get_lr(g));
  return out;
}

OptimizerState ReduceLROnPlateau::state_dict() const {
  OptimizerState out;
  out.metadata["scheduler"] = "ReduceLROnPlateau";
  out.tensors["state"] = from_vector(
      std::vector<double>{best_, static_cast<double>(num_bad_epochs_),
                          static_cast<double>(cooldown_counter_), static_cast<double>(last_epoch_)},
      {4});
  return out;
}

void ReduceLROnPlateau::load_state_dict(const OptimizerState& in) {
  auto it = in.metadata.find("scheduler");
  EMBER_CHECK(it != in.metadata.end() && it->second == "ReduceLROnPlateau",
              "ReduceLROnPlateau.load_state_dict: not a ReduceLROnPlateau state");
  auto t = in.tensors.find("state");
  EMBER_CHECK(t != in.tensors.end() && t->second.defined() && t->second.numel() == 4 &&
                  is_floating(t->second.dtype()),
              "ReduceLROnPlateau.load_state_dict: 'state' must hold 4 floating numbers");
  const std::vector<double> v = t->second.cpu().to(kFloat64).contiguous().to_vector<double>();
  for (int k = 1; k < 4; ++k)
    EMBER_CHECK(v[k] == std::floor(v[k]) && v[k] >= 0 && v[k] < 9e15,
                "ReduceLROnPlateau.load_state_dict: counter ", k,
                " must be a whole number >= 0, got ", v[k]);
  best_ = v[0];
  num_bad_epochs_ = static_cast<int64_t>(v[1]);
  cooldown_counter_ = static_cast<int64_t>(v[2]);
  last_epoch_ = static_cast<int64_t>(v[3]);
}

}  // namespace ember::optim
