// Recurrent layers (nn/rnn.h): gradients against finite differences in float64, PyTorch's
// parameter names and shapes, bad shapes as errors naming the layer, and a compiled training
// step over the time loop equal to eager.
#include <cmath>
#include <sstream>
#include <type_traits>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/rnn.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

// The gradients of the input and the initial states of `layer` (float64) against finite
// differences; the parameters' gradients are checked against PyTorch's
// (tests/nn/test_rnn_parity.cpp). The scalar weighs every output element differently.
template <class Layer>
void check_gradients(Layer layer, const Shape& xs, const Shape& hs) {
  layer->to(kFloat64);
  manual_seed(5);
  const std::vector<Tensor> inputs = {randn(xs, TensorOptions(kFloat64)).requires_grad_(),
                                      randn(hs, TensorOptions(kFloat64)).requires_grad_(),
                                      randn(hs, TensorOptions(kFloat64)).requires_grad_()};
  const auto fn = [layer](const std::vector<Tensor>& in) mutable {
    Tensor out, h;
    if constexpr (std::is_same_v<Layer, nn::LSTM>) {
      auto r = layer->forward(in[0], std::make_tuple(in[1], in[2]));
      out = std::get<0>(r);
      h = add(std::get<0>(std::get<1>(r)), mul(std::get<1>(std::get<1>(r)), 0.5));
    } else {
      std::tie(out, h) = layer->forward(in[0], in[1]);
    }
    return add(sum(mul(out, tanh(out))), sum(mul(h, h)));
  };
  const std::string report = autograd::gradcheck_report(fn, inputs);
  INFO(report);
  CHECK(report.empty());
}

}  // namespace

TEST_CASE("recurrent layers pass gradcheck in float64", "[nn][rnn][gradcheck]") {
  SECTION("LSTM, two layers, bidirectional") {
    check_gradients(nn::LSTM(nn::LSTMOptions(3, 2).num_layers(2).bidirectional(true)),
                    {4, 2, 3}, {4, 2, 2});
  }
  SECTION("GRU, batch_first") {
    check_gradients(nn::GRU(nn::GRUOptions(2, 3).batch_first(true)), {2, 3, 2}, {1, 2, 3});
  }
  SECTION("RNN, relu, two layers") {
    check_gradients(nn::RNN(nn::RNNOptions(3, 2).num_layers(2).nonlinearity("relu")),
                    {3, 2, 3}, {2, 2, 2});
  }
}

TEST_CASE("recurrent layers: PyTorch's names and shapes, init bounds, printing",
          "[nn][rnn]") {
  nn::LSTM lstm(nn::LSTMOptions(5, 4).num_layers(2).bidirectional(true));
  std::vector<std::string> names;
  for (const auto& [n, p] : lstm->named_parameters()) names.push_back(n);
  const std::vector<std::string> want = {
      "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  CHECK(names == want);
  const auto params = lstm->named_parameters();
  CHECK(params[0].second.sizes() == Shape{16, 5});
  CHECK(params[1].second.sizes() == Shape{16, 4});
  CHECK(params[8].second.sizes() == Shape{16, 8});  // layer 1 reads both directions
  CHECK(params[2].second.sizes() == Shape{16});
  for (const auto& [n, p] : params) {
    const std::vector<double> v = test::read(p);
    for (double e : v) CHECK(std::abs(e) <= 0.5);  // U(-1/sqrt(4), 1/sqrt(4))
  }
  nn::GRU gru(nn::GRUOptions(3, 6).bias(false));
  CHECK(gru->named_parameters().size() == 2);
  CHECK(gru->named_parameters()[0].second.sizes() == Shape{18, 3});
  nn::GRUCell cell(4, 2);
  CHECK(cell->named_parameters()[0].first == "weight_ih");
  CHECK(cell->weight_hh.sizes() == Shape{6, 2});
  std::ostringstream os;
  os << *lstm;
  CHECK(os.str().find("LSTM(5, 4, num_layers=2, bidirectional=true)") != std::string::npos);
}

TEST_CASE("recurrent layers: outputs and states have PyTorch's shapes", "[nn][rnn]") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2).bidirectional(true).batch_first(true));
  auto [out, state] = lstm->forward(randn({5, 7, 3}));  // [B, T, in]
  CHECK(out.sizes() == Shape{5, 7, 8});
  CHECK(std::get<0>(state).sizes() == Shape{4, 5, 4});
  CHECK(std::get<1>(state).sizes() == Shape{4, 5, 4});
  nn::GRU gru(3, 4);
  auto [o1, h1] = gru->forward(randn({6, 3}));  // unbatched [T, in]
  CHECK(o1.sizes() == Shape{6, 4});
  CHECK(h1.sizes() == Shape{1, 4});
  auto [o0, h0] = gru->forward(randn({0, 2, 3}));  // an empty sequence returns the initial state
  CHECK(o0.sizes() == Shape{0, 2, 4});
  CHECK(test::read(h0) == std::vector<double>(8, 0.0));
  nn::LSTMCell cell(3, 2);
  auto [h, c] = cell->forward(randn({3}));
  CHECK(h.sizes() == Shape{2});
  CHECK(c.sizes() == Shape{2});
}

TEST_CASE("recurrent layers: bad shapes and options are errors naming the layer",
          "[nn][rnn]") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4));
  CHECK_THROWS_WITH(lstm->forward(randn({5, 2, 6})),
                    Contains("LSTM") && Contains("6 features, expected input_size = 3"));
  CHECK_THROWS_WITH(lstm->forward(randn({5, 2, 3, 1})), Contains("LSTM: expected an input"));
  CHECK_THROWS_WITH(lstm->forward(randn({5, 2, 3}), std::make_tuple(zeros({1, 3, 4}), zeros({1, 2, 4}))),
                    Contains("LSTM: h0 must be float32 [1, 2, 4]") && Contains("[1, 3, 4]"));
  nn::GRU gru(nn::GRUOptions(3, 4).num_layers(2));
  CHECK_THROWS_WITH(gru->forward(randn({5, 2, 3}), zeros({1, 2, 4})),
                    Contains("GRU: h0 must be float32 [2, 2, 4]"));
  CHECK_THROWS_WITH(nn::RNN(nn::RNNOptions(3, 4).nonlinearity("sigmoid")),
                    Contains("RNN: nonlinearity must be \"tanh\" or \"relu\""));
  CHECK_THROWS_WITH(nn::LSTM(nn::LSTMOptions(3, 0)), Contains("LSTM: input_size and hidden_size"));
  CHECK_THROWS_WITH(nn::GRU(nn::GRUOptions(3, 4).dropout(1.5)), Contains("GRU: dropout"));
  nn::GRUCell cell(3, 4);
  CHECK_THROWS_WITH(cell->forward(randn({2, 3}), zeros({3, 4})),
                    Contains("GRUCell: h must be float32 [2, 4]"));
}

TEST_CASE("a compiled LSTM training step over the time loop equals eager", "[nn][rnn][jit]") {
  auto run = [](bool compiled_run) {
    manual_seed(7);
    nn::LSTM lstm(nn::LSTMOptions(4, 8).num_layers(2));
    nn::Linear head(8, 3);
    std::vector<Tensor> params = lstm->parameters();
    for (const Tensor& p : head->parameters()) params.push_back(p);
    optim::SGD opt(params, optim::SGDOptions(0.1).momentum(0.9));
    nn::CrossEntropyLoss criterion;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      auto [out, state] = lstm->forward(x);
      Tensor loss = criterion(head->forward(out.select(0, out.size(0) - 1)), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto compiled = jit::compile(step);
    std::vector<double> losses;
    for (int i = 0; i < 6; ++i) {
      const Tensor x = randn({10, 5, 4});
      const Tensor y = randint(0, 3, {5});
      losses.push_back((compiled_run ? compiled(x, y) : step(x, y)).item<float>());
    }
    if (compiled_run) {
      CHECK(compiled.stats().eager_calls == 0);
      CHECK(compiled.stats().replays >= 2);
    }
    return losses;
  };
  const std::vector<double> eager = run(false), compiled = run(true);
  CHECK(eager == compiled);
  CHECK(eager.front() != eager.back());
}

// The recipe (docs/features.md) for sequences of different lengths without packing: pad after the valid
// steps, run the batch, read each sequence's output at its own last valid step. Checked against
// each sequence run alone, and with garbage in the padding (it must not leak backwards).
TEST_CASE("variable lengths by padding: each sequence's last valid output equals it run alone",
          "[nn][rnn]") {
  manual_seed(21);
  nn::LSTM lstm(nn::LSTMOptions(3, 5).num_layers(2));
  nn::GRU gru(nn::GRUOptions(3, 5));
  const std::vector<int64_t> lengths{6, 2, 4};
  const int64_t T = 6, B = 3;
  const Tensor padded = randn({T, B, 3}) * 100.0;  // the padding is large garbage
  std::vector<int64_t> last;
  for (int64_t len : lengths) last.push_back(len - 1);
  const Tensor index = from_vector(last, {1, B, 1}).expand({1, B, 5}).contiguous();
  auto check = [&](auto& layer) {
    const Tensor out = std::get<0>(layer->forward(padded, {}));
    const Tensor picked = gather(out, 0, index).squeeze(0);  // [B, H]
    for (int64_t b = 0; b < B; ++b) {
      const Tensor alone = padded.slice(0, 0, lengths[b]).select(1, b).contiguous();  // [len, 3]
      const Tensor want = std::get<0>(layer->forward(alone, {})).select(0, lengths[b] - 1);
      INFO("sequence " << b << " of length " << lengths[b]);
      CHECK(test::read(picked.select(0, b)) == test::read(want));
    }
  };
  auto lstm_fwd = [&](const Tensor& x, const Tensor&) { return lstm->forward(x); };
  struct L {
    decltype(lstm_fwd)& f;
    L* operator->() { return this; }
    auto forward(const Tensor& x, const Tensor& h) {
      auto [o, s] = f(x, h);
      return std::make_tuple(o, std::get<0>(s));
    }
  } l{lstm_fwd};
  check(l);
  check(gru);
}
