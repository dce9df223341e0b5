#pragma once
/// \file
/// The base Adam, AdamW, RMSprop and Adagrad share: per-parameter state, device-resident
/// hyperparameters and step counters, and one multi-tensor update op per group, device and
/// dtype.
///
/// Each step issues one multi-tensor update op (adam_update, rmsprop_update, adagrad_update)
/// per (group, device, dtype), as SGD issues sgd_update (optim/sgd.h): one kernel for all those
/// parameters on CUDA. The update's inputs are [hyper, step, params..., grads..., states...].
/// `hyper` is float64 on the parameters' device: the group's numeric options in the op's
/// order, lr first. `step` is a float32 scalar, the updates the group took so far; the kernel
/// computes t = step + 1 and everything derived from it (bias corrections, the decayed lr) on
/// the device, and the last update of a step adds 1 to the counter. Nothing on the step path
/// reads device memory on the host, and set_lr(), `set_options()` and schedulers write numbers
/// into `hyper` in place: a jit::compile'd step replays with the new values and no recompile.
/// Only the flags that change which tensors the update reads (amsgrad, centered, momentum on or
/// off, maximize) retrace.
///
/// PyTorch counts steps per parameter; here the group counts them (as SGD does), which is the
/// same whenever the group's parameters get their gradients together. A parameter whose first
/// gradient arrives after the group's first step starts from zero state but with the group's
/// count (PyTorch would start it at step 1); `tools/torch_optim_state.py` refuses to convert a
/// PyTorch state whose per-parameter counts differ within a group.
///
/// State dict keys (the tensors alias the live state):
/// - `param_groups.<g>.options`: float64, every numeric option of the group (see each
///   optimizer's option_values()), the device hyperparameters first;
/// - `param_groups.<g>.step`: float32 scalar, the group's step count (below 2^24 on loading);
/// - `state.<g>.<i>.<name>`: per parameter, PyTorch's state names (exp_avg, exp_avg_sq, ...),
///   present once the state exists.
///
/// Metadata: `optimizer` = name(), `param_groups`, `param_groups.<g>.params`, and
/// `param_groups.<g>.<flag>` = "true" / "false" for each of the optimizer's flags.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/op.h"
#include "optim/optimizer.h"

namespace ember::optim {

/// Base class of the multi-tensor optimizers (Adam, AdamW, RMSprop, Adagrad).
///
/// A derived optimizer describes its options through the protected hooks; stepping, state,
/// device hyperparameters and state_dict() are here. Per-parameter state tensors are created
/// (on the parameter's device, with its dtype) at the parameter's first update, and follow the
/// parameter if it moves to another device or dtype.
class ForeachOptimizer : public Optimizer {
 public:
  /// One multi-tensor update per (group, device, dtype) over the parameters that have a
  /// gradient; each group's step counter advances once if any of its parameters had one.
  void step() override;

  /// State tensor `name` of parameter `index` of `group` ("exp_avg", "square_avg", ...):
  /// undefined until the parameter's first update (or when this group does not keep it).
  /// \throws ember::Error if the group or index is out of range or no state has that name.
  Tensor state(size_t group, size_t index, std::string_view name) const;
  /// Updates the group has taken (steps on which at least one of its parameters had a
  /// gradient), read from the device counter (a compiled step advances it without running host
  /// code): a synchronizing read.
  int64_t steps(size_t group) const;
  /// The names of the state tensors this optimizer may keep, in the update's layout order.
  const std::vector<std::string>& state_names() const { return state_names_; }

  /// The options, step and state of every group under the keys listed in
  /// optim/foreach_optimizer.h; the tensors alias the live state.
  OptimizerState state_dict() const override;
  /// Loads a state_dict() of the same optimizer kind and group layout; the options (flags
  /// included) are replaced too. Checks everything first; a mismatch throws ember::Error and
  /// changes nothing. A state tensor absent from `state` is cleared (starts fresh at the next
  /// step); one the group's options do not keep is an error.
  void load_state_dict(const OptimizerState& state) override;

 protected:
  /// What a group's options ask of the update.
  struct UpdateSpec {
    OpId op;                  ///< the multi-tensor update op
    std::vector<bool> keeps;  ///< per state_names(): does this group keep the state
    Attrs flags;              ///< the op's flags; the base sets num_tensors, num_states, step
  };

  /// \param defaults the optimizer's default options.
  /// \param states the state names, in the update's layout order.
  /// \param flag_names the names of the boolean options, as saved in the metadata.
  /// \param device_hyper how many of option_values() the update reads from the device.
  ForeachOptimizer(std::unique_ptr<OptimizerOptions> defaults, std::vector<std::string> states,
                   std::vector<std::string> flag_names, size_t device_hyper);

  /// The op, kept states and flags a group with options `o` updates with.
  virtual UpdateSpec spec(const OptimizerOptions& o) const = 0;
  /// Every numeric option, the first `device_hyper` of them the update's hyper vector.
  virtual std::vector<double> option_values(const OptimizerOptions& o) const = 0;
  /// Every boolean option, in the order of the constructor's `flag_names`.
  virtual std::vector<bool> flag_values(const OptimizerOptions& o) const = 0;
  /// The inverse of option_values() and flag_values() (validated by the caller).
  virtual std::unique_ptr<OptimizerOptions> make_options(const std::vector<double>& values,
                                                         const std::vector<bool>& flags) const = 0;
  /// The value a fresh state tensor starts from (0; Adagrad's initial_accumulator_value).
  virtual double state_init(const OptimizerOptions& /*o*/, size_t /*state*/) const { return 0; }

  /// Replaces a group's options (validated first; an error changes nothing), writing the
  /// numbers into the device hyperparameters in place; a change of spec() makes compiled steps
  /// retrace.
  void replace_options(size_t group, std::unique_ptr<OptimizerOptions> next);
  /// For derived classes' constructors, after the base is built: validates the defaults and adds
  /// the groups (at least one parameter in all, else ember::Error).
  void add_groups(std::vector<ParamGroup> groups);

 private:
  // The device-resident numbers of one group on one device.
  struct DeviceSlot {
    Device device;
    Tensor hyper;  // float64[device_hyper_]
    Tensor step;   // float32 scalar
    Tensor one;    // float32 1, made once: the increment of a step no update of the slot counted
  };
  struct GroupState {
    UpdateSpec spec;  // spec(options), kept so step() allocates nothing once warm
    std::vector<std::vector<Tensor>> states;  // [state][param], undefined until first needed
    std::vector<DeviceSlot> slots;
    int64_t steps = 0;  // host mirror of `step`, so step() never reads the device
  };
  struct Bucket {
    Device device;
    DType dtype;
    std::vector<size_t> params;
    size_t slot = 0;
  };

  void on_group_added(size_t group) override;
  void on_lr_changed(size_t group) override;
  void check_grads() const;
  size_t slot_for(size_t group, Device device);
  void write_hyper(size_t group);
  void run_update(size_t group, size_t slot, const std::vector<size_t>& idx, bool count_step);

  std::vector<std::string> state_names_;
  std::vector<std::string> flag_names_;
  size_t device_hyper_;
  std::vector<GroupState> state_;
  // Scratch reused by every step() so the step path does not allocate once warm.
  std::vector<Bucket> buckets_;
  std::vector<Tensor> grads_;
  std::vector<Tensor> inputs_;
};

}  // namespace ember::optim
