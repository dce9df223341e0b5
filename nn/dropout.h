#pragma once
// Dropout: in training, zeroes each element with probability p and scales the rest by
// 1/(1-p), with a mask from the Philox generator; in eval mode, the identity.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});
  explicit DropoutImpl(double p) : DropoutImpl(DropoutOptions(p)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  DropoutOptions options;
};
EMBER_MODULE(Dropout);

}  // namespace ember::nn
