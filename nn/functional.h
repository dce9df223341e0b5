#pragma once
// nn::functional: the stateless forms of the layers and losses (the modules call these).
//   namespace F = ember::nn::functional;
//   Tensor loss = F::cross_entropy(logits, y, nn::CrossEntropyLossOptions().label_smoothing(0.1));
// Everything is composed from public ops, so autograd and the JIT see ordinary op nodes.
#include <cstdint>
#include <optional>

#include "core/generator.h"
#include "core/tensor.h"
#include "nn/options.h"

namespace ember::nn::functional {

Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool approximate_tanh = false);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor relu6(const Tensor& x);  // hardtanh(x, 0, 6)
Tensor abs(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Zeroes each element with probability p and scales the kept ones by 1/(1-p) when training;
// the identity otherwise. The mask comes from the Philox generator (`gen` or the default one),
// so CPU and CUDA draw the same mask for the same seed.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

// x W^T + b, with x [..., in], weight [out, in], bias [out] (optional).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// Like torch.flatten (start_dim 0 by default; the Flatten layer starts at 1).
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// Normalizes over the trailing dims given by `normalized_shape`; weight and bias (optional)
// have that shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// Rows of `weight` [num, dim] picked by integer `indices` of any shape: [..., dim].
Tensor embedding(const Tensor& indices, const Tensor& weight);

// Losses. Class-index targets are int64 (int32 accepted); inputs are [N, C], [C] or
// [N, C, d1, ...] with targets [N], [] or [N, d1, ...].
Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     const CrossEntropyLossOptions& options = {});
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options = {});
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options = {});

}  // namespace ember::nn::functional

// The forms of the activations in core/ops.yaml (silu, leaky_relu, elu, softplus, ...).
#include "nn/generated/functional.h"

namespace ember::nn::detail {
// The same operations with the name errors should carry ("Linear", "CrossEntropyLoss", ...):
// modules report as themselves, the functions above as their own names.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* who);
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen, const char* who);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps, const char* who);
Tensor embedding(const Tensor& indices, const Tensor& weight, const char* who);
Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     const CrossEntropyLossOptions& options, const char* who);
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options,
                const char* who);
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options,
                const char* who);
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options, const char* who);
}  // namespace ember::nn::detail
