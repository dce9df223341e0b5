#pragma once
// Typed option structs for layers and losses, with chainable setters:
//   nn::CrossEntropyLossOptions().ignore_index(-100).label_smoothing(0.1)
// Each field reads back through the same name without an argument: opts.label_smoothing().
#include <cstdint>
#include <optional>
#include <string>

#include "core/shape.h"
#include "core/tensor.h"

// Declares a setter/getter pair and the field; write the default after it:
//   EMBER_ARG(double, eps) = 1e-5;
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

// How a loss folds its per-element values: None keeps them, Mean averages (over the elements a
// loss counts: cross entropy and NLL skip ignored targets), Sum adds them.
enum class Reduction { None, Mean, Sum };
const char* reduction_name(Reduction r);

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  EMBER_ARG(int64_t, in_features);
  EMBER_ARG(int64_t, out_features);
  EMBER_ARG(bool, bias) = true;
};

// RNN, LSTM and GRU (nn/rnn.h), as torch.nn's; nonlinearity is RNN's alone ("tanh" or "relu").
struct RNNOptions {
  RNNOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);
  EMBER_ARG(int64_t, hidden_size);
  EMBER_ARG(int64_t, num_layers) = 1;
  EMBER_ARG(bool, bias) = true;
  EMBER_ARG(bool, batch_first) = false;
  EMBER_ARG(double, dropout) = 0.0;  // between layers, in training
  EMBER_ARG(bool, bidirectional) = false;
  EMBER_ARG(std::string, nonlinearity) = "tanh";
};
using LSTMOptions = RNNOptions;
using GRUOptions = RNNOptions;

// RNNCell, LSTMCell and GRUCell (nn/rnn.h).
struct RNNCellOptions {
  RNNCellOptions(int64_t input_size, int64_t hidden_size)
      : input_size_(input_size), hidden_size_(hidden_size) {}
  EMBER_ARG(int64_t, input_size);
  EMBER_ARG(int64_t, hidden_size);
  EMBER_ARG(bool, bias) = true;
  EMBER_ARG(std::string, nonlinearity) = "tanh";
};
using LSTMCellOptions = RNNCellOptions;
using GRUCellOptions = RNNCellOptions;

struct GELUOptions {
  // "none" (exact, with erf) or "tanh" (the tanh approximation), like PyTorch.
  EMBER_ARG(std::string, approximate) = "none";
};

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout(0.2) reads well
  EMBER_ARG(double, p);
};

struct FlattenOptions {
  EMBER_ARG(int64_t, start_dim) = 1;
  EMBER_ARG(int64_t, end_dim) = -1;
};

struct LayerNormOptions {
  LayerNormOptions(Shape normalized_shape)  // NOLINT: LayerNorm(Shape{16}) reads well
      : normalized_shape_(normalized_shape) {}
  EMBER_ARG(Shape, normalized_shape);
  EMBER_ARG(double, eps) = 1e-5;
  EMBER_ARG(bool, elementwise_affine) = true;
};

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  EMBER_ARG(int64_t, num_embeddings);
  EMBER_ARG(int64_t, embedding_dim);
  // A row that is zero at init and never receives a gradient; negative counts from the end.
  EMBER_ARG(std::optional<int64_t>, padding_idx) = std::nullopt;
};

struct CrossEntropyLossOptions {
  EMBER_ARG(int64_t, ignore_index) = -100;
  EMBER_ARG(double, label_smoothing) = 0.0;
  EMBER_ARG(Reduction, reduction) = Reduction::Mean;
};

struct NLLLossOptions {
  EMBER_ARG(int64_t, ignore_index) = -100;
  EMBER_ARG(Reduction, reduction) = Reduction::Mean;
};

struct MSELossOptions {
  MSELossOptions(Reduction reduction = Reduction::Mean)  // NOLINT: MSELoss(Reduction::Sum)
      : reduction_(reduction) {}
  EMBER_ARG(Reduction, reduction);
};

struct BCEWithLogitsLossOptions {
  // Per-element weight, broadcast against the input (undefined: none).
  EMBER_ARG(Tensor, weight);
  // Weight of positive examples, broadcast against the input, typically one per class (last
  // dim); undefined: none.
  EMBER_ARG(Tensor, pos_weight);
  EMBER_ARG(Reduction, reduction) = Reduction::Mean;
};

// MultiheadAttention (nn/attention.h), as torch.nn's with kdim = vdim = embed_dim and no
// add_bias_kv / add_zero_attn.
struct MultiheadAttentionOptions {
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads) {}
  EMBER_ARG(int64_t, embed_dim);
  EMBER_ARG(int64_t, num_heads);
  EMBER_ARG(double, dropout) = 0.0;
  EMBER_ARG(bool, bias) = true;
  EMBER_ARG(bool, batch_first) = false;
};

// TransformerEncoderLayer (nn/transformer.h), as torch.nn's; activation "relu" or "gelu".
struct TransformerEncoderLayerOptions {
  TransformerEncoderLayerOptions(int64_t d_model, int64_t nhead)
      : d_model_(d_model), nhead_(nhead) {}
  EMBER_ARG(int64_t, d_model);
  EMBER_ARG(int64_t, nhead);
  EMBER_ARG(int64_t, dim_feedforward) = 2048;
  EMBER_ARG(double, dropout) = 0.1;
  EMBER_ARG(std::string, activation) = "relu";
  EMBER_ARG(double, layer_norm_eps) = 1e-5;
  EMBER_ARG(bool, batch_first) = false;
  EMBER_ARG(bool, norm_first) = false;
};

}  // namespace ember::nn
