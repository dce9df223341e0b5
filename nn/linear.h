#pragma once
// Linear: y = x W^T + b, with PyTorch's default initialization.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features)
      : LinearImpl(LinearOptions(in_features, out_features)) {}
  explicit LinearImpl(const LinearOptions& options);

  // x [..., in_features] -> [..., out_features].
  Tensor forward(const Tensor& x);
  // Redraws weight ~ kaiming_uniform(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), and bias
  // ~ U(-1/sqrt(in), 1/sqrt(in)), from the default Philox generator (PyTorch's default init).
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  LinearOptions options;
  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features], undefined with bias(false)
};
EMBER_MODULE(Linear);

}  // namespace ember::nn
