#pragma once
// Elementwise activation layers: ReLU, ReLU6, GELU, Sigmoid, Tanh here; SiLU, LeakyReLU, ELU,
// Softplus, Hardtanh, Hardswish, Mish and LogSigmoid generated from core/ops.yaml.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

class ReLUImpl : public Module {
 public:
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "ReLU()"; }
};
EMBER_MODULE(ReLU);

class ReLU6Impl : public Module {
 public:
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "ReLU6()"; }
};
EMBER_MODULE(ReLU6);

class GELUImpl : public Module {
 public:
  explicit GELUImpl(const GELUOptions& options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  GELUOptions options;

 private:
  bool approximate_tanh_ = false;
};
EMBER_MODULE(GELU);

class SigmoidImpl : public Module {
 public:
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "Sigmoid()"; }
};
EMBER_MODULE(Sigmoid);

class TanhImpl : public Module {
 public:
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override { os << "Tanh()"; }
};
EMBER_MODULE(Tanh);

}  // namespace ember::nn

#include "nn/generated/activation.h"
