#pragma once
/// \file
/// Typed option structs for layers and losses, with chainable setters (like libtorch's).
/// \code
/// nn::CrossEntropyLossOptions().ignore_index(-100).label_smoothing(0.1)
/// \endcode
/// Each field is set with `.name(value)`, which returns the struct for chaining, and reads back
/// through the same name without an argument: `opts.label_smoothing()`. Values are checked when
/// a module (or functional form) uses them: a bad value is an ember::Error there.
#include <cstdint>
#include <optional>
#include <string>

#include "core/shape.h"
#include "core/tensor.h"

/// Declares an option field `name` of type `T`: the setter `name(v)` (chainable), the getter
/// `name()` and the private field `name_`. Write the default after it:
/// `EMBER_ARG(double, eps) = 1e-5;`
#define EMBER_ARG(T, name)                         \
 public:                                           \
  auto name(const T& new_value)->decltype(*this) { \
    name##_ = new_value;                           \
    return *this;                                  \
  }                                                \
  const T& name() const { return name##_; }        \
                                                   \
 private:                                          \
  T name##_

namespace ember::nn {

/// How a loss folds its per-element values, like PyTorch's `reduction` argument.
/// None keeps them (the target's shape), Mean averages (over the elements a loss counts: cross
/// entropy and NLL skip ignored targets), Sum adds them.
enum class Reduction { None, Mean, Sum };
/// The PyTorch spelling of `r`: "none", "mean" or "sum".
const char* reduction_name(Reduction r);

/// Options of nn::Linear, like torch.nn.Linear's arguments.
struct LinearOptions {
  /// A layer mapping `in_features` to `out_features`, with a bias.
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  /// Size of each input sample (the input's last dim); `.in_features(v)` / `.in_features()`.
  EMBER_ARG(int64_t, in_features);
  /// Size of each output sample; `.out_features(v)` / `.out_features()`.
  EMBER_ARG(int64_t, out_features);
  /// Whether the layer learns an additive bias (default true); `.bias(v)` / `.bias()`.
  EMBER_ARG(bool, bias) = true;
};

/// Options of RNN, LSTM and GRU (nn/rnn.h), as torch.nn's arguments.
struct RNNOptions {
  /// A single-layer, unidirectional recurrence from `input_size` features to `hidden_size`.
  RNNOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  /// Features of each input step (the input's last dim); `.input_size(v)` / `.input_size()`.
  EMBER_ARG(int64_t, input_size);
  /// Features of the hidden state; `.hidden_size(v)` / `.hidden_size()`.
  EMBER_ARG(int64_t, hidden_size);
  /// Stacked layers, each reading the previous one's output (default 1, at least 1);
  /// `.num_layers(v)` / `.num_layers()`.
  EMBER_ARG(int64_t, num_layers) = 1;
  /// Whether the layers have the biases bias_ih and bias_hh (default true); `.bias(v)` /
  /// `.bias()`.
  EMBER_ARG(bool, bias) = true;
  /// Whether inputs and outputs are [B, T, ...] instead of [T, B, ...] (default false; states
  /// keep the batch in dim 1); `.batch_first(v)` / `.batch_first()`.
  EMBER_ARG(bool, batch_first) = false;
  /// Dropout probability on every layer's output but the last, in training only (default 0,
  /// in [0, 1]); `.dropout(v)` / `.dropout()`.
  EMBER_ARG(double, dropout) = 0.0;  // between layers, in training
  /// Whether each layer also runs backward in time, doubling the output features (default
  /// false); `.bidirectional(v)` / `.bidirectional()`.
  EMBER_ARG(bool, bidirectional) = false;
  /// RNN's activation, "tanh" (default) or "relu"; ignored by LSTM and GRU;
  /// `.nonlinearity(v)` / `.nonlinearity()`.
  EMBER_ARG(std::string, nonlinearity) = "tanh";
};
/// Options of nn::LSTM: the same fields as RNNOptions (nonlinearity unused).
using LSTMOptions = RNNOptions;
/// Options of nn::GRU: the same fields as RNNOptions (nonlinearity unused).
using GRUOptions = RNNOptions;

/// Options of RNNCell, LSTMCell and GRUCell (nn/rnn.h), as torch.nn's arguments.
struct RNNCellOptions {
  /// A cell from `input_size` features to `hidden_size`.
  RNNCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  /// Features of the input; `.input_size(v)` / `.input_size()`.
  EMBER_ARG(int64_t, input_size);
  /// Features of the hidden state; `.hidden_size(v)` / `.hidden_size()`.
  EMBER_ARG(int64_t, hidden_size);
  /// Whether the cell has the biases bias_ih and bias_hh (default true); `.bias(v)` /
  /// `.bias()`.
  EMBER_ARG(bool, bias) = true;
  /// RNNCell's activation, "tanh" (default) or "relu"; ignored by LSTMCell and GRUCell;
  /// `.nonlinearity(v)` / `.nonlinearity()`.
  EMBER_ARG(std::string, nonlinearity) = "tanh";
};
/// Options of nn::LSTMCell: the same fields as RNNCellOptions (nonlinearity unused).
using LSTMCellOptions = RNNCellOptions;
/// Options of nn::GRUCell: the same fields as RNNCellOptions (nonlinearity unused).
using GRUCellOptions = RNNCellOptions;

/// Options of nn::GELU, like torch.nn.GELU's arguments.
struct GELUOptions {
  /// "none" (default: exact, with erf) or "tanh" (the tanh approximation), like PyTorch;
  /// `.approximate(v)` / `.approximate()`.
  EMBER_ARG(std::string, approximate) = "none";
};

/// Options of nn::Dropout, like torch.nn.Dropout's arguments.
struct DropoutOptions {
  /// Dropout with drop probability `p`: `Dropout(0.2)`.
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout(0.2) reads well
  /// Probability of zeroing an element, in [0, 1] (default 0.5); `.p(v)` / `.p()`.
  EMBER_ARG(double, p);
};

/// Options of nn::Flatten, like torch.nn.Flatten's arguments.
struct FlattenOptions {
  /// First dim to merge (default 1, keeping the batch dim; negative counts from the end);
  /// `.start_dim(v)` / `.start_dim()`.
  EMBER_ARG(int64_t, start_dim) = 1;
  /// Last dim to merge, inclusive (default -1, the last); `.end_dim(v)` / `.end_dim()`.
  EMBER_ARG(int64_t, end_dim) = -1;
};

/// Options of nn::LayerNorm, like torch.nn.LayerNorm's arguments.
struct LayerNormOptions {
  /// Normalization over the trailing dims `normalized_shape`: `LayerNorm(Shape{16})`.
  LayerNormOptions(Shape normalized_shape)  // NOLINT: LayerNorm(Shape{16}) reads well
      : normalized_shape_(normalized_shape) {}
  /// The trailing dims normalized over (at least one, all positive); also the shape of weight
  /// and bias; `.normalized_shape(v)` / `.normalized_shape()`.
  EMBER_ARG(Shape, normalized_shape);
  /// Added to the variance inside the square root (default 1e-5, non-negative);
  /// `.eps(v)` / `.eps()`.
  EMBER_ARG(double, eps) = 1e-5;
  /// Whether the layer learns a scale (weight) and shift (bias) (default true);
  /// `.elementwise_affine(v)` / `.elementwise_affine()`.
  EMBER_ARG(bool, elementwise_affine) = true;
};

/// Options of nn::Embedding, like torch.nn.Embedding's arguments.
struct EmbeddingOptions {
  /// A table of `num_embeddings` rows of `embedding_dim` values.
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  /// Rows in the table (valid indices are 0 .. num_embeddings - 1);
  /// `.num_embeddings(v)` / `.num_embeddings()`.
  EMBER_ARG(int64_t, num_embeddings);
  /// Values per row; `.embedding_dim(v)` / `.embedding_dim()`.
  EMBER_ARG(int64_t, embedding_dim);
  /// A row that is zero at init and never receives a gradient (default none); negative counts
  /// from the end; `.padding_idx(v)` / `.padding_idx()`.
  EMBER_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

/// Options of nn::CrossEntropyLoss and functional::cross_entropy, like PyTorch's arguments
/// (no class weights or probability targets).
struct CrossEntropyLossOptions {
  /// Targets equal to this contribute no loss and no gradient, and are not counted by Mean
  /// (default -100); `.ignore_index(v)` / `.ignore_index()`.
  EMBER_ARG(int64_t, ignore_index) = -100;
  /// Mixes the one-hot target with the uniform distribution: the target class gets
  /// 1 - s + s / C, every other s / C (default 0, in [0, 1]); `.label_smoothing(v)` /
  /// `.label_smoothing()`.
  EMBER_ARG(double, label_smoothing) = 0.0;
  /// How the per-sample losses are folded (default Mean); `.reduction(v)` / `.reduction()`.
  EMBER_ARG(Reduction, reduction) = Reduction::Mean;
};

/// Options of nn::NLLLoss and functional::nll_loss, like PyTorch's arguments (no class
/// weights).
struct NLLLossOptions {
  /// Targets equal to this contribute no loss and no gradient, and are not counted by Mean
  /// (default -100); `.ignore_index(v)` / `.ignore_index()`.
  EMBER_ARG(int64_t, ignore_index) = -100;
  /// How the per-sample losses are folded (default Mean); `.reduction(v)` / `.reduction()`.
  EMBER_ARG(Reduction, reduction) = Reduction::Mean;
};

/// Options of nn::MSELoss and functional::mse_loss.
struct MSELossOptions {
  /// MSE with the given reduction: `MSELoss(Reduction::Sum)`.
  MSELossOptions(Reduction reduction = Reduction::Mean)  // NOLINT: MSELoss(Reduction::Sum)
      : reduction_(reduction) {}
  /// How the squared errors are folded (default Mean); `.reduction(v)` / `.reduction()`.
  EMBER_ARG(Reduction, reduction);
};

/// Options of nn::BCEWithLogitsLoss and functional::binary_cross_entropy_with_logits, like
/// PyTorch's arguments.
struct BCEWithLogitsLossOptions {
  /// Per-element weight multiplying the loss, broadcast against the input (undefined, the
  /// default: none); on the input's device; `.weight(v)` / `.weight()`.
  EMBER_ARG(Tensor, weight);
  /// Weight of positive examples, broadcast against the input, typically one per class (last
  /// dim); undefined (the default): none; on the input's device; `.pos_weight(v)` /
  /// `.pos_weight()`.
  EMBER_ARG(Tensor, pos_weight);
  /// How the per-element losses are folded (default Mean); `.reduction(v)` / `.reduction()`.
  EMBER_ARG(Reduction, reduction) = Reduction::Mean;
};

/// Options of MultiheadAttention (nn/attention.h), as torch.nn's with kdim = vdim = embed_dim
/// and no add_bias_kv / add_zero_attn.
struct MultiheadAttentionOptions {
  /// Attention over `embed_dim` features split into `num_heads` heads.
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}
  /// Features of query, key and value (the inputs' last dim); `.embed_dim(v)` /
  /// `.embed_dim()`.
  EMBER_ARG(int64_t, embed_dim);
  /// Parallel heads, each of embed_dim / num_heads features (must divide embed_dim);
  /// `.num_heads(v)` / `.num_heads()`.
  EMBER_ARG(int64_t, num_heads);
  /// Dropout probability on the attention weights, in training only (default 0, in [0, 1));
  /// `.dropout(v)` / `.dropout()`.
  EMBER_ARG(double, dropout) = 0.0;
  /// Whether the input and output projections have biases (default true); `.bias(v)` /
  /// `.bias()`.
  EMBER_ARG(bool, bias) = true;
  /// Whether inputs and outputs are [N, L, E] instead of [L, N, E] (default false);
  /// `.batch_first(v)` / `.batch_first()`.
  EMBER_ARG(bool, batch_first) = false;
};

/// Options of TransformerEncoderLayer (nn/transformer.h), as torch.nn's arguments.
struct TransformerEncoderLayerOptions {
  /// A layer of `d_model` features with `nhead` attention heads.
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead)
      : d_model_(d_model), nhead_(nhead) {}
  /// Features of the input and output; `.d_model(v)` / `.d_model()`.
  EMBER_ARG(int64_t, d_model);
  /// Attention heads (must divide d_model); `.nhead(v)` / `.nhead()`.
  EMBER_ARG(int64_t, nhead);
  /// Hidden features of the feed-forward block (default 2048); `.dim_feedforward(v)` /
  /// `.dim_feedforward()`.
  EMBER_ARG(int64_t, dim_feedforward) = 2048;
  /// Dropout probability in attention and the feed-forward block, in training only (default
  /// 0.1, in [0, 1)); `.dropout(v)` / `.dropout()`.
  EMBER_ARG(double, dropout) = 0.1;
  /// The feed-forward activation, "relu" (default) or "gelu"; `.activation(v)` /
  /// `.activation()`.
  EMBER_ARG(std::string, activation) = "relu";
  /// eps of both LayerNorms (default 1e-5); `.layer_norm_eps(v)` / `.layer_norm_eps()`.
  EMBER_ARG(double, layer_norm_eps) = 1e-5;
  /// Whether inputs and outputs are [N, S, E] instead of [S, N, E] (default false);
  /// `.batch_first(v)` / `.batch_first()`.
  EMBER_ARG(bool, batch_first) = false;
  /// Whether LayerNorm comes before attention and feed-forward (pre-norm) instead of after the
  /// residual additions (default false); `.norm_first(v)` / `.norm_first()`.
  EMBER_ARG(bool, norm_first) = false;
};

}  // namespace ember::nn
