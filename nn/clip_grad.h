#pragma once
// Gradient clipping with PyTorch's semantics (torch.nn.utils.clip_grad_norm_ /
// clip_grad_value_), computed and applied on the device: nothing is read on the host, so a
// jit::compile'd training step traces them like any other op (no graph break, no sync) and the
// returned norm stays a device tensor until the caller reads it.
#include <vector>

#include "core/tensor.h"

namespace ember::nn::utils {

// The norm of the gradients of `params` taken together (parameters without a gradient are
// skipped), as a float32 0-dim tensor on their device; norm_type 2 (or any p >= 1) or
// INFINITY. When it exceeds max_norm every gradient is scaled in place by
// max_norm / (norm + 1e-6), else left as is (the scale is clamped at 1, PyTorch's formula).
// With no gradients it returns 0 on the CPU. Gradients must share one device and be floating.
// max_norm and norm_type are constants of a trace (a new value means a new compiled step).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       double norm_type = 2.0);

// Clamps every gradient of `params` to [-clip_value, clip_value] in place (clip_value >= 0).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace ember::nn::utils
