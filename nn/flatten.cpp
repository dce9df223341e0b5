#include "nn/flatten.h"

namespace ember::nn {

Tensor FlattenImpl::forward(const Tensor& x) {
  EMBER_CHECK(x.defined(), "Flatten: undefined input");
  try {
    return x.flatten(options.start_dim(), options.end_dim());
  } catch (const Error& e) {
    EMBER_FAIL("Flatten: input of shape ", x.sizes(), ": ", e.what());
  }
}

void FlattenImpl::pretty_print(std::ostream& os) const {
  os << "Flatten(start_dim=" << options.start_dim() << ", end_dim=" << options.end_dim() << ")";
}

}  // namespace ember::nn
