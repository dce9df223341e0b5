#include "nn/loss.h"

#include "nn/functional.h"

namespace ember::nn {

CrossEntropyLossImpl::CrossEntropyLossImpl(const CrossEntropyLossOptions& opts) : options(opts) {
  EMBER_CHECK(options.label_smoothing() >= 0 && options.label_smoothing() <= 1,
              "CrossEntropyLoss: label_smoothing must be in [0, 1], got ",
              options.label_smoothing());
}

Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return detail::cross_entropy(input, target, options, "CrossEntropyLoss");
}

void CrossEntropyLossImpl::pretty_print(std::ostream& os) const {
  os << "CrossEntropyLoss(ignore_index=" << options.ignore_index()
     << ", label_smoothing=" << options.label_smoothing()
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}

NLLLossImpl::NLLLossImpl(const NLLLossOptions& opts) : options(opts) {}

Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) {
  return detail::nll_loss(input, target, options, "NLLLoss");
}

void NLLLossImpl::pretty_print(std::ostream& os) const {
  os << "NLLLoss(ignore_index=" << options.ignore_index()
     << ", reduction=" << reduction_name(options.reduction()) << ")";
}

MSELossImpl::MSELossImpl(const MSELossOptions& opts) : options(opts) {}

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) {
  return detail::mse_loss(input, target, options, "MSELoss");
}

void MSELossImpl::pretty_print(std::ostream& os) const {
  os << "MSELoss(reduction=" << reduction_name(options.reduction()) << ")";
}

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& opts) : options(opts) {
  // The options keep the same handles as the buffers, so moving the module moves both.
  if (options.weight().defined()) register_buffer("weight", options.weight());
  if (options.pos_weight().defined()) register_buffer("pos_weight", options.pos_weight());
}

Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return detail::binary_cross_entropy_with_logits(input, target, options, "BCEWithLogitsLoss");
}

void BCEWithLogitsLossImpl::pretty_print(std::ostream& os) const {
  os << "BCEWithLogitsLoss(reduction=" << reduction_name(options.reduction()) << ")";
}

}  // namespace ember::nn
