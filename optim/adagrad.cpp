#include "optim/adagrad.h"

#include <cmath>

#include "core/error.h"

namespace ember::optim {

void AdagradOptions::validate() const {
  auto check = [](double v, const char* what) {
    EMBER_CHECK(std::isfinite(v) && v >= 0, "Adagrad: invalid ", what, " ", v, " (must be >= 0)");
  };
  check(lr_, "learning rate");
  check(lr_decay_, "lr_decay value");
  check(weight_decay_, "weight_decay value");
  check(initial_accumulator_value_, "initial_accumulator_value value");
  check(eps_, "epsilon value");
}

Adagrad::Adagrad(std::vector<Tensor> params, const AdagradOptions& options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& defaults)
    : ForeachOptimizer(defaults.clone(), {"sum"}, {"maximize"}, 4) {
  add_groups(std::move(groups));
}

void Adagrad::validate_options(const OptimizerOptions& options) const {
  const auto* o = dynamic_cast<const AdagradOptions*>(&options);
  EMBER_CHECK(o != nullptr, "Adagrad: a parameter group's options are not AdagradOptions");
  o->validate();
}

const AdagradOptions& Adagrad::options(size_t group) const {
  check_group(group, "options");
  return static_cast<const AdagradOptions&>(*groups_[group].options);
}

void Adagrad::set_options(size_t group, const AdagradOptions& next) {
  replace_options(group, next.clone());
}

ForeachOptimizer::UpdateSpec Adagrad::spec(const OptimizerOptions& options) const {
  const auto& o = static_cast<const AdagradOptions&>(options);
  UpdateSpec s{OpId::adagrad_update, {true}, Attrs{}};
  s.flags.maximize = o.maximize();
  return s;
}

std::vector<double> Adagrad::option_values(const OptimizerOptions& options) const {
  const auto& o = static_cast<const AdagradOptions&>(options);
  return {o.lr(), o.lr_decay(), o.weight_decay(), o.eps(), o.initial_accumulator_value()};
}

std::vector<bool> Adagrad::flag_values(const OptimizerOptions& options) const {
  return {static_cast<const AdagradOptions&>(options).maximize()};
}

std::unique_ptr<OptimizerOptions> Adagrad::make_options(const std::vector<double>& v,
                                                        const std::vector<bool>& f) const {
  AdagradOptions o(v[0]);
  o.lr_decay(v[1]).weight_decay(v[2]).eps(v[3]).initial_accumulator_value(v[4]).maximize(f[0]);
  return o.clone();
}

double Adagrad::state_init(const OptimizerOptions& o, size_t) const {
  return static_cast<const AdagradOptions&>(o).initial_accumulator_value();
}

}  // namespace ember::optim
