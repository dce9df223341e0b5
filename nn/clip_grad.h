#pragma once
/// \file
/// Gradient clipping with PyTorch's semantics (torch.nn.utils.clip_grad_norm_ /
/// clip_grad_value_), computed and applied on the device.
/// Nothing is read on the host, so a jit::compile'd training step traces them like any other op
/// (no graph break, no sync) and the returned norm stays a device tensor until the caller reads
/// it.
#include <vector>

#include "core/tensor.h"

namespace ember::nn::utils {

/// Clips the gradients of `params` by their total norm and returns that norm, like
/// torch.nn.utils.clip_grad_norm_.
/// The norm of the gradients taken together (parameters without a gradient are skipped), as
/// a float32 0-dim tensor on their device (float64 when the gradients are); norm_type 2 (or
/// any p >= 1) or INFINITY. When it exceeds max_norm every gradient is scaled in place by
/// max_norm / (norm + 1e-6), else left as is (the scale is clamped at 1, PyTorch's formula).
/// With no gradients it returns 0 on the CPU. max_norm and norm_type are constants of a trace
/// (a new value means a new compiled step).
/// \code
/// loss.backward();
/// Tensor norm = nn::utils::clip_grad_norm_(model->parameters(), 1.0);
/// opt.step();
/// \endcode
/// \throws ember::Error if a parameter is undefined, a gradient is not floating, gradients
/// lie on different devices, float64 gradients are mixed with others, max_norm is NaN, or
/// norm_type is below 1.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       double norm_type = 2.0);

/// Clamps every gradient of `params` to [-clip_value, clip_value] in place, like
/// torch.nn.utils.clip_grad_value_; parameters without a gradient are skipped.
/// \throws ember::Error if clip_value is negative or not finite, a parameter is undefined, a
/// gradient is not floating, or gradients lie on different devices.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace ember::nn::utils
