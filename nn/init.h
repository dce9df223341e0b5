#pragma once
// Parameter initializers (torch.nn.init). Each fills `t` in place without recording gradients
// and returns it; random ones draw from the Philox generator (`gen` or the default one).
#include <cstdint>
#include <utility>

#include "core/generator.h"
#include "core/scalar.h"
#include "core/tensor.h"

namespace ember::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU };

// The recommended gain for a nonlinearity (`param` is LeakyReLU's negative slope).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
// (fan_in, fan_out) of a weight of at least 2 dims: [out, in, receptive field...].
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

Tensor uniform_(Tensor t, double low = 0, double high = 1, Generator* gen = nullptr);
Tensor normal_(Tensor t, double mean = 0, double std = 1, Generator* gen = nullptr);
Tensor constant_(Tensor t, const Scalar& value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);
// U(-b, b) with b = gain(nonlinearity, a) * sqrt(3 / fan).
Tensor kaiming_uniform_(Tensor t, double a = 0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                        Generator* gen = nullptr);
// N(0, s^2) with s = gain(nonlinearity, a) / sqrt(fan).
Tensor kaiming_normal_(Tensor t, double a = 0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                       Generator* gen = nullptr);
// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1, Generator* gen = nullptr);
// N(0, s^2) with s = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1, Generator* gen = nullptr);

}  // namespace ember::nn::init
