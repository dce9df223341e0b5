#pragma once
/// \file
/// Recurrent layers as torch.nn's: RNN (tanh or relu), LSTM and GRU over sequences, and the
/// cells RNNCell, LSTMCell and GRUCell for one step.
///
/// PyTorch's gate order (LSTM: input, forget, cell, output; GRU: reset, update, new), parameter
/// names (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, "_reverse" for the backward
/// direction) and init (every one ~ U(-k, k) with k = 1/sqrt(hidden_size)), so weights move to
/// and from PyTorch through safetensors.
///
/// \code
/// nn::LSTM lstm(nn::LSTMOptions(64, 256).num_layers(2));
/// auto [out, state] = lstm->forward(x);  // x [T, B, 64] -> out [T, B, 256]
/// auto [h_n, c_n] = state;               // [2, B, 256] each
/// \endcode
///
/// Built from public ops, so autograd and the JIT need nothing of their own. A layer's input
/// projection is one product over every time step (as cuDNN does); the recurrent product and the
/// gate arithmetic run per step. Inputs are [T, B, input_size] ([B, T, ...] with batch_first) or
/// unbatched [T, input_size]; states are [num_layers * directions, B, hidden_size] (unbatched:
/// without B; never batch-first, as in PyTorch), zeros when not given, and must have the
/// input's dtype and device. Parameters are created as float32 on the CPU.
#include <optional>
#include <ostream>
#include <tuple>
#include <vector>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// Which recurrence an RNNBaseImpl or RNNCellBaseImpl runs.
enum class RNNMode {
  RnnTanh,  ///< Elman RNN: h' = tanh(W_ih x + b_ih + W_hh h + b_hh)
  RnnRelu,  ///< Elman RNN with relu instead of tanh
  Lstm,     ///< LSTM: 4 gates (input, forget, cell, output) and a cell state
  Gru       ///< GRU: 3 gates (reset, update, new)
};

/// What RNN, LSTM and GRU share: the parameters of every layer and direction, and the loop.
///
/// Each layer and direction has weight_ih [G * hidden, in], weight_hh [G * hidden, hidden],
/// bias_ih and bias_hh [G * hidden] (G: 1 for RNN, 4 for LSTM, 3 for GRU; `in` is input_size
/// for layer 0, directions * hidden_size after). With dropout > 0, the output of every layer
/// but the last goes through dropout in training mode (none in eval mode), as in PyTorch.
/// \throws ember::Error from the constructor on non-positive sizes, num_layers < 1, dropout
///   outside [0, 1] or an unknown nonlinearity; from forward on an input that is not 2-D or 3-D
///   with input_size features, or states of the wrong shape, dtype or device.
class RNNBaseImpl : public Module {
 public:
  /// Registers and initializes the parameters of every layer and direction.
  /// \param mode the recurrence.
  /// \param options sizes, layers, bias, batch_first, dropout, bidirectional.
  /// \param name the layer's name in messages and printing ("LSTM").
  RNNBaseImpl(RNNMode mode, const RNNOptions& options, const char* name);
  /// Re-draws every parameter from U(-k, k), k = 1/sqrt(hidden_size).
  void reset_parameters();
  /// Prints e.g. `LSTM(64, 256, num_layers=2)`.
  void pretty_print(std::ostream& os) const override;

  RNNOptions options;  ///< the options the layer was built with

 protected:
  /// The output [T, B, directions * hidden] (batch_first: [B, T, ...]) and the final h and c
  /// (c: LSTM only), for a validated input and states.
  struct Result {
    /// The last layer's h at every step, both directions concatenated on the last dim.
    Tensor output, h_n, c_n;
    /// \var h_n
    /// The final h of every layer and direction, [num_layers * directions, B, hidden].
    /// \var c_n
    /// The final c (LSTM), like h_n; undefined for RNN and GRU.
  };
  /// Checks the input and states and runs every layer and direction over the sequence;
  /// undefined states mean zeros.
  Result run(const Tensor& x, const Tensor& h0, const Tensor& c0);

  /// The parameters of one layer and direction.
  struct LayerWeights {
    /// weight_ih, weight_hh, bias_ih and bias_hh; b_* undefined with bias(false).
    Tensor w_ih, w_hh, b_ih, b_hh;
    /// \var w_hh
    /// weight_hh [G * hidden, hidden].
    /// \var b_ih
    /// bias_ih [G * hidden]; undefined with bias(false).
    /// \var b_hh
    /// bias_hh [G * hidden]; undefined with bias(false).
  };
  RNNMode mode_;                       ///< the recurrence
  const char* name_;                   ///< the layer's name in messages
  std::vector<LayerWeights> weights_;  ///< [layer * directions + direction]
};

/// A multi-layer Elman RNN with tanh or relu (options.nonlinearity()), like `torch.nn.RNN`.
class RNNImpl : public RNNBaseImpl {
 public:
  /// A single-layer tanh RNN.
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  /// An RNN with the given options.
  explicit RNNImpl(const RNNOptions& options);
  /// Runs the sequence.
  /// \param x [T, B, input_size] ([B, T, input_size] with batch_first) or [T, input_size].
  /// \param h0 initial state [num_layers * directions, B, hidden_size]; undefined: zeros.
  /// \return (output, h_n): output [T, B, directions * hidden_size] (batch_first:
  ///   [B, T, ...]), h_n shaped like h0.
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0 = {});
};
/// The module holder of RNNImpl, like `torch::nn::RNN`.
EMBER_MODULE(RNN);

/// A multi-layer LSTM, like `torch.nn.LSTM` (without proj_size).
class LSTMImpl : public RNNBaseImpl {
 public:
  /// A single-layer LSTM.
  LSTMImpl(int64_t input_size, int64_t hidden_size)
      : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  /// An LSTM with the given options.
  explicit LSTMImpl(const LSTMOptions& options);
  /// Runs the sequence.
  /// \param x [T, B, input_size] ([B, T, input_size] with batch_first) or [T, input_size].
  /// \param hx (h0, c0), each [num_layers * directions, B, hidden_size]; nullopt (or an
  ///   undefined tensor): zeros.
  /// \return (output, (h_n, c_n)): output [T, B, directions * hidden_size] (batch_first:
  ///   [B, T, ...]), h_n and c_n shaped like h0.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& x, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
};
/// The module holder of LSTMImpl, like `torch::nn::LSTM`.
EMBER_MODULE(LSTM);

/// A multi-layer GRU, like `torch.nn.GRU`.
class GRUImpl : public RNNBaseImpl {
 public:
  /// A single-layer GRU.
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  /// A GRU with the given options.
  explicit GRUImpl(const GRUOptions& options);
  /// Runs the sequence.
  /// \param x [T, B, input_size] ([B, T, input_size] with batch_first) or [T, input_size].
  /// \param h0 initial state [num_layers * directions, B, hidden_size]; undefined: zeros.
  /// \return (output, h_n): output [T, B, directions * hidden_size] (batch_first:
  ///   [B, T, ...]), h_n shaped like h0.
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0 = {});
};
/// The module holder of GRUImpl, like `torch::nn::GRU`.
EMBER_MODULE(GRU);

/// What RNNCell, LSTMCell and GRUCell share: one step of the recurrence.
///
/// Inputs [B, input_size] or unbatched [input_size]; states likewise ([B, hidden_size] or
/// [hidden_size]) with the input's dtype and device, zeros when not given. Parameters
/// weight_ih [G * hidden, input], weight_hh [G * hidden, hidden], bias_ih, bias_hh
/// [G * hidden] (G: 1, 4 or 3), initialized ~ U(-k, k) with k = 1/sqrt(hidden_size).
/// \throws ember::Error on non-positive sizes or an unknown nonlinearity (constructor), or a
///   badly shaped input or state (forward).
class RNNCellBaseImpl : public Module {
 public:
  /// Registers and initializes the parameters.
  /// \param mode the recurrence.
  /// \param options sizes, bias and (RNNCell) nonlinearity.
  /// \param name the cell's name in messages and printing ("LSTMCell").
  RNNCellBaseImpl(RNNMode mode, const RNNCellOptions& options, const char* name);
  /// Re-draws every parameter from U(-k, k), k = 1/sqrt(hidden_size).
  void reset_parameters();
  /// Prints e.g. `LSTMCell(64, 256)`.
  void pretty_print(std::ostream& os) const override;

  RNNCellOptions options;  ///< the options the cell was built with
  /// [G * hidden_size, input_size].
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
  /// \var weight_hh
  /// [G * hidden_size, hidden_size].
  /// \var bias_ih
  /// [G * hidden_size]; undefined with bias(false).
  /// \var bias_hh
  /// [G * hidden_size]; undefined with bias(false).

 protected:
  /// One step from x and the state (h, and c for the LSTM; zeros when undefined), checked:
  /// (h', c'), c' undefined but for the LSTM; unbatched in, unbatched out.
  std::tuple<Tensor, Tensor> advance(const Tensor& x, const Tensor& h, const Tensor& c) const;
  RNNMode mode_;      ///< the recurrence
  const char* name_;  ///< the cell's name in messages
};

/// One step of an Elman RNN with tanh or relu, like `torch.nn.RNNCell`.
class RNNCellImpl : public RNNCellBaseImpl {
 public:
  /// A tanh cell.
  RNNCellImpl(int64_t input_size, int64_t hidden_size)
      : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  /// A cell with the given options.
  explicit RNNCellImpl(const RNNCellOptions& options);
  /// The next hidden state, [B, hidden_size] (or [hidden_size]), from x and h (undefined:
  /// zeros).
  Tensor forward(const Tensor& x, const Tensor& h = {});
};
/// The module holder of RNNCellImpl, like `torch::nn::RNNCell`.
EMBER_MODULE(RNNCell);

/// One step of an LSTM, like `torch.nn.LSTMCell`.
class LSTMCellImpl : public RNNCellBaseImpl {
 public:
  /// A cell with bias.
  LSTMCellImpl(int64_t input_size, int64_t hidden_size)
      : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  /// A cell with the given options.
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  /// The next state (h', c'), each [B, hidden_size] (or [hidden_size]), from x and
  /// hx = (h, c) (nullopt or undefined: zeros).
  std::tuple<Tensor, Tensor> forward(
      const Tensor& x, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
};
/// The module holder of LSTMCellImpl, like `torch::nn::LSTMCell`.
EMBER_MODULE(LSTMCell);

/// One step of a GRU, like `torch.nn.GRUCell`.
class GRUCellImpl : public RNNCellBaseImpl {
 public:
  /// A cell with bias.
  GRUCellImpl(int64_t input_size, int64_t hidden_size)
      : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  /// A cell with the given options.
  explicit GRUCellImpl(const GRUCellOptions& options);
  /// The next hidden state, [B, hidden_size] (or [hidden_size]), from x and h (undefined:
  /// zeros).
  Tensor forward(const Tensor& x, const Tensor& h = {});
};
/// The module holder of GRUCellImpl, like `torch::nn::GRUCell`.
EMBER_MODULE(GRUCell);

}  // namespace ember::nn
