#pragma once
// Flatten: merges dims start_dim..end_dim (by default all but the batch dim) into one.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(const FlattenOptions& opts = {}) : options(opts) {}
  FlattenImpl(int64_t start_dim, int64_t end_dim = -1)
      : options(FlattenOptions().start_dim(start_dim).end_dim(end_dim)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  FlattenOptions options;
};
EMBER_MODULE(Flatten);

}  // namespace ember::nn
