#pragma once
/// \file
/// Stochastic gradient descent with PyTorch's exact semantics (torch.optim.SGD): lr, momentum,
/// dampening, weight_decay, nesterov, maximize.
///
/// One step issues one `sgd_update` op per (parameter group, device, dtype), a single kernel
/// for all those parameters on CUDA, instead of a loop of small ops. Its inputs are
/// [hyper, step, params..., grads..., (momentum buffers...)], where `hyper` is float32[4]
/// {lr, momentum, dampening, weight_decay} on the parameters' device and `step` a float32
/// scalar, the number of updates the group has taken so far. Per element, in the parameter's
/// compute type (float for 16-bit floats):
/// \code
/// g = maximize ? -grad : grad
/// if weight_decay != 0:  g += weight_decay * p
/// if momentum != 0:      buf = step == 0 ? g : momentum * buf + (1 - dampening) * g
///                        g = nesterov ? g + momentum * buf : buf
/// p -= lr * g
/// \endcode
/// (`step == 0` makes the first buffer a copy of g, PyTorch's clone; a buffer created after the
/// group's first step starts the same way.) Hyperparameters and the step live in device memory
/// the optimizer owns, so set_lr() and schedulers write a number there and nothing on the step
/// path reads device memory on the host: a compiled step replays with new values and no
/// recompile. The step is counted by the group's last update on each device, not by a kernel
/// of its own.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

/// Options of SGD, chainable: `SGDOptions(0.01).momentum(0.9).nesterov(true)`.
class SGDOptions final : public OptimizerOptions {
 public:
  /// Options with learning rate `lr` and everything else off (PyTorch's defaults).
  explicit SGDOptions(double lr = 1e-3) : lr_(lr) {}

  /// Sets the learning rate.
  SGDOptions& lr(double v) {
    lr_ = v;
    return *this;
  }
  /// Sets the momentum factor (0: plain SGD, no momentum buffers).
  SGDOptions& momentum(double v) {
    momentum_ = v;
    return *this;
  }
  /// Sets the dampening of the momentum: buf = momentum * buf + (1 - dampening) * g.
  SGDOptions& dampening(double v) {
    dampening_ = v;
    return *this;
  }
  /// Sets the L2 penalty added to the gradient: g += weight_decay * p.
  SGDOptions& weight_decay(double v) {
    weight_decay_ = v;
    return *this;
  }
  /// Enables Nesterov momentum (needs momentum > 0 and dampening 0).
  SGDOptions& nesterov(bool v) {
    nesterov_ = v;
    return *this;
  }
  /// Maximizes the objective instead of minimizing it (the gradient's sign flipped).
  SGDOptions& maximize(bool v) {
    maximize_ = v;
    return *this;
  }
  /// The learning rate (default 1e-3).
  double lr() const { return lr_; }
  /// The momentum factor (default 0).
  double momentum() const { return momentum_; }
  /// The dampening (default 0).
  double dampening() const { return dampening_; }
  /// The weight decay (default 0).
  double weight_decay() const { return weight_decay_; }
  /// Whether Nesterov momentum is on (default false).
  bool nesterov() const { return nesterov_; }
  /// Whether the objective is maximized (default false).
  bool maximize() const { return maximize_; }

  /// PyTorch's checks: lr >= 0, momentum >= 0, weight_decay >= 0, a finite dampening;
  /// nesterov needs momentum > 0 and dampening == 0.
  /// \throws ember::Error naming the value.
  void validate() const;

  std::unique_ptr<OptimizerOptions> clone() const override {
    return std::make_unique<SGDOptions>(*this);
  }
  double get_lr() const override { return lr_; }
  void set_lr(double v) override { lr_ = v; }

 private:
  double lr_;
  double momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false, maximize_ = false;
};

/// Stochastic gradient descent, optionally with momentum (torch.optim.SGD); the update rule is
/// in optim/sgd.h.
/// \code
/// optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
/// opt.zero_grad();
/// loss.backward();
/// opt.step();
/// \endcode
class SGD final : public Optimizer {
 public:
  /// One group of `params` with `options`.
  /// \throws ember::Error if the options are invalid, the list is empty, or a parameter is not
  ///         a floating leaf or repeats.
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  /// Several groups; groups without options take `defaults`.
  /// \throws ember::Error as the single-group constructor.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults);

  /// One `sgd_update` per (group, device, dtype) over the parameters that have a gradient;
  /// momentum buffers are created at a parameter's first update with momentum.
  void step() override;
  /// "SGD".
  std::string_view name() const override { return "SGD"; }

  /// The host copy of a group's options.
  const SGDOptions& options(size_t group = 0) const;
  /// Replaces a group's options (validated first; an error changes nothing). Numbers are
  /// written into the group's device hyperparameters in place (no recompile); turning nesterov,
  /// maximize, or momentum on or off changes the update op, so a compiled step retraces.
  void set_options(size_t group, const SGDOptions& options);
  /// Sets a group's momentum, as set_options().
  void set_momentum(size_t group, double v);
  /// Sets a group's dampening, as set_options().
  void set_dampening(size_t group, double v);
  /// Sets a group's weight decay, as set_options().
  void set_weight_decay(size_t group, double v);
  /// Sets a group's nesterov flag, as set_options() (a compiled step retraces).
  void set_nesterov(size_t group, bool v);
  /// Sets a group's maximize flag, as set_options() (a compiled step retraces).
  void set_maximize(size_t group, bool v);

  /// Parameter `index` of `group`'s momentum buffer: undefined until the parameter's first
  /// update with momentum.
  Tensor momentum_buffer(size_t group, size_t index) const;
  /// Updates the group has taken (steps on which at least one of its parameters had a
  /// gradient), read from the device counter: a synchronizing read.
  int64_t steps(size_t group) const;

  /// A snapshot of the options, steps and momentum buffers.
  ///
  /// Keys: `param_groups.<g>.options` float64 {lr, momentum, dampening, weight_decay},
  /// `param_groups.<g>.step` float32 scalar, `state.<g>.<i>.momentum_buffer`; metadata
  /// `optimizer` = "SGD", `param_groups`, `param_groups.<g>.params`, `.nesterov`, `.maximize`.
  /// The tensors alias the live state.
  OptimizerState state_dict() const override;
  /// Loads a state_dict() of an SGD with the same group layout; options, steps and momentum
  /// buffers are replaced (a buffer absent from `state` is cleared). Checks everything first;
  /// a mismatch throws ember::Error and changes nothing.
  void load_state_dict(const OptimizerState& state) override;

 private:
  // The device-resident numbers of one group on one device.
  struct DeviceSlot {
    Device device;
    Tensor hyper;  // float32[4] {lr, momentum, dampening, weight_decay}
    Tensor step;   // float32 scalar
    // float32 scalar 1 on the device, made once: the increment of a step that no sgd_update
    // of this slot could count (no parameter on the device had a gradient, or every update
    // read zero_step)
    Tensor one;
    Tensor zero_step;  // float32 scalar 0, never written: for buffers created after step 0
  };
  struct GroupState {
    std::vector<Tensor> buffers;  // per parameter, undefined until first needed
    std::vector<DeviceSlot> slots;
    int64_t steps = 0;  // host mirror of `step`, so step() never reads the device
  };
  // The parameters of one group sharing a device and dtype, gathered for one dispatch.
  struct Bucket {
    Device device;
    DType dtype;
    std::vector<size_t> ready;  // buffers that already hold momentum (or no buffers at all)
    std::vector<size_t> fresh;  // buffers created this step after the group's first step
    size_t slot = 0;            // the group's DeviceSlot for `device`
  };

  void validate_options(const OptimizerOptions& options) const override;
  void on_group_added(size_t group) override;
  void on_lr_changed(size_t group) override;

  void check_grads() const;
  size_t slot_for(size_t group, Device device);
  void write_hyper(size_t group, int which, double value);
  // One sgd_update over parameters `idx` of `group` on slot `slot`'s device; `first_step`
  // reads a step of 0 (fresh momentum buffers) instead of the group's counter; `count_step`
  // (not with first_step) makes the update add 1 to the slot's counter after reading it.
  void run_update(size_t group, size_t slot, const std::vector<size_t>& idx, bool first_step,
                  bool count_step);

  std::vector<GroupState> state_;
  // Scratch reused by every step() so the step path does not allocate once warm.
  std::vector<Bucket> buckets_;
  std::vector<Tensor> grads_;
  std::vector<Tensor> inputs_;
};

}  // namespace ember::optim
