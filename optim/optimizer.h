#pragma once
/// \file
/// The optimizer base class: parameter groups with their own hyperparameters, zero_grad, and
/// the state an optimizer saves and restores (optim/serialize.h writes it as safetensors).
#include <concepts>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace ember::optim {

/// Hyperparameters of one parameter group (libtorch's `OptimizerOptions`).
///
/// Each optimizer derives its own chainable options class (SGDOptions, AdamOptions, ...); the
/// base only exposes the learning rate, which every scheduler changes.
class OptimizerOptions {
 public:
  /// Virtual: options are owned through `std::unique_ptr<OptimizerOptions>`.
  virtual ~OptimizerOptions() = default;
  /// A copy of these options, of the same derived type.
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  /// The learning rate (`lr`).
  virtual double get_lr() const = 0;
  /// Sets the learning rate on this host copy only; use Optimizer::set_lr() to change the rate a
  /// live optimizer uses.
  virtual void set_lr(double lr) = 0;
};

/// A list of parameters sharing hyperparameters (PyTorch's `param_groups` entry).
///
/// Without options the group takes the optimizer's defaults when it is added.
/// \code
/// optim::SGD opt({optim::ParamGroup(backbone->parameters()),
///                 optim::ParamGroup(head->parameters(), optim::SGDOptions(0.1))},
///                optim::SGDOptions(0.01).momentum(0.9));
/// \endcode
struct ParamGroup {
  /// An empty group.
  ParamGroup() = default;
  /// A group that takes the optimizer's default options.
  explicit ParamGroup(std::vector<Tensor> params) : params(std::move(params)) {}
  /// A group with options of its own (the optimizer's options type, e.g. SGDOptions).
  template <class Options>
  requires std::derived_from<Options, OptimizerOptions> ParamGroup(std::vector<Tensor> params,
                                                                   const Options& options)
      : params(std::move(params)), options(std::make_unique<Options>(options)) {}
  /// Copies the parameter list (the same tensors) and clones the options.
  ParamGroup(const ParamGroup& o)
      : params(o.params),
        options(o.options ? o.options->clone() : nullptr),
        initial_lr(o.initial_lr) {}
  /// Copies the parameter list (the same tensors) and clones the options.
  ParamGroup& operator=(const ParamGroup& o) {
    if (this != &o) {
      params = o.params;
      options = o.options ? o.options->clone() : nullptr;
      initial_lr = o.initial_lr;
    }
    return *this;
  }
  /// Moves the group.
  ParamGroup(ParamGroup&&) = default;
  /// Moves the group.
  ParamGroup& operator=(ParamGroup&&) = default;

  /// The parameters: floating leaf tensors, each in one group of an optimizer only.
  std::vector<Tensor> params;
  /// The group's options; null means "the optimizer's defaults" until the group is added.
  std::unique_ptr<OptimizerOptions> options;
  /// The lr the first scheduler attached to the optimizer found (PyTorch's
  /// `group["initial_lr"]`): every later scheduler's base lr, so schedulers built one after
  /// another (SequentialLR's) all start from the same rate. Negative until a scheduler sets it.
  double initial_lr = -1;
};

/// Everything an optimizer (or scheduler, or GradScaler) needs to resume: named tensors
/// (buffers, step counters, hyperparameters) and string facts (the optimizer's name, group
/// sizes, flags). optim::save() writes it as one safetensors file.
struct OptimizerState {
  /// Named tensors; those of Optimizer::state_dict() alias the live state.
  std::map<std::string, Tensor> tensors;
  /// String facts, stored as the safetensors header's metadata.
  std::map<std::string, std::string> metadata;
};

/// Base class of every optimizer (libtorch's `torch::optim::Optimizer`).
///
/// Hyperparameters and step counters live in device memory the optimizer owns and the update
/// kernels read, and nothing on the step path reads device memory on the host. So an optimizer
/// step inside a jit::compile'd function is part of the graph, and set_lr(), `set_options()`
/// and the schedulers take effect at the next call with no recompile. Only changes that alter
/// which tensors the update reads (adding a group, flags such as nesterov, amsgrad, maximize,
/// momentum on or off) make a compiled step retrace.
class Optimizer {
 public:
  /// Virtual: optimizers are used through references to this base.
  virtual ~Optimizer() = default;
  /// Not copyable: it owns the state of its parameters.
  Optimizer(const Optimizer&) = delete;
  /// Not copyable: it owns the state of its parameters.
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient; parameters without one are skipped
  /// (as in PyTorch). Every gradient is checked first (same shape, dtype and device as its
  /// parameter; the parameter contiguous), so a bad one throws ember::Error and changes nothing.
  virtual void step() = 0;
  /// step(), except that every update reads `found_inf` on the device and changes nothing
  /// (step counts included) where it is not 0: a skipped step with no host read, so a compiled
  /// step stays one graph. GradScaler::step() calls it.
  /// \param found_inf a float32 scalar on the parameters' device.
  /// \throws ember::Error if `found_inf` is not a float32 scalar or a parameter lives on
  ///         another device.
  void step_unless_found_inf(const Tensor& found_inf);

  /// Clears the gradients of every parameter: drops them (`set_to_none`, the default, as in
  /// PyTorch 2) or writes zeros into the existing ones. Dropping reads nothing, so a compiled
  /// step that starts with zero_grad() guards nothing about the previous gradients.
  void zero_grad(bool set_to_none = true);

  /// Adds a group (PyTorch's `add_param_group`); a group without options takes defaults().
  /// \throws ember::Error if the options are invalid, or a parameter is undefined, not
  ///         floating, not a leaf, or already in a group.
  void add_param_group(ParamGroup group);
  /// The parameter groups, in the order they were added.
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  /// The number of parameter groups.
  size_t num_groups() const { return groups_.size(); }
  /// The options the optimizer was built with; groups without options of their own take them.
  const OptimizerOptions& defaults() const { return *defaults_; }

  /// Sets the learning rate of every group. Takes effect at the next step() without rebuilding
  /// anything (the value lives in device memory the update reads).
  /// \throws ember::Error if the value is invalid (e.g. negative); groups are set in order, and
  ///         the group that rejects it and those after it keep their rate.
  void set_lr(double lr);
  /// Sets the learning rate of one group, as set_lr(double).
  /// \throws ember::Error if `group` is out of range or the value is invalid.
  void set_lr(size_t group, double lr);
  /// The learning rate of a group. \throws ember::Error if `group` is out of range.
  double get_lr(size_t group) const;
  /// ParamGroup::initial_lr of a group: negative until a scheduler sets it.
  double initial_lr(size_t group) const;
  /// Sets ParamGroup::initial_lr of a group (schedulers do).
  void set_initial_lr(size_t group, double lr);

  /// The optimizer's name as PyTorch spells its class ("SGD", "AdamW"), also the state's
  /// `optimizer` metadata.
  virtual std::string_view name() const = 0;
  /// A snapshot of the optimizer's state: its options, step counters and per-parameter state.
  /// The tensors alias the live state (and may live on the device): save them (optim::save())
  /// or clone them to keep them.
  virtual OptimizerState state_dict() const = 0;
  /// Copies a state_dict() into this optimizer's state in place (parameters are not touched).
  /// The state must come from an optimizer of the same kind with the same groups and group
  /// sizes; everything is checked before anything changes.
  /// \throws ember::Error naming the key on any mismatch (kind, group count or size, missing
  ///         or unexpected tensors, shapes, invalid options); the optimizer is then unchanged.
  virtual void load_state_dict(const OptimizerState& state) = 0;

 protected:
  /// For derived optimizers: `defaults` must not be null.
  explicit Optimizer(std::unique_ptr<OptimizerOptions> defaults);

  /// Returns `group`, or throws ember::Error naming `what` if it is out of range.
  size_t check_group(size_t group, const char* what) const;
  /// Hook: validates a group's options before it is added or changed (throws ember::Error).
  virtual void validate_options(const OptimizerOptions& options) const = 0;
  /// Hook: sets up the state of a group that was just added.
  virtual void on_group_added(size_t group) = 0;
  /// Hook: pushes a group's new lr to the device.
  virtual void on_lr_changed(size_t group) = 0;

  /// For the updates of a step: the flag step_unless_found_inf() passes, or undefined.
  const Tensor& found_inf() const { return found_inf_; }
  /// Adds `one` to a step counter, or 1 - found_inf under step_unless_found_inf().
  void count_step(Tensor& step, const Tensor& one) const;

  /// The parameter groups (every group's options set).
  std::vector<ParamGroup> groups_;
  /// The default options.
  std::unique_ptr<OptimizerOptions> defaults_;

 private:
  Tensor found_inf_;
};

}  // namespace ember::optim
