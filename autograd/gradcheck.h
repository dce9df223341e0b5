#pragma once
/// \file
/// Checks analytical gradients (backward) against central finite differences in float64, like
/// `torch.autograd.gradcheck`.
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

/// Step and tolerances of gradcheck (the defaults are PyTorch's).
///
/// An entry passes when `|analytical - numerical| <= atol + rtol * |numerical|`.
struct GradcheckOptions {
  double eps = 1e-6;   ///< finite-difference step: `(f(x + eps) - f(x - eps)) / (2 * eps)`
  double atol = 1e-5;  ///< absolute tolerance
  double rtol = 1e-3;  ///< relative tolerance, scaled by `|numerical|`
};

/// The function checked: maps the inputs to one output tensor (of any shape).
using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// Compares the Jacobian from backward with central finite differences, entry by entry.
///
/// The analytical Jacobian takes one `backward` (with `retain_graph`) per output element; the
/// numerical one perturbs each input element in place by `+eps` and `-eps` and reruns `fn` under
/// NoGradGuard. The `.grad()` of the checked inputs is cleared (left undefined) afterwards.
/// \param fn the function; it may build views, broadcasts and casts of its inputs.
/// \param inputs contiguous float64 CPU tensors; those with requires_grad are checked.
/// \param opts step and tolerances.
/// \return an empty string when every Jacobian entry agrees, else a report naming the entry
///   that exceeds its tolerance the most (input, element, output element, both values).
/// \throws ember::Error when an input is not a contiguous float64 CPU tensor or the output of
///   `fn` does not require grad.
std::string gradcheck_report(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                             const GradcheckOptions& opts = {});
/// Whether gradcheck_report finds no mismatch: true when every Jacobian entry agrees.
/// \code
/// Tensor x = randn({3, 4}, kFloat64).requires_grad_();
/// bool ok = autograd::gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {x});
/// \endcode
inline bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                      const GradcheckOptions& opts = {}) {
  return gradcheck_report(fn, inputs, opts).empty();
}

}  // namespace ember::autograd
