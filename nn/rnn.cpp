#include "nn/rnn.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace ember::nn {
namespace {

int64_t gates(RNNMode m) { return m == RNNMode::Lstm ? 4 : m == RNNMode::Gru ? 3 : 1; }

RNNMode rnn_mode(const std::string& nonlinearity, const char* who) {
  EMBER_CHECK(nonlinearity == "tanh" || nonlinearity == "relu", who,
              ": nonlinearity must be \"tanh\" or \"relu\", got \"", nonlinearity, "\"");
  return nonlinearity == "tanh" ? RNNMode::RnnTanh : RNNMode::RnnRelu;
}

// gate k of [B, G * H]
Tensor part(const Tensor& t, int64_t k, int64_t H) { return t.slice(1, k * H, (k + 1) * H); }

// One step from the input's share gi = x W_ih^T + b_ih [B, G * H] and the state (h, and c for
// the LSTM), in PyTorch's formulas: the new h, and c for the LSTM.
void step(RNNMode mode, const Tensor& gi, const Tensor& h, const Tensor& c, const Tensor& w_hh,
          const Tensor& b_hh, int64_t H, Tensor& h_out, Tensor& c_out) {
  const Tensor gh = linear(h, w_hh, b_hh);
  switch (mode) {
    case RNNMode::RnnTanh:
      h_out = tanh(gi + gh);
      return;
    case RNNMode::RnnRelu:
      h_out = relu(gi + gh);
      return;
    case RNNMode::Lstm: {
      const Tensor g = gi + gh;
      const Tensor i = sigmoid(part(g, 0, H)), f = sigmoid(part(g, 1, H));
      const Tensor cell = tanh(part(g, 2, H)), o = sigmoid(part(g, 3, H));
      c_out = f * c + i * cell;
      h_out = o * tanh(c_out);
      return;
    }
    case RNNMode::Gru: {
      const Tensor r = sigmoid(part(gi, 0, H) + part(gh, 0, H));
      const Tensor z = sigmoid(part(gi, 1, H) + part(gh, 1, H));
      const Tensor n = tanh(part(gi, 2, H) + r * part(gh, 2, H));
      h_out = n + z * (h - n);  // (1 - z) * n + z * h
      return;
    }
  }
}

void init_uniform(const std::vector<Tensor*>& ts, int64_t hidden) {
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden));
  for (Tensor* t : ts)
    if (t->defined()) init::uniform_(*t, -k, k);
}

}  // namespace

// ---- RNN, LSTM, GRU -----------------------------------------------------------------------

RNNBaseImpl::RNNBaseImpl(RNNMode mode, const RNNOptions& o, const char* name)
    : options(o), mode_(mode), name_(name) {
  EMBER_CHECK(o.input_size() > 0 && o.hidden_size() > 0, name,
              ": input_size and hidden_size must be positive, got ", o.input_size(), " and ",
              o.hidden_size());
  EMBER_CHECK(o.num_layers() >= 1, name, ": num_layers must be at least 1, got ", o.num_layers());
  EMBER_CHECK(o.dropout() >= 0 && o.dropout() <= 1, name, ": dropout must be in [0, 1], got ",
              o.dropout());
  const int64_t H = o.hidden_size(), G = gates(mode), D = o.bidirectional() ? 2 : 1;
  for (int64_t l = 0; l < o.num_layers(); ++l)
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t in = l == 0 ? o.input_size() : H * D;
      LayerWeights w;
      w.w_ih = register_parameter("weight_ih" + sfx, empty({G * H, in}));
      w.w_hh = register_parameter("weight_hh" + sfx, empty({G * H, H}));
      if (o.bias()) {
        w.b_ih = register_parameter("bias_ih" + sfx, empty({G * H}));
        w.b_hh = register_parameter("bias_hh" + sfx, empty({G * H}));
      }
      weights_.push_back(w);
    }
  reset_parameters();
}

void RNNBaseImpl::reset_parameters() {
  for (LayerWeights& w : weights_)
    init_uniform({&w.w_ih, &w.w_hh, &w.b_ih, &w.b_hh}, options.hidden_size());
}

RNNBaseImpl::Result RNNBaseImpl::run(const Tensor& x_in, const Tensor& h0_in, const Tensor& c0_in) {
  const RNNOptions& o = options;
  const int64_t H = o.hidden_size(), D = o.bidirectional() ? 2 : 1, L = o.num_layers();
  EMBER_CHECK(x_in.defined() && (x_in.dim() == 2 || x_in.dim() == 3), name_,
              ": expected an input [T, B, ", o.input_size(), "] (or [T, ", o.input_size(),
              "] unbatched), got ", x_in.defined() ? x_in.sizes() : Shape{});
  EMBER_CHECK(x_in.size(-1) == o.input_size(), name_, ": input of shape ", x_in.sizes(), " has ",
              x_in.size(-1), " features, expected input_size = ", o.input_size());
  const bool unbatched = x_in.dim() == 2;
  Tensor x = unbatched ? x_in.unsqueeze(1) : o.batch_first() ? x_in.transpose(0, 1) : x_in;
  const int64_t T = x.size(0), B = x.size(1);
  const Shape state_shape = unbatched ? Shape{L * D, H} : Shape{L * D, B, H};
  auto state = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({L * D, B, H}, TensorOptions(x.dtype()).device(x.device()));
    EMBER_CHECK(s.sizes() == state_shape && s.device() == x.device() && s.dtype() == x.dtype(),
                name_, ": ", what, " must be ", dtype_name(x.dtype()), " ", state_shape, " on ",
                x.device().str(), " for input ", x_in.sizes(), ", got ", dtype_name(s.dtype()), " ",
                s.sizes(), " on ", s.device().str());
    return unbatched ? s.unsqueeze(1) : s;
  };
  const Tensor h0 = state(h0_in, "h0");
  const Tensor c0 = mode_ == RNNMode::Lstm ? state(c0_in, "c0") : Tensor();

  std::vector<Tensor> h_n, c_n;
  Tensor layer_in = x;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      const LayerWeights& w = weights_[l * D + d];
      const int64_t in = layer_in.size(2), G = gates(mode_);
      // Every step's input share in one product.
      const Tensor gi_all =
          linear(layer_in.reshape({T * B, in}), w.w_ih, w.b_ih).view({T, B, G * H});
      Tensor h = h0.select(0, l * D + d), c = c0.defined() ? c0.select(0, l * D + d) : Tensor();
      std::vector<Tensor> hs(static_cast<size_t>(T));
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = d == 0 ? s : T - 1 - s;
        Tensor h_next, c_next;
        step(mode_, gi_all.select(0, t), h, c, w.w_hh, w.b_hh, H, h_next, c_next);
        h = h_next;
        c = c_next;
        hs[static_cast<size_t>(t)] = h;
      }
      outs.push_back(T > 0 ? stack(hs, 0)
                           : zeros({0, B, H}, TensorOptions(x.dtype()).device(x.device())));
      h_n.push_back(h);
      if (c.defined()) c_n.push_back(c);
    }
    layer_in = D == 2 ? cat(outs, 2) : outs[0];
    if (l + 1 < L && o.dropout() > 0)
      layer_in = functional::dropout(layer_in, o.dropout(), is_training());
  }
  Result r;
  r.output = unbatched         ? layer_in.squeeze(1)
             : o.batch_first() ? layer_in.transpose(0, 1)
                               : layer_in;
  r.h_n = stack(h_n, 0);
  if (!c_n.empty()) r.c_n = stack(c_n, 0);
  if (unbatched) {
    r.h_n = r.h_n.squeeze(1);
    if (r.c_n.defined()) r.c_n = r.c_n.squeeze(1);
  }
  return r;
}

void RNNBaseImpl::pretty_print(std::ostream& os) const {
  os << name_ << "(" << options.input_size() << ", " << options.hidden_size();
  if (options.num_layers() != 1) os << ", num_layers=" << options.num_layers();
  if (mode_ == RNNMode::RnnRelu) os << ", nonlinearity=relu";
  if (!options.bias()) os << ", bias=false";
  if (options.batch_first()) os << ", batch_first=true";
  if (options.dropout() > 0) os << ", dropout=" << options.dropout();
  if (options.bidirectional()) os << ", bidirectional=true";
  os << ")";
}

RNNImpl::RNNImpl(const RNNOptions& o) : RNNBaseImpl(rnn_mode(o.nonlinearity(), "RNN"), o, "RNN") {}

std::tuple<Tensor, Tensor> RNNImpl::forward(const Tensor& x, const Tensor& h0) {
  Result r = run(x, h0, {});
  return {r.output, r.h_n};
}

LSTMImpl::LSTMImpl(const LSTMOptions& o) : RNNBaseImpl(RNNMode::Lstm, o, "LSTM") {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTMImpl::forward(
    const Tensor& x, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  Result r = hx ? run(x, std::get<0>(*hx), std::get<1>(*hx)) : run(x, {}, {});
  return {r.output, {r.h_n, r.c_n}};
}

GRUImpl::GRUImpl(const GRUOptions& o) : RNNBaseImpl(RNNMode::Gru, o, "GRU") {}

std::tuple<Tensor, Tensor> GRUImpl::forward(const Tensor& x, const Tensor& h0) {
  Result r = run(x, h0, {});
  return {r.output, r.h_n};
}

// ---- cells ----------------------------------------------------------------------------------

RNNCellBaseImpl::RNNCellBaseImpl(RNNMode mode, const RNNCellOptions& o, const char* name)
    : options(o), mode_(mode), name_(name) {
  EMBER_CHECK(o.input_size() > 0 && o.hidden_size() > 0, name,
              ": input_size and hidden_size must be positive, got ", o.input_size(), " and ",
              o.hidden_size());
  const int64_t G = gates(mode) * o.hidden_size();
  weight_ih = register_parameter("weight_ih", empty({G, o.input_size()}));
  weight_hh = register_parameter("weight_hh", empty({G, o.hidden_size()}));
  if (o.bias()) {
    bias_ih = register_parameter("bias_ih", empty({G}));
    bias_hh = register_parameter("bias_hh", empty({G}));
  }
  reset_parameters();
}

void RNNCellBaseImpl::reset_parameters() {
  init_uniform({&weight_ih, &weight_hh, &bias_ih, &bias_hh}, options.hidden_size());
}

void RNNCellBaseImpl::pretty_print(std::ostream& os) const {
  os << name_ << "(" << options.input_size() << ", " << options.hidden_size();
  if (mode_ == RNNMode::RnnRelu) os << ", nonlinearity=relu";
  if (!options.bias()) os << ", bias=false";
  os << ")";
}

std::tuple<Tensor, Tensor> RNNCellBaseImpl::advance(const Tensor& x_in, const Tensor& h_in,
                                                    const Tensor& c_in) const {
  const int64_t H = options.hidden_size();
  EMBER_CHECK(x_in.defined() && (x_in.dim() == 1 || x_in.dim() == 2), name_,
              ": expected an input [B, ", options.input_size(), "] (or [", options.input_size(),
              "] unbatched), got ", x_in.defined() ? x_in.sizes() : Shape{});
  EMBER_CHECK(x_in.size(-1) == options.input_size(), name_, ": input of shape ", x_in.sizes(),
              " has ", x_in.size(-1), " features, expected input_size = ", options.input_size());
  const bool unbatched = x_in.dim() == 1;
  const Tensor x = unbatched ? x_in.unsqueeze(0) : x_in;
  auto state = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return zeros({x.size(0), H}, TensorOptions(x.dtype()).device(x.device()));
    const Shape want = unbatched ? Shape{H} : Shape{x.size(0), H};
    EMBER_CHECK(s.sizes() == want && s.device() == x.device() && s.dtype() == x.dtype(), name_,
                ": ", what, " must be ", dtype_name(x.dtype()), " ", want, " on ", x.device().str(),
                ", got ", dtype_name(s.dtype()), " ", s.sizes(), " on ", s.device().str());
    return unbatched ? s.unsqueeze(0) : s;
  };
  const Tensor h = state(h_in, "h");
  const Tensor c = mode_ == RNNMode::Lstm ? state(c_in, "c") : Tensor();
  Tensor h_out, c_out;
  step(mode_, linear(x, weight_ih, bias_ih), h, c, weight_hh, bias_hh, H, h_out, c_out);
  if (unbatched) {
    h_out = h_out.squeeze(0);
    if (c_out.defined()) c_out = c_out.squeeze(0);
  }
  return {h_out, c_out};
}

RNNCellImpl::RNNCellImpl(const RNNCellOptions& o)
    : RNNCellBaseImpl(rnn_mode(o.nonlinearity(), "RNNCell"), o, "RNNCell") {}

Tensor RNNCellImpl::forward(const Tensor& x, const Tensor& h) {
  return std::get<0>(advance(x, h, {}));
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& o)
    : RNNCellBaseImpl(RNNMode::Lstm, o, "LSTMCell") {}

std::tuple<Tensor, Tensor> LSTMCellImpl::forward(
    const Tensor& x, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  return hx ? advance(x, std::get<0>(*hx), std::get<1>(*hx)) : advance(x, {}, {});
}

GRUCellImpl::GRUCellImpl(const GRUCellOptions& o) : RNNCellBaseImpl(RNNMode::Gru, o, "GRUCell") {}

Tensor GRUCellImpl::forward(const Tensor& x, const Tensor& h) {
  return std::get<0>(advance(x, h, {}));
}

}  // namespace ember::nn
