#pragma once
/// \file
/// Parameter initializers, like torch.nn.init.
/// Each fills `t` in place without recording gradients and returns it (a handle to the same
/// tensor); random ones draw from the Philox generator (`gen` or the default one), in float32
/// for 16-bit tensors (float64 for float64 ones), on the tensor's device. Tensors with no
/// elements are returned unchanged.
#include <cstdint>
#include <utility>

#include "core/generator.h"
#include "core/scalar.h"
#include "core/tensor.h"

namespace ember::nn::init {

/// Which fan the Kaiming initializers scale by (PyTorch's mode="fan_in" / "fan_out").
/// FanIn (in features x receptive field) preserves the forward pass's variance, FanOut
/// (out features x receptive field) the backward pass's.
enum class FanMode { FanIn, FanOut };
/// The nonlinearity a weight feeds, for calculate_gain (PyTorch's names).
/// Gains: Linear and Sigmoid 1, Tanh 5/3, ReLU sqrt(2), LeakyReLU sqrt(2 / (1 + slope^2)).
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU };

/// The recommended gain for a nonlinearity, like torch.nn.init.calculate_gain (`param` is
/// LeakyReLU's negative slope, ignored by the others).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);
/// (fan_in, fan_out) of a weight [out, in, receptive field...]: (in * rf, out * rf), rf the
/// product of the dims after the first two. \throws ember::Error for fewer than 2 dims.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

/// Fills `t` from U(low, high). \throws ember::Error if `t` is undefined or not floating, or
/// low > high.
Tensor uniform_(Tensor t, double low = 0, double high = 1, Generator* gen = nullptr);
/// Fills `t` from N(mean, std^2). \throws ember::Error if `t` is undefined or not floating, or
/// std < 0.
Tensor normal_(Tensor t, double mean = 0, double std = 1, Generator* gen = nullptr);
/// Fills `t` with `value` (any dtype). \throws ember::Error if `t` is undefined.
Tensor constant_(Tensor t, const Scalar& value);
/// Fills `t` with zeros.
Tensor zeros_(Tensor t);
/// Fills `t` with ones.
Tensor ones_(Tensor t);
/// Kaiming (He) uniform init: U(-b, b) with b = gain(nonlinearity, a) * sqrt(3 / fan).
/// `a` is the negative slope for LeakyReLU; fan is fan_in or fan_out by `mode`.
/// \throws ember::Error if `t` is not floating or has fewer than 2 dims.
Tensor kaiming_uniform_(Tensor t, double a = 0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                        Generator* gen = nullptr);
/// Kaiming (He) normal init: N(0, s^2) with s = gain(nonlinearity, a) / sqrt(fan).
/// \throws ember::Error if `t` is not floating or has fewer than 2 dims.
Tensor kaiming_normal_(Tensor t, double a = 0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU,
                       Generator* gen = nullptr);
/// Xavier (Glorot) uniform init: U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
/// \throws ember::Error if `t` is not floating or has fewer than 2 dims.
Tensor xavier_uniform_(Tensor t, double gain = 1, Generator* gen = nullptr);
/// Xavier (Glorot) normal init: N(0, s^2) with s = gain * sqrt(2 / (fan_in + fan_out)).
/// \throws ember::Error if `t` is not floating or has fewer than 2 dims.
Tensor xavier_normal_(Tensor t, double gain = 1, Generator* gen = nullptr);

}  // namespace ember::nn::init
