#include "optim/rmsprop.h"

#include <cmath>

#include "core/error.h"

namespace ember::optim {

void RMSpropOptions::validate() const {
  auto check = [](double v, const char* what) {
    EMBER_CHECK(std::isfinite(v) && v >= 0, "RMSprop: invalid ", what, " ", v, " (must be >= 0)");
  };
  check(lr_, "learning rate");
  check(eps_, "epsilon value");
  check(momentum_, "momentum value");
  check(weight_decay_, "weight_decay value");
  check(alpha_, "alpha value");
}

RMSprop::RMSprop(std::vector<Tensor> params, const RMSpropOptions& options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& defaults)
    : ForeachOptimizer(defaults.clone(), {"square_avg", "momentum_buffer", "grad_avg"},
                       {"centered", "maximize"}, 5) {
  add_groups(std::move(groups));
}

void RMSprop::validate_options(const OptimizerOptions& options) const {
  const auto* o = dynamic_cast<const RMSpropOptions*>(&options);
  EMBER_CHECK(o != nullptr, "RMSprop: a parameter group's options are not RMSpropOptions");
  o->validate();
}

const RMSpropOptions& RMSprop::options(size_t group) const {
  check_group(group, "options");
  return static_cast<const RMSpropOptions&>(*groups_[group].options);
}

void RMSprop::set_options(size_t group, const RMSpropOptions& next) {
  replace_options(group, next.clone());
}

ForeachOptimizer::UpdateSpec RMSprop::spec(const OptimizerOptions& options) const {
  const auto& o = static_cast<const RMSpropOptions&>(options);
  const bool momentum = o.momentum() > 0;
  UpdateSpec s{OpId::rmsprop_update, {true, momentum, o.centered()}, Attrs{}};
  s.flags.momentum_buffers = momentum;
  s.flags.centered = o.centered();
  s.flags.maximize = o.maximize();
  return s;
}

std::vector<double> RMSprop::option_values(const OptimizerOptions& options) const {
  const auto& o = static_cast<const RMSpropOptions&>(options);
  return {o.lr(), o.alpha(), o.eps(), o.weight_decay(), o.momentum()};
}

std::vector<bool> RMSprop::flag_values(const OptimizerOptions& options) const {
  const auto& o = static_cast<const RMSpropOptions&>(options);
  return {o.centered(), o.maximize()};
}

std::unique_ptr<OptimizerOptions> RMSprop::make_options(const std::vector<double>& v,
                                                        const std::vector<bool>& f) const {
  RMSpropOptions o(v[0]);
  o.alpha(v[1]).eps(v[2]).weight_decay(v[3]).momentum(v[4]).centered(f[0]).maximize(f[1]);
  return o.clone();
}

}  // namespace ember::optim
