#pragma once
// Loss modules. Each holds its options and calls the nn::functional form:
//   nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1));
//   Tensor loss = criterion(logits, target);
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

// Softmax cross entropy of logits [N, C] (or [C], [N, C, d1, ...]) against class indices.
class CrossEntropyLossImpl : public Module {
 public:
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  CrossEntropyLossOptions options;
};
EMBER_MODULE(CrossEntropyLoss);

// Negative log likelihood of log-probabilities [N, C] against class indices.
class NLLLossImpl : public Module {
 public:
  explicit NLLLossImpl(const NLLLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  NLLLossOptions options;
};
EMBER_MODULE(NLLLoss);

// Mean (or summed) squared error between tensors of one shape.
class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(const MSELossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  MSELossOptions options;
};
EMBER_MODULE(MSELoss);

// Sigmoid + binary cross entropy in one numerically stable expression. weight and pos_weight
// are registered as buffers, so to(device) moves them with the module.
class BCEWithLogitsLossImpl : public Module {
 public:
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  BCEWithLogitsLossOptions options;
};
EMBER_MODULE(BCEWithLogitsLoss);

}  // namespace ember::nn
