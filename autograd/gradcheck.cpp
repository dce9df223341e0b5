#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/factory.h"

namespace ember::autograd {

std::string gradcheck_report(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                             const GradcheckOptions& opts) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    EMBER_CHECK(x.defined() && x.dtype() == kFloat64 && x.device().is_cpu() && x.is_contiguous(),
                "gradcheck: input ", k, " must be a contiguous float64 CPU tensor");
  }
  const Tensor y = fn(inputs);
  EMBER_CHECK(y.defined() && y.requires_grad(), "gradcheck: the output does not require grad");
  const int64_t m = y.numel();

  // Analytical Jacobian rows, one backward per output element.
  std::vector<std::vector<double>> analytic(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k].requires_grad())
      analytic[k].assign(static_cast<size_t>(m * inputs[k].numel()), 0);
  for (int64_t j = 0; j < m; ++j) {
    std::vector<double> onehot(static_cast<size_t>(m), 0.0);
    onehot[static_cast<size_t>(j)] = 1.0;
    const Tensor gy = from_vector(onehot, y.sizes()).to(y.dtype());
    for (const Tensor& x : inputs)
      if (x.requires_grad()) const_cast<Tensor&>(x).set_grad({});
    y.backward(gy, /*retain_graph=*/true);
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!inputs[k].requires_grad()) continue;
      const Tensor g = inputs[k].grad();
      if (!g.defined()) continue;  // no path: zero row
      const std::vector<double> gv = g.to_vector<double>();
      for (size_t i = 0; i < gv.size(); ++i) analytic[k][j * gv.size() + i] = gv[i];
    }
  }
  for (const Tensor& x : inputs)
    if (x.requires_grad()) const_cast<Tensor&>(x).set_grad({});

  // Numerical Jacobian columns by central differences, and the comparison.
  NoGradGuard no_grad;
  double worst = 0;
  std::ostringstream report;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].requires_grad()) continue;
    double* data = static_cast<double*>(inputs[k].raw_data());
    const int64_t n = inputs[k].numel();
    for (int64_t i = 0; i < n; ++i) {
      const double orig = data[i];
      data[i] = orig + opts.eps;
      const std::vector<double> fp = fn(inputs).to_vector<double>();
      data[i] = orig - opts.eps;
      const std::vector<double> fm = fn(inputs).to_vector<double>();
      data[i] = orig;
      for (int64_t j = 0; j < m; ++j) {
        const double num = (fp[j] - fm[j]) / (2 * opts.eps);
        const double ana = analytic[k][j * n + i];
        const double err = std::abs(ana - num);
        const double excess = err - (opts.atol + opts.rtol * std::abs(num));
        if (excess > 0 && excess > worst) {
          worst = excess;
          report.str("");
          report << "gradcheck: input " << k << " element " << i << ", output element " << j
                 << ": backward gives " << ana << ", finite differences give " << num;
        }
      }
    }
  }
  return report.str();
}

}  // namespace ember::autograd
