#pragma once
/// \file
/// nn::functional: the stateless forms of the layers and losses (like torch.nn.functional).
/// The modules call these.
/// \code
/// namespace F = ember::nn::functional;
/// Tensor loss = F::cross_entropy(logits, y, nn::CrossEntropyLossOptions().label_smoothing(0.1));
/// \endcode
/// Everything is composed from public ops, so autograd and the JIT see ordinary op nodes.
/// Tensors passed together must share a device; a bad shape, dtype or device is an
/// ember::Error naming the function.
#include <cstdint>
#include <optional>

#include "core/generator.h"
#include "core/tensor.h"
#include "nn/options.h"

namespace ember::nn::functional {

/// max(x, 0) elementwise (F.relu).
Tensor relu(const Tensor& x);
/// GELU elementwise (F.gelu): exact x * Phi(x) with erf, or with `approximate_tanh`
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (PyTorch's approximate="tanh").
Tensor gelu(const Tensor& x, bool approximate_tanh = false);
/// 1 / (1 + exp(-x)) elementwise.
Tensor sigmoid(const Tensor& x);
/// tanh(x) elementwise.
Tensor tanh(const Tensor& x);
/// min(max(x, 0), 6) elementwise (hardtanh(x, 0, 6), F.relu6).
Tensor relu6(const Tensor& x);
/// |x| elementwise.
Tensor abs(const Tensor& x);
/// 1 / sqrt(x) elementwise.
Tensor rsqrt(const Tensor& x);
/// x limited to [min, max] elementwise; an absent bound does not limit (torch.clamp).
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
/// The elementwise minimum of `a` and `b`, broadcast together (torch.minimum).
Tensor minimum(const Tensor& a, const Tensor& b);
/// The elementwise maximum of `a` and `b`, broadcast together (torch.maximum).
Tensor maximum(const Tensor& a, const Tensor& b);
/// exp(x) / sum(exp(x)) along `dim` (negative counts from the end), like F.softmax.
Tensor softmax(const Tensor& x, int64_t dim);
/// log(softmax(x, dim)), computed stably, like F.log_softmax.
Tensor log_softmax(const Tensor& x, int64_t dim);

/// Dropout (F.dropout): with `training`, zeroes each element with probability p and scales the
/// kept ones by 1/(1-p); otherwise (or with p = 0) returns `x` itself.
/// The mask is drawn in float32 from the Philox generator (`gen` or the default one), so CPU
/// and CUDA, and every dtype, draw the same mask for the same seed.
/// \throws ember::Error if p is outside [0, 1], or (when it applies) `x` is not floating.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

/// x W^T + b (F.linear), with x [*, in] (at least 1-D), weight [out, in] and bias [out]
/// (optional) -> [*, out]. Under autocast all three are cast to the low dtype.
/// \throws ember::Error on a shape mismatch, or when the dtypes or devices differ.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
/// Merges dims start_dim..end_dim (inclusive) into one, like torch.flatten (start_dim 0 by
/// default; the Flatten layer starts at 1).
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
/// Layer normalization (F.layer_norm): (x - mean) / sqrt(var + eps) * weight + bias over the
/// trailing dims given by `normalized_shape`, with the biased variance.
/// weight and bias (optional) have shape normalized_shape. Under autocast it computes in float32.
/// \throws ember::Error if `x` is not floating or does not end in normalized_shape, weight or
/// bias has another shape, or eps is negative.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
/// Rows of `weight` [num, dim] picked by integer (int64/int32) `indices` of any shape:
/// [*indices.shape, dim] (F.embedding, without padding_idx or max_norm).
/// \throws ember::Error for non-integer or out-of-range indices.
Tensor embedding(const Tensor& indices, const Tensor& weight);

/// Softmax cross entropy of logits against class indices (F.cross_entropy).
/// `input` (floating logits) is [N, C], [C] or [N, C, d1, ...] with `target` [N], [] or
/// [N, d1, ...] of class indices (int64; other integer types accepted). Targets equal to
/// options.ignore_index() count for nothing; the Mean reduction averages over the others
/// (NaN when all are ignored, as in PyTorch). Class weights and probability targets are not
/// supported. \throws ember::Error on a shape, dtype or device mismatch, or a target outside
/// [0, C) that is not ignored.
Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     const CrossEntropyLossOptions& options = {});
/// Negative log likelihood (F.nll_loss): -input[n, target[n]], for log-probabilities (such
/// as log_softmax output) with the shapes and rules of cross_entropy.
/// \throws ember::Error on a shape, dtype or device mismatch, or an out-of-range target.
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});
/// Squared error (input - target)^2, reduced (F.mse_loss). `input` (floating) and `target`
/// must have the same shape (no broadcasting) and device.
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options = {});
/// Sigmoid plus binary cross entropy in one numerically stable expression
/// (F.binary_cross_entropy_with_logits): per element
/// -w [pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], with the options' weight w and
/// pos_weight pw (both optional, broadcast against the input).
/// `input` (logits) and `target` (probabilities in [0, 1]) are floating of one shape and device.
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
