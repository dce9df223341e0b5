#pragma once
// The optimizer base: parameter groups with their own hyperparameters, zero_grad, and the
// state an optimizer saves and restores (optim/serialize.h writes it as safetensors).
#include <concepts>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace ember::optim {

// Hyperparameters of one parameter group. Each optimizer derives its own chainable options
// struct (SGDOptions); the base only needs the learning rate, which every scheduler changes.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
};

// A list of parameters sharing hyperparameters. Without options the group takes the
// optimizer's defaults when it is added.
struct ParamGroup {
  ParamGroup() = default;
  explicit ParamGroup(std::vector<Tensor> params) : params(std::move(params)) {}
  template <class Options>
  requires std::derived_from<Options, OptimizerOptions> ParamGroup(std::vector<Tensor> params,
                                                                   const Options& options)
      : params(std::move(params)), options(std::make_unique<Options>(options)) {}
  ParamGroup(const ParamGroup& o)
      : params(o.params),
        options(o.options ? o.options->clone() : nullptr),
        initial_lr(o.initial_lr) {}
  ParamGroup& operator=(const ParamGroup& o) {
    if (this != &o) {
      params = o.params;
      options = o.options ? o.options->clone() : nullptr;
      initial_lr = o.initial_lr;
    }
    return *this;
  }
  ParamGroup(ParamGroup&&) = default;
  ParamGroup& operator=(ParamGroup&&) = default;

  std::vector<Tensor> params;
  std::unique_ptr<OptimizerOptions> options;
  // The lr the first scheduler attached to the optimizer found (PyTorch's group["initial_lr"]):
  // every later scheduler's base lr, so schedulers built one after another (SequentialLR's)
  // all start from the same rate. Negative until a scheduler sets it.
  double initial_lr = -1;
};

// Everything an optimizer needs to resume: named tensors (buffers, step counters,
// hyperparameters) and string facts (the optimizer's name, group sizes, flags).
struct OptimizerState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; parameters without one are skipped.
  virtual void step() = 0;
  // step(), except that every update reads `found_inf` (a float32 scalar on the parameters'
  // device, GradScaler's) on the device and changes nothing, step counts included, where it is
  // not 0: a skipped step with no host read, so a compiled step stays one graph.
  void step_unless_found_inf(const Tensor& found_inf);

  // Clears the gradients of every parameter: drops them (set_to_none, the default, like
  // PyTorch 2) or writes zeros into the existing ones.
  void zero_grad(bool set_to_none = true);

  // Adds a group; a parameter may belong to one group only, and must be a floating leaf.
  void add_param_group(ParamGroup group);
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  size_t num_groups() const { return groups_.size(); }
  const OptimizerOptions& defaults() const { return *defaults_; }

  // The learning rate of every group / of one group. Takes effect at the next step() without
  // rebuilding anything (the value lives in device memory the update reads).
  void set_lr(double lr);
  void set_lr(size_t group, double lr);
  double get_lr(size_t group) const;
  // ParamGroup::initial_lr of a group (schedulers set it).
  double initial_lr(size_t group) const;
  void set_initial_lr(size_t group, double lr);

  virtual std::string_view name() const = 0;  // "SGD"
  // A snapshot of the optimizer's state (tensors may live on the device), and its inverse,
  // which copies values into the existing state in place. Mismatches are ember::Error.
  virtual OptimizerState state_dict() const = 0;
  virtual void load_state_dict(const OptimizerState& state) = 0;

 protected:
  explicit Optimizer(std::unique_ptr<OptimizerOptions> defaults);

  size_t check_group(size_t group, const char* what) const;
  // Hooks for a derived optimizer: validate a group's options before it is added or changed
  // (throw ember::Error), set up its state after it was added, push a new lr to the device.
  virtual void validate_options(const OptimizerOptions& options) const = 0;
  virtual void on_group_added(size_t group) = 0;
  virtual void on_lr_changed(size_t group) = 0;

  // For the updates of a step: the flag step_unless_found_inf passes, or undefined.
  const Tensor& found_inf() const { return found_inf_; }
  // Adds `one` to a step counter, or 1 - found_inf under step_unless_found_inf.
  void count_step(Tensor& step, const Tensor& one) const;

  std::vector<ParamGroup> groups_;
  std::unique_ptr<OptimizerOptions> defaults_;

 private:
  Tensor found_inf_;
};

}  // namespace ember::optim
