#pragma once
// Checks analytical gradients (backward) against central finite differences in float64.
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-5;  // |analytical - numerical| <= atol + rtol * |numerical|
  double rtol = 1e-3;
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// `inputs`: contiguous float64 CPU tensors; those with requires_grad are checked. `fn` may build
// views, broadcasts and casts of them. Returns an empty string when every Jacobian entry
// agrees, else a report naming the worst entry.
std::string gradcheck_report(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                             const GradcheckOptions& opts = {});
inline bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                      const GradcheckOptions& opts = {}) {
  return gradcheck_report(fn, inputs, opts).empty();
}

}  // namespace ember::autograd
