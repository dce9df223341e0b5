#include "optim/adam.h"

#include <cmath>

#include "core/error.h"

namespace ember::optim {

template <bool D>
void AdamOptionsT<D>::validate() const {
  const char* who = D ? "AdamW" : "Adam";
  EMBER_CHECK(std::isfinite(lr_) && lr_ >= 0, who, ": invalid learning rate ", lr_,
              " (must be >= 0)");
  EMBER_CHECK(std::isfinite(eps_) && eps_ >= 0, who, ": invalid epsilon value ", eps_,
              " (must be >= 0)");
  EMBER_CHECK(beta1_ >= 0 && beta1_ < 1, who, ": invalid beta parameter at index 0: ", beta1_,
              " (must be in [0, 1))");
  EMBER_CHECK(beta2_ >= 0 && beta2_ < 1, who, ": invalid beta parameter at index 1: ", beta2_,
              " (must be in [0, 1))");
  EMBER_CHECK(std::isfinite(weight_decay_) && weight_decay_ >= 0, who,
              ": invalid weight_decay value ", weight_decay_, " (must be >= 0)");
}

template <bool D>
AdamT<D>::AdamT(std::vector<Tensor> params, const Options& options)
    : AdamT(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

template <bool D>
AdamT<D>::AdamT(std::vector<ParamGroup> groups, const Options& defaults)
    : ForeachOptimizer(defaults.clone(), {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
                       {"amsgrad", "maximize"}, 5) {
  add_groups(std::move(groups));
}

template <bool D>
void AdamT<D>::validate_options(const OptimizerOptions& options) const {
  const auto* o = dynamic_cast<const Options*>(&options);
  EMBER_CHECK(o != nullptr, name(), ": a parameter group's options are not ",
              D ? "AdamWOptions" : "AdamOptions");
  o->validate();
}

template <bool D>
const typename AdamT<D>::Options& AdamT<D>::options(size_t group) const {
  check_group(group, "options");
  return static_cast<const Options&>(*groups_[group].options);
}

template <bool D>
void AdamT<D>::set_options(size_t group, const Options& next) {
  replace_options(group, next.clone());
}
template <bool D>
void AdamT<D>::set_betas(size_t g, double b1, double b2) {
  set_options(g, Options(options(g)).betas(b1, b2));
}
template <bool D>
void AdamT<D>::set_eps(size_t g, double v) {
  set_options(g, Options(options(g)).eps(v));
}
template <bool D>
void AdamT<D>::set_weight_decay(size_t g, double v) {
  set_options(g, Options(options(g)).weight_decay(v));
}

template <bool D>
ForeachOptimizer::UpdateSpec AdamT<D>::spec(const OptimizerOptions& options) const {
  const auto& o = static_cast<const Options&>(options);
  UpdateSpec s{OpId::adam_update, {true, true, o.amsgrad()}, Attrs{}};
  s.flags.amsgrad = o.amsgrad();
  s.flags.maximize = o.maximize();
  s.flags.decoupled_weight_decay = D;
  return s;
}

template <bool D>
std::vector<double> AdamT<D>::option_values(const OptimizerOptions& options) const {
  const auto& o = static_cast<const Options&>(options);
  return {o.lr(), o.beta1(), o.beta2(), o.eps(), o.weight_decay()};
}

template <bool D>
std::vector<bool> AdamT<D>::flag_values(const OptimizerOptions& options) const {
  const auto& o = static_cast<const Options&>(options);
  return {o.amsgrad(), o.maximize()};
}

template <bool D>
std::unique_ptr<OptimizerOptions> AdamT<D>::make_options(const std::vector<double>& v,
                                                         const std::vector<bool>& f) const {
  Options o(v[0]);
  o.betas(v[1], v[2]).eps(v[3]).weight_decay(v[4]).amsgrad(f[0]).maximize(f[1]);
  return o.clone();
}

template class AdamOptionsT<false>;
template class AdamOptionsT<true>;
template class AdamT<false>;
template class AdamT<true>;

}  // namespace ember::optim
