#include "optim/optimizer.h"

#include "core/config_epoch.h"

#include "autograd/grad_mode.h"
#include "core/error.h"
#include "core/ops.h"

namespace ember::optim {

Optimizer::Optimizer(std::unique_ptr<OptimizerOptions> defaults) : defaults_(std::move(defaults)) {
  EMBER_CHECK(defaults_ != nullptr, "optimizer: default options are missing");
}

void Optimizer::step_unless_found_inf(const Tensor& found_inf) {
  EMBER_CHECK(found_inf.defined() && found_inf.dtype() == kFloat32 && found_inf.numel() == 1,
              name(), ".step: found_inf must be a float32 scalar, got ",
              found_inf.defined() ? std::string(dtype_name(found_inf.dtype())) : "undefined",
              found_inf.defined() ? found_inf.sizes() : Shape{});
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const Tensor& p : groups_[g].params)
      EMBER_CHECK(p.device() == found_inf.device(), name(), ".step: a parameter of group ", g,
                  " is on ", p.device().str(), " but found_inf on ", found_inf.device().str(),
                  " (one GradScaler per device)");
  struct Clear {
    Tensor& t;
    ~Clear() { t = Tensor(); }
  } clear{found_inf_};
  found_inf_ = found_inf;
  step();
}

void Optimizer::count_step(Tensor& step, const Tensor& one) const {
  if (found_inf_.defined())
    step.add_(sub(one, found_inf_));
  else
    step.add_(one);
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& g : groups_) {
    for (Tensor& p : g.params) {
      // Clearing needs no look at the slot: a compiled step then does not depend on whether a
      // gradient was there (jit/graph.h, GradInput).
      if (set_to_none) {
        p.set_grad(Tensor());
        continue;
      }
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      NoGradGuard no_grad;
      grad.zero_();
    }
  }
}

void Optimizer::add_param_group(ParamGroup group) {
  bump_config_epoch();  // a compiled step updating these parameters must retrace
  if (!group.options) group.options = defaults_->clone();
  validate_options(*group.options);
  const size_t index = groups_.size();
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    EMBER_CHECK(p.defined(), name(), ": parameter ", i, " of group ", index, " is undefined");
    EMBER_CHECK(is_floating(p.dtype()), name(), ": parameter ", i, " of group ", index, " is ",
                dtype_name(p.dtype()), "; only floating tensors can be optimized");
    EMBER_CHECK(p.is_leaf(), name(), ": parameter ", i, " of group ", index,
                " is not a leaf (it was computed by a recorded op); optimize the leaf it came "
                "from, or detach() it");
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(!group.params[j].is_same(p), name(), ": parameter ", i, " of group ", index,
                  " repeats parameter ", j, " of the same group");
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t j = 0; j < groups_[g].params.size(); ++j)
        EMBER_CHECK(!groups_[g].params[j].is_same(p), name(), ": parameter ", i, " of group ",
                    index, " is already parameter ", j, " of group ", g,
                    "; a parameter may belong to one group only");
  }
  groups_.push_back(std::move(group));
  on_group_added(index);
}

size_t Optimizer::check_group(size_t group, const char* what) const {
  EMBER_CHECK(group < groups_.size(), name(), ".", what, ": group ", group, " out of range (",
              groups_.size(), " groups)");
  return group;
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_lr(g, lr);
}

void Optimizer::set_lr(size_t group, double lr) {
  check_group(group, "set_lr");
  // Validate on a copy so a rejected value leaves the group as it was.
  std::unique_ptr<OptimizerOptions> next = groups_[group].options->clone();
  next->set_lr(lr);
  validate_options(*next);
  groups_[group].options = std::move(next);
  on_lr_changed(group);
}

double Optimizer::get_lr(size_t group) const {
  check_group(group, "get_lr");
  return groups_[group].options->get_lr();
}

double Optimizer::initial_lr(size_t group) const {
  check_group(group, "initial_lr");
  return groups_[group].initial_lr;
}

void Optimizer::set_initial_lr(size_t group, double lr) {
  check_group(group, "set_initial_lr");
  groups_[group].initial_lr = lr;
}

}  // namespace ember::optim
