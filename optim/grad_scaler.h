#pragma once
// GradScaler: loss scaling for float16 training (torch.amp.GradScaler's algorithm), with every
// decision made on the device. The scale, the growth tracker and found_inf are device scalars;
// unscale_ is one amp_unscale op per (optimizer, dtype) that also sets found_inf; step() runs
// the optimizer's updates so that they change nothing when found_inf is set; update() adjusts
// the scale with pointwise ops. Nothing reads a value back to the host, so a training step that
// uses the scaler compiles to one graph (PyTorch's reads found_inf on the host every step: a
// graph break under torch.compile).
//
//   optim::GradScaler scaler(Device::cuda(0));
//   {
//     AutocastGuard amp(DeviceType::CUDA, kFloat16);
//     loss = criterion(model->forward(x), y);
//   }
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                 // optional: before clipping the true gradients
//   nn::utils::clip_grad_norm_(params, 1.0);
//   scaler.step(opt);                     // skipped on the device if a gradient was inf/NaN
//   scaler.update();
//
// The update, per step (PyTorch's _amp_update_scale_): a step with found_inf multiplies the
// scale by backoff_factor and zeroes the tracker; otherwise the tracker counts, and on reaching
// growth_interval the scale is multiplied by growth_factor (if that stays finite) and the
// tracker zeroed.
#include <string>

#include "core/device.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace ember::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: every method passes through (scale(x) is x, step is step)
};

class GradScaler {
 public:
  explicit GradScaler(Device device, GradScalerOptions options = {});

  // loss * scale (a float32 product on the device).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of `opt` by the scale, in place, and sets found_inf if any is inf or
  // NaN. Once per optimizer between update()s (a second call is an ember::Error, as in PyTorch).
  void unscale_(Optimizer& opt);
  // unscale_(opt) if not done yet, then opt's step, skipped on the device when found_inf is set.
  void step(Optimizer& opt);
  // Adjusts the scale from this step's found_inf, then clears found_inf and the unscaled marks.
  void update();

  // The scale as a device scalar (no host read), and as a number (reads it back: a sync).
  const Tensor& scale_tensor() const { return scale_; }
  double get_scale() const;
  const Tensor& found_inf() const { return found_inf_; }
  const Tensor& growth_tracker() const { return growth_tracker_; }
  const GradScalerOptions& options() const { return options_; }
  bool is_enabled() const { return options_.enabled; }

  // "scale" and "growth_tracker" (float32 scalars) and the options as metadata;
  // load_state_dict checks everything before it changes anything.
  OptimizerState state_dict() const;
  void load_state_dict(const OptimizerState& state);

 private:
  Device device_;
  GradScalerOptions options_;
  Tensor scale_, growth_tracker_, found_inf_, one_;
  std::vector<const Optimizer*> unscaled_;  // optimizers unscaled since the last update()
};

void save(const GradScaler& scaler, const std::string& path);
void load(GradScaler& scaler, const std::string& path);

}  // namespace ember::optim
