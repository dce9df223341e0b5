#pragma once
// Recurrent layers as torch.nn's: RNN (tanh or relu), LSTM and GRU over sequences, and the cells
// RNNCell, LSTMCell and GRUCell for one step. PyTorch's gate order (LSTM: input, forget, cell,
// output; GRU: reset, update, new), parameter names (weight_ih_l0, weight_hh_l0, bias_ih_l0,
// bias_hh_l0, "_reverse" for the backward direction) and init (every one ~ U(-k, k) with
// k = 1/sqrt(hidden_size)), so weights move to and from PyTorch through safetensors.
//
//   nn::LSTM lstm(nn::LSTMOptions(64, 256).num_layers(2));
//   auto [out, state] = lstm->forward(x);  // x [T, B, 64] -> out [T, B, 256]
//   auto [h_n, c_n] = state;               // [2, B, 256] each
//
// Built from public ops, so autograd and the JIT need nothing of their own. A layer's input
// projection is one product over every time step (as cuDNN does); the recurrent product and the
// gate arithmetic run per step. Inputs are [T, B, input_size] ([B, T, ...] with batch_first) or
// unbatched [T, input_size]; states are [num_layers * directions, B, hidden_size] (unbatched:
// without B), zeros when not given.
#include <optional>
#include <ostream>
#include <tuple>
#include <vector>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

enum class RNNMode { RnnTanh, RnnRelu, Lstm, Gru };

// What RNN, LSTM and GRU share: the parameters of every layer and direction, and the loop.
class RNNBaseImpl : public Module {
 public:
  RNNBaseImpl(RNNMode mode, const RNNOptions& options, const char* name);
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  RNNOptions options;

 protected:
  // The output [T, B, directions * hidden] (batch_first: [B, T, ...]) and the final h and c
  // (c: LSTM only), for a validated input and states.
  struct Result {
    Tensor output, h_n, c_n;
  };
  Result run(const Tensor& x, const Tensor& h0, const Tensor& c0);

  struct LayerWeights {
    Tensor w_ih, w_hh, b_ih, b_hh;  // b_* undefined with bias(false)
  };
  RNNMode mode_;
  const char* name_;
  std::vector<LayerWeights> weights_;  // [layer * directions + direction]
};

class RNNImpl : public RNNBaseImpl {
 public:
  RNNImpl(int64_t input_size, int64_t hidden_size) : RNNImpl(RNNOptions(input_size, hidden_size)) {}
  explicit RNNImpl(const RNNOptions& options);
  // (output, h_n)
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0 = {});
};
EMBER_MODULE(RNN);

class LSTMImpl : public RNNBaseImpl {
 public:
  LSTMImpl(int64_t input_size, int64_t hidden_size)
      : LSTMImpl(LSTMOptions(input_size, hidden_size)) {}
  explicit LSTMImpl(const LSTMOptions& options);
  // (output, (h_n, c_n))
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& x, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
};
EMBER_MODULE(LSTM);

class GRUImpl : public RNNBaseImpl {
 public:
  GRUImpl(int64_t input_size, int64_t hidden_size) : GRUImpl(GRUOptions(input_size, hidden_size)) {}
  explicit GRUImpl(const GRUOptions& options);
  // (output, h_n)
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& h0 = {});
};
EMBER_MODULE(GRU);

// One step. Inputs [B, input_size] or unbatched [input_size]; states likewise, zeros when not
// given. Parameters weight_ih [G * hidden, input], weight_hh [G * hidden, hidden], bias_ih,
// bias_hh [G * hidden] (G: 1, 4 or 3).
class RNNCellBaseImpl : public Module {
 public:
  RNNCellBaseImpl(RNNMode mode, const RNNCellOptions& options, const char* name);
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  RNNCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  // One step from x and the state (h, and c for the LSTM; zeros when undefined), checked:
  // (h', c'), c' undefined but for the LSTM; unbatched in, unbatched out.
  std::tuple<Tensor, Tensor> advance(const Tensor& x, const Tensor& h, const Tensor& c) const;
  RNNMode mode_;
  const char* name_;
};

class RNNCellImpl : public RNNCellBaseImpl {
 public:
  RNNCellImpl(int64_t input_size, int64_t hidden_size)
      : RNNCellImpl(RNNCellOptions(input_size, hidden_size)) {}
  explicit RNNCellImpl(const RNNCellOptions& options);
  Tensor forward(const Tensor& x, const Tensor& h = {});
};
EMBER_MODULE(RNNCell);

class LSTMCellImpl : public RNNCellBaseImpl {
 public:
  LSTMCellImpl(int64_t input_size, int64_t hidden_size)
      : LSTMCellImpl(LSTMCellOptions(input_size, hidden_size)) {}
  explicit LSTMCellImpl(const LSTMCellOptions& options);
  // (h', c')
  std::tuple<Tensor, Tensor> forward(
      const Tensor& x, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
};
EMBER_MODULE(LSTMCell);

class GRUCellImpl : public RNNCellBaseImpl {
 public:
  GRUCellImpl(int64_t input_size, int64_t hidden_size)
      : GRUCellImpl(GRUCellOptions(input_size, hidden_size)) {}
  explicit GRUCellImpl(const GRUCellOptions& options);
  Tensor forward(const Tensor& x, const Tensor& h = {});
};
EMBER_MODULE(GRUCell);

}  // namespace ember::nn
