// Recurrent layers against PyTorch (tests/fixtures/rnn_layers.safetensors, made by
// tools/make_rnn_fixtures.py with PyTorch 1.13): outputs, final states and the gradients of the
// input, the initial states and every parameter, float64, within 1e-10 (relative above 1), on
// the CPU and on CUDA. The parameters load by PyTorch's names, which checks those too.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "nn/rnn.h"
#include "nn/serialize.h"
#include "test_util.h"

using namespace ember;
using json = nlohmann::json;

namespace {

void check_case(const nn::TensorFile& fx, const std::string& name, const json& c, Device dev) {
  INFO(name << " on " << dev.str());
  auto get = [&](const std::string& k) -> Tensor {
    const auto it = fx.tensors.find(name + "." + k);
    return it == fx.tensors.end() ? Tensor() : it->second.to(dev);
  };
  const std::string kind = c["kind"];
  const int64_t in = c["input_size"], hid = c["hidden_size"];
  const bool cell = kind.size() > 4 && kind.substr(kind.size() - 4) == "Cell";
  std::shared_ptr<nn::Module> module;
  nn::RNNOptions o(in, hid);
  o.num_layers(c.value("num_layers", 1))
      .bias(c.value("bias", true))
      .batch_first(c.value("batch_first", false))
      .bidirectional(c.value("bidirectional", false))
      .nonlinearity(c.value("nonlinearity", std::string("tanh")));
  nn::RNNCellOptions co(in, hid);
  co.bias(c.value("bias", true)).nonlinearity(c.value("nonlinearity", std::string("tanh")));
  nn::LSTM lstm{nullptr};
  nn::GRU gru{nullptr};
  nn::RNN rnn{nullptr};
  nn::LSTMCell lstm_cell{nullptr};
  nn::GRUCell gru_cell{nullptr};
  nn::RNNCell rnn_cell{nullptr};
  if (kind == "LSTM") module = (lstm = nn::LSTM(o)).ptr();
  if (kind == "GRU") module = (gru = nn::GRU(o)).ptr();
  if (kind == "RNN") module = (rnn = nn::RNN(o)).ptr();
  if (kind == "LSTMCell") module = (lstm_cell = nn::LSTMCell(co)).ptr();
  if (kind == "GRUCell") module = (gru_cell = nn::GRUCell(co)).ptr();
  if (kind == "RNNCell") module = (rnn_cell = nn::RNNCell(co)).ptr();
  REQUIRE(module);
  module->to(dev, kFloat64);
  int params = 0;
  {
    NoGradGuard no_grad;
    for (auto& [pname, p] : module->named_parameters()) {
      const Tensor want = get("param." + pname);
      INFO("parameter " << pname);
      REQUIRE(want.defined());
      REQUIRE(want.sizes() == p.sizes());
      Tensor(p).copy_(want);
      ++params;
    }
  }
  CHECK(fx.tensors.count(name + ".param." + module->named_parameters().front().first) == 1);
  Tensor x = get("x").requires_grad_();
  Tensor h0 = get("h0"), c0 = get("c0");
  if (h0.defined()) h0.requires_grad_();
  if (c0.defined()) c0.requires_grad_();
  Tensor out, h_n, c_n;
  if (lstm) {
    auto r = c0.defined() ? lstm->forward(x, std::make_tuple(h0, c0)) : lstm->forward(x);
    out = std::get<0>(r);
    std::tie(h_n, c_n) = std::get<1>(r);
  } else if (gru) {
    std::tie(out, h_n) = gru->forward(x, h0);
  } else if (rnn) {
    std::tie(out, h_n) = rnn->forward(x, h0);
  } else if (lstm_cell) {
    std::tie(h_n, c_n) =
        c0.defined() ? lstm_cell->forward(x, std::make_tuple(h0, c0)) : lstm_cell->forward(x);
  } else if (gru_cell) {
    h_n = gru_cell->forward(x, h0);
  } else {
    h_n = rnn_cell->forward(x, h0);
  }
  Tensor loss = sum(mul(h_n, get("grad_h_n")));
  if (out.defined()) loss = add(loss, sum(mul(out, get("grad_out"))));
  if (c_n.defined()) loss = add(loss, sum(mul(c_n, get("grad_c_n"))));
  loss.backward();
  auto close = [&](const Tensor& got, const std::string& key) {
    INFO(key);
    const Tensor want = get(key);
    REQUIRE(want.defined());
    REQUIRE(got.defined());
    REQUIRE(got.sizes() == want.sizes());
    const std::vector<double> g = test::read(got), e = test::read(want);
    for (size_t i = 0; i < g.size(); ++i)
      CHECK(std::abs(g[i] - e[i]) <= 1e-10 * std::max(1.0, std::abs(e[i])));
  };
  if (!cell) close(out, "out");
  close(h_n, "h_n");
  if (kind.rfind("LSTM", 0) == 0) close(c_n, "c_n");
  close(x.grad(), "grad_x");
  if (h0.defined()) close(h0.grad(), "grad_h0");
  if (c0.defined()) close(c0.grad(), "grad_c0");
  for (auto& [pname, p] : module->named_parameters()) close(p.grad(), "grad." + pname);
  CHECK(params > 0);
}

void check_all(Device dev) {
  const std::string path = std::string(EMBER_FIXTURE_DIR) + "/rnn_layers.safetensors";
  if (!std::filesystem::exists(path))
    FAIL("missing " << path << "; make it with `python3 tools/make_rnn_fixtures.py`");
  const nn::TensorFile fx = nn::load_tensor_file(path);
  int cases = 0;
  for (const auto& [key, value] : fx.metadata) {
    if (key == "torch_version" || key == "generator") continue;
    check_case(fx, key, json::parse(value), dev);
    ++cases;
  }
  CHECK(cases == 10);
}

}  // namespace

TEST_CASE("recurrent layers match PyTorch, float64 (CPU)", "[nn][rnn][parity]") {
  check_all(Device::cpu());
}

TEST_CASE("recurrent layers match PyTorch, float64 (CUDA)", "[nn][rnn][parity][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_all(Device::cuda(0));
}
