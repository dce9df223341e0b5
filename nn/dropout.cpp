#include "nn/dropout.h"

#include "nn/functional.h"

namespace ember::nn {

DropoutImpl::DropoutImpl(const DropoutOptions& opts) : options(opts) {
  EMBER_CHECK(options.p() >= 0 && options.p() <= 1,
              "Dropout: drop probability must be in [0, 1], got ", options.p());
}

Tensor DropoutImpl::forward(const Tensor& x) {
  return detail::dropout(x, options.p(), is_training(), nullptr, "Dropout");
}

void DropoutImpl::pretty_print(std::ostream& os) const { os << "Dropout(p=" << options.p() << ")"; }

}  // namespace ember::nn
