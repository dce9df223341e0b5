#include "nn/activation.h"

#include "nn/functional.h"

namespace ember::nn {

Tensor ReLUImpl::forward(const Tensor& x) { return functional::relu(x); }
Tensor ReLU6Impl::forward(const Tensor& x) { return functional::relu6(x); }

GELUImpl::GELUImpl(const GELUOptions& opts) : options(opts) {
  EMBER_CHECK(options.approximate() == "none" || options.approximate() == "tanh",
              "GELU: approximate must be \"none\" or \"tanh\", got \"", options.approximate(),
              "\"");
  approximate_tanh_ = options.approximate() == "tanh";
}

Tensor GELUImpl::forward(const Tensor& x) { return functional::gelu(x, approximate_tanh_); }

void GELUImpl::pretty_print(std::ostream& os) const {
  os << "GELU(approximate='" << options.approximate() << "')";
}

Tensor SigmoidImpl::forward(const Tensor& x) { return functional::sigmoid(x); }
Tensor TanhImpl::forward(const Tensor& x) { return functional::tanh(x); }

}  // namespace ember::nn
