#pragma once
/// \file
/// GradScaler: loss scaling for float16 training (torch.amp.GradScaler's algorithm), with every
/// decision made on the device.
///
/// The scale, the growth tracker and found_inf are device scalars; unscale_() is one
/// amp_unscale op per (optimizer, dtype) that also sets found_inf; step() runs the optimizer's
/// updates so that they change nothing when found_inf is set; update() adjusts the scale with
/// pointwise ops. Nothing reads a value back to the host, so a training step that uses the
/// scaler compiles to one graph (PyTorch's reads found_inf on the host every step: a graph
/// break under torch.compile).
/// \code
/// optim::GradScaler scaler(Device::cuda(0));
/// {
///   AutocastGuard amp(DeviceType::CUDA, kFloat16);
///   loss = criterion(model->forward(x), y);
/// }
/// scaler.scale(loss).backward();
/// scaler.unscale_(opt);                 // optional: before clipping the true gradients
/// nn::utils::clip_grad_norm_(params, 1.0);
/// scaler.step(opt);                     // skipped on the device if a gradient was inf/NaN
/// scaler.update();
/// \endcode
/// The update, per step (PyTorch's `_amp_update_scale_`): a step with found_inf multiplies the
/// scale by backoff_factor and zeroes the tracker; otherwise the tracker counts, and on
/// reaching growth_interval the scale is multiplied by growth_factor (if that stays finite)
/// and the tracker zeroed.
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace ember::optim {

/// Options of GradScaler, PyTorch's arguments and defaults (use designated initializers:
/// `{.init_scale = 1024, .growth_interval = 100}`).
struct GradScalerOptions {
  double init_scale = 65536.0;     ///< the scale to start from (positive, finite)
  double growth_factor = 2.0;      ///< the scale's factor after growth_interval clean steps (> 1)
  double backoff_factor = 0.5;     ///< the scale's factor after a step with inf/NaN, in (0, 1)
  int64_t growth_interval = 2000;  ///< clean steps in a row before the scale grows (> 0)
  bool enabled = true;  ///< false: every method passes through (scale(x) is x, step is step)
};

/// Loss scaling for float16 training with every decision on the device
/// (torch.amp.GradScaler); the protocol is in optim/grad_scaler.h.
///
/// Per step: scale() the loss, backward, optionally unscale_() the optimizer's gradients (to
/// clip them), step() the optimizer, update() the scale. One scaler serves the parameters of
/// one device.
class GradScaler {
 public:
  /// A scaler whose scalars live on `device` (the device of the loss and the gradients).
  /// \throws ember::Error if an option is out of range (see GradScalerOptions).
  explicit GradScaler(Device device, GradScalerOptions options = {});

  /// loss * scale, a float32 product on the device (a 16-bit loss is cast to float32 first).
  /// \throws ember::Error if the loss is not floating or lives on another device.
  Tensor scale(const Tensor& loss) const;
  /// Divides the gradients of `opt` by the scale, in place, and sets found_inf if any is inf or
  /// NaN. Once per optimizer between update()s.
  /// \throws ember::Error on a second call for `opt` before update() (as in PyTorch), or a
  ///         gradient on another device, non-floating or non-contiguous (nothing is changed).
  void unscale_(Optimizer& opt);
  /// unscale_(opt) if not done yet, then opt's step, skipped on the device when found_inf is
  /// set (Optimizer::step_unless_found_inf()): no host read.
  void step(Optimizer& opt);
  /// Adjusts the scale from this step's found_inf (backoff, or growth after growth_interval
  /// clean steps), then clears found_inf and the unscaled marks. Call once per step, after
  /// step().
  void update();

  /// The scale as a device scalar (no host read).
  const Tensor& scale_tensor() const { return scale_; }
  /// The scale as a number: reads it back, a synchronize (1.0 when disabled).
  double get_scale() const;
  /// The float32 device scalar that unscale_() sets nonzero when a gradient is inf or NaN.
  const Tensor& found_inf() const { return found_inf_; }
  /// The float32 device scalar counting clean steps since the scale last changed.
  const Tensor& growth_tracker() const { return growth_tracker_; }
  /// The options the scaler was built with.
  const GradScalerOptions& options() const { return options_; }
  /// Whether the scaler is enabled (GradScalerOptions::enabled).
  bool is_enabled() const { return options_.enabled; }

  /// The scaler's state: `scale` and `growth_tracker` (float32 scalars, on the host),
  /// metadata `scaler` = "GradScaler" and the growth and backoff options.
  OptimizerState state_dict() const;
  /// Restores `scale` and `growth_tracker` from a state_dict(); the options are the ones this
  /// scaler was built with (those in the metadata are not read). Checks everything first.
  /// \throws ember::Error if a tensor is missing or not a float32 scalar, the scale is not
  ///         positive and finite, or the tracker is not a count; the scaler is then unchanged.
  void load_state_dict(const OptimizerState& state);

 private:
  Device device_;
  GradScalerOptions options_;
  Tensor scale_, growth_tracker_, found_inf_, one_;
  std::vector<const Optimizer*> unscaled_;  // optimizers unscaled since the last update()
};

/// Writes GradScaler::state_dict() to a safetensors file at `path`.
void save(const GradScaler& scaler, const std::string& path);
/// Restores a GradScaler from a file written by save(const GradScaler&, const std::string&).
/// \throws ember::Error naming the file if it cannot be read or its state does not fit.
void load(GradScaler& scaler, const std::string& path);

}  // namespace ember::optim
