#include "nn/init.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/ops.h"

namespace ember::nn::init {
namespace {

void check_float(const Tensor& t, const char* who) {
  EMBER_CHECK(t.defined(), who, ": undefined tensor");
  EMBER_CHECK(is_floating(t.dtype()), who, ": tensor must be floating, got ", dtype_name(t.dtype()),
              " ", t.sizes());
}

// Draws in float32 for 16-bit tensors (then rounds once on copy), in the tensor's dtype otherwise.
TensorOptions draw_options(const Tensor& t) {
  const DType d = t.dtype() == kFloat64 ? kFloat64 : kFloat32;
  return TensorOptions(d).device(t.device());
}

int64_t fan(const Tensor& t, FanMode mode) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return mode == FanMode::FanIn ? fan_in : fan_out;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid:
      return 1.0;
    case Nonlinearity::Tanh:
      return 5.0 / 3.0;
    case Nonlinearity::ReLU:
      return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU:
      return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  EMBER_CHECK(t.defined() && t.dim() >= 2,
              "init: fan in and fan out need a tensor of at least 2 dims, got ",
              t.defined() ? t.sizes().str() : std::string("an undefined tensor"));
  int64_t receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(Tensor t, double low, double high, Generator* gen) {
  check_float(t, "uniform_");
  EMBER_CHECK(low <= high, "uniform_: low ", low, " must not exceed high ", high);
  NoGradGuard no_grad;
  if (t.numel() == 0) return t;
  t.copy_(add(mul(rand(t.sizes(), draw_options(t), gen), high - low), low));
  return t;
}

Tensor normal_(Tensor t, double mean, double std, Generator* gen) {
  check_float(t, "normal_");
  EMBER_CHECK(std >= 0, "normal_: std must be non-negative, got ", std);
  NoGradGuard no_grad;
  if (t.numel() == 0) return t;
  t.copy_(add(mul(randn(t.sizes(), draw_options(t), gen), std), mean));
  return t;
}

Tensor constant_(Tensor t, const Scalar& value) {
  EMBER_CHECK(t.defined(), "constant_: undefined tensor");
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor zeros_(Tensor t) { return constant_(std::move(t), 0); }
Tensor ones_(Tensor t) { return constant_(std::move(t), 1); }

Tensor kaiming_uniform_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity,
                        Generator* gen) {
  check_float(t, "kaiming_uniform_");
  if (t.numel() == 0) return t;  // nothing to draw (and the fan may be 0)
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan(t, mode));
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, double a, FanMode mode, Nonlinearity nonlinearity,
                       Generator* gen) {
  check_float(t, "kaiming_normal_");
  if (t.numel() == 0) return t;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode)));
  return normal_(std::move(t), 0, std, gen);
}

Tensor xavier_uniform_(Tensor t, double gain, Generator* gen) {
  check_float(t, "xavier_uniform_");
  if (t.numel() == 0) return t;
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(std::move(t), -bound, bound, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* gen) {
  check_float(t, "xavier_normal_");
  if (t.numel() == 0) return t;
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
  return normal_(std::move(t), 0, std, gen);
}

}  // namespace ember::nn::init
