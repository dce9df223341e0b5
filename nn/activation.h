#pragma once
/// \file
/// Elementwise activation layers: ReLU, ReLU6, GELU, Sigmoid and Tanh here; SiLU, LeakyReLU,
/// ELU, Softplus, Hardtanh, Hardswish, Mish and LogSigmoid generated from core/ops.yaml
/// (nn/generated/activation.h, included at the end).
/// Each maps a tensor of any shape to one of the same shape, dtype and device, has no
/// parameters, and behaves the same in training and eval.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// max(x, 0) elementwise, like torch.nn.ReLU.
class ReLUImpl : public Module {
 public:
  /// max(x, 0), any shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "ReLU()"; }
};
/// The module holder of ReLUImpl: `nn::ReLU()`.
EMBER_MODULE(ReLU);

/// min(max(x, 0), 6) elementwise, like torch.nn.ReLU6.
class ReLU6Impl : public Module {
 public:
  /// min(max(x, 0), 6), any shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "ReLU6()"; }
};
/// The module holder of ReLU6Impl: `nn::ReLU6()`.
EMBER_MODULE(ReLU6);

/// The Gaussian error linear unit x * Phi(x) elementwise, like torch.nn.GELU.
/// Exact (with erf) by default; with `approximate("tanh")`
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
class GELUImpl : public Module {
 public:
  /// \throws ember::Error if `options.approximate()` is neither "none" nor "tanh".
  explicit GELUImpl(const GELUOptions& options = {});
  /// GELU of `x`, any shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  /// The options the layer was built with.
  GELUOptions options;

 private:
  bool approximate_tanh_ = false;
};
/// The module holder of GELUImpl: `nn::GELU()`, `nn::GELU(nn::GELUOptions().approximate("tanh"))`.
EMBER_MODULE(GELU);

/// 1 / (1 + exp(-x)) elementwise, like torch.nn.Sigmoid.
class SigmoidImpl : public Module {
 public:
  /// sigmoid(x), any shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "Sigmoid()"; }
};
/// The module holder of SigmoidImpl: `nn::Sigmoid()`.
EMBER_MODULE(Sigmoid);

/// tanh(x) elementwise, like torch.nn.Tanh.
class TanhImpl : public Module {
 public:
  /// tanh(x), any shape.
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "Tanh()"; }
};
/// The module holder of TanhImpl: `nn::Tanh()`.
EMBER_MODULE(Tanh);

}  // namespace ember::nn

#include "nn/generated/activation.h"
