// Parity with PyTorch: numbers made by tools/make_parity_fixtures.py with PyTorch (checked in
// under tests/fixtures/) reproduced by Ember.
//  - The MLP 784 -> 512 -> ReLU -> 10 trained 20 SGD steps from a fixed init on fixed batches of
//    16, plain and with momentum + nesterov + weight decay: every step's loss to relative 1e-5,
//    the final weights to float32 rounding. CPU, and CUDA on a GPU machine.
//  - Layers and losses in float64: forward values and the gradients of the input and the
//    parameters for a random upstream gradient, to 1e-10.
// A missing fixture fails the test with the command that makes it.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/serialize.h"
#include "optim/sgd.h"
#include "test_util.h"

#ifndef EMBER_FIXTURE_DIR
#error "tests/CMakeLists.txt must define EMBER_FIXTURE_DIR (the tests/fixtures directory)"
#endif

namespace {

using namespace ember;

constexpr double kEps32 = 1.1920928955078125e-07;  // 2^-23, float32's machine epsilon

// ---- fixtures ------------------------------------------------------------------------------

struct Fixture {
  std::string path;
  nn::TensorFile file;

  const Tensor& get(const std::string& key) const {
    const auto it = file.tensors.find(key);
    if (it == file.tensors.end())
      FAIL(path << " has no tensor \"" << key << "\": regenerate the fixtures with "
                << "`python3 tools/make_parity_fixtures.py` (where PyTorch is installed)");
    return it->second;
  }
  bool has(const std::string& key) const { return file.tensors.count(key) != 0; }
  std::string meta(const std::string& key) const {
    const auto it = file.metadata.find(key);
    if (it == file.metadata.end()) FAIL(path << " has no metadata \"" << key << "\"");
    return it->second;
  }
};

Fixture load_fixture(const char* name) {
  Fixture f;
  f.path = std::string(EMBER_FIXTURE_DIR) + "/" + name;
  if (!std::filesystem::exists(f.path))
    FAIL("missing PyTorch fixture " << f.path << "\n  Make the fixtures where PyTorch is "
                                    << "installed (the GPU machine), from the project root:\n"
                                    << "    python3 tools/make_parity_fixtures.py\n"
                                    << "  and commit tests/fixtures/*.safetensors.");
  f.file = nn::load_tensor_file(f.path);
  return f;
}

// ---- comparison ----------------------------------------------------------------------------

std::vector<double> host_values(const Tensor& t) {
  return t.detach().cpu().to(kFloat64).contiguous().to_vector<double>();
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// Checks |actual - expected| <= atol + rtol * |expected| for every element and reports the
// count of failures and the worst element.
void check_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                 const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  const std::vector<double> a = host_values(actual), e = host_values(expected);
  size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]), tol = atol + rtol * std::abs(e[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / tol;
    if (!(err <= tol)) ++bad;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (bad == 0) return;
  std::ostringstream msg;
  msg.precision(17);
  msg << what << ": " << bad << " of " << a.size() << " elements out of tolerance (rtol " << rtol
      << ", atol " << atol << "); worst at flat index " << worst << ": got " << a[worst]
      << ", expected " << e[worst] << ", |diff| " << std::abs(a[worst] - e[worst]);
  FAIL_CHECK(msg.str());
}

// float32 rounding of a trained weight: a few ulps of the element and of the tensor's scale
// (updates are computed from gradients that differ from PyTorch's in the last bits).
void check_weights_f32(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const double scale = max_abs(host_values(expected));
  check_close(actual, expected, 16 * kEps32, 16 * kEps32 * scale, what);
}

// ---- the MLP -------------------------------------------------------------------------------

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(784, 512));
    fc2 = register_module("fc2", nn::Linear(512, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(Net);

optim::SGDOptions sgd_options_of(const Fixture& run) {
  // The run's options as the script wrote them (Python reprs of floats and bools).
  optim::SGDOptions o(std::stod(run.meta("lr")));
  if (run.file.metadata.count("momentum")) o.momentum(std::stod(run.meta("momentum")));
  if (run.file.metadata.count("dampening")) o.dampening(std::stod(run.meta("dampening")));
  if (run.file.metadata.count("weight_decay")) o.weight_decay(std::stod(run.meta("weight_decay")));
  if (run.file.metadata.count("nesterov")) o.nesterov(run.meta("nesterov") == "True");
  return o;
}

void check_mlp_run(const char* run_file, const optim::SGDOptions& expected_options, Device dev) {
  const Fixture in = load_fixture("mlp_inputs.safetensors");
  const Fixture run = load_fixture(run_file);
  // The script and this test agree on the run's hyperparameters.
  const optim::SGDOptions opts = sgd_options_of(run);
  REQUIRE(opts.lr() == expected_options.lr());
  REQUIRE(opts.momentum() == expected_options.momentum());
  REQUIRE(opts.dampening() == expected_options.dampening());
  REQUIRE(opts.weight_decay() == expected_options.weight_decay());
  REQUIRE(opts.nesterov() == expected_options.nesterov());

  Net net;
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : net->named_parameters()) {
      const Tensor& init = in.get("init." + name);
      REQUIRE(init.sizes() == p.sizes());
      p.copy_(init.to(kFloat32));  // stored on the bfloat16 grid: exact in float32
    }
  }
  net->to(dev);
  optim::SGD opt(net->parameters(), opts);
  nn::CrossEntropyLoss criterion;

  const Tensor xs = in.get("batch.x").to(kFloat32).to(dev), ys = in.get("batch.y").to(dev);
  const std::vector<float> expected_loss = run.get("loss").to_vector<float>();
  REQUIRE(xs.size(0) == static_cast<int64_t>(expected_loss.size()));
  for (int64_t step = 0; step < xs.size(0); ++step) {
    opt.zero_grad();
    Tensor loss = criterion(net(xs.select(0, step)), ys.select(0, step));
    loss.backward();
    opt.step();
    const double got = loss.item<float>(), want = expected_loss[step];
    INFO(run_file << " on " << dev.str() << ", step " << step + 1 << ": loss " << got
                  << ", PyTorch " << want);
    CHECK(std::abs(got - want) <= 1e-5 * std::abs(want));
  }

  const std::string where = std::string(run_file) + " on " + dev.str() + ": final ";
  check_weights_f32(net->fc1->bias, run.get("final.fc1.bias"), where + "fc1.bias");
  check_weights_f32(net->fc2->weight, run.get("final.fc2.weight"), where + "fc2.weight");
  check_weights_f32(net->fc2->bias, run.get("final.fc2.bias"), where + "fc2.bias");
  // fc1.weight: every 13th element, and the float64 sums of every row and column.
  const Tensor w1 = net->fc1->weight.detach().cpu();
  const int64_t stride = std::stoll(run.meta("sample_stride"));
  const Tensor flat = w1.flatten();
  check_weights_f32(flat.slice(0, 0, flat.numel(), stride), run.get("final.fc1.weight.every13"),
                    where + "fc1.weight[::13]");
  const double scale = max_abs(host_values(w1));
  for (int dim : {1, 0}) {
    const Tensor sums = w1.to(kFloat64).sum({dim});
    const double terms = static_cast<double>(w1.size(dim));
    // Rounding errors of independent elements add up like a random walk.
    check_close(sums, run.get(dim == 1 ? "final.fc1.weight.row_sum" : "final.fc1.weight.col_sum"),
                0, 16 * kEps32 * scale * std::sqrt(terms),
                where + (dim == 1 ? "fc1.weight row sums" : "fc1.weight column sums"));
  }
}

const optim::SGDOptions kPlain = optim::SGDOptions(0.01);
const optim::SGDOptions kMomentum =
    optim::SGDOptions(0.01).momentum(0.9).dampening(0).nesterov(true).weight_decay(1e-4);

// ---- layers and losses ---------------------------------------------------------------------

// Every case the fixture holds must have a reproduction here, and the other way round.
const std::set<std::string> kLayerCases = {"linear",
                                           "relu",
                                           "gelu_none",
                                           "gelu_tanh",
                                           "sigmoid",
                                           "tanh",
                                           "layer_norm",
                                           "embedding",
                                           "cross_entropy_mean",
                                           "cross_entropy_sum",
                                           "cross_entropy_none",
                                           "cross_entropy_ignore",
                                           "cross_entropy_ignore_sum",
                                           "cross_entropy_ignore_index3",
                                           "cross_entropy_smooth",
                                           "cross_entropy_smooth_sum",
                                           "cross_entropy_smooth_ignore",
                                           "cross_entropy_smooth_none",
                                           "cross_entropy_spatial",
                                           "mse_mean",
                                           "mse_sum",
                                           "mse_none",
                                           "nll_mean",
                                           "nll_sum",
                                           "nll_none",
                                           "nll_ignore",
                                           "bce_mean",
                                           "bce_weight_pos_weight_sum",
                                           "bce_pos_weight_none"};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

nn::Reduction reduction_of(const nlohmann::json& o) {
  const std::string r = o.at("reduction").get<std::string>();
  if (r == "none") return nn::Reduction::None;
  if (r == "sum") return nn::Reduction::Sum;
  REQUIRE(r == "mean");
  return nn::Reduction::Mean;
}

// Ember's results for one case: the output and the gradients the fixture records.
struct Outputs {
  Tensor y, gx, gw, gb;
};

void copy_param(Tensor& param, const Tensor& value) {
  NoGradGuard no_grad;
  REQUIRE(param.sizes() == value.sizes());
  param.copy_(value);
}

Outputs run_layer_case(const Fixture& f, const std::string& c, Device dev) {
  const auto in = [&](const char* k) { return f.get(c + "." + k).to(dev); };
  const nlohmann::json opts = nlohmann::json::parse(f.meta(c + ".options"));
  Tensor x = in("x");
  if (is_floating(x.dtype())) {
    x = x.detach().clone();
    x.requires_grad_();
  }
  Tensor w, b;  // the module's parameters, when it has some
  Tensor y;
  if (c == "linear") {
    const Tensor fw = in("w");
    nn::Linear m(fw.size(1), fw.size(0));
    m->to(dev, kFloat64);
    copy_param(m->weight, fw);
    copy_param(m->bias, in("b"));
    w = m->weight, b = m->bias, y = m(x);
  } else if (c == "relu") {
    y = nn::ReLU()(x);
  } else if (starts_with(c, "gelu_")) {
    nn::GELUOptions o;
    o.approximate(opts.at("approximate").get<std::string>());
    y = nn::GELU(o)(x);
  } else if (c == "sigmoid") {
    y = nn::Sigmoid()(x);
  } else if (c == "tanh") {
    y = nn::Tanh()(x);
  } else if (c == "layer_norm") {
    nn::LayerNormOptions o(Shape(opts.at("normalized_shape").get<std::vector<int64_t>>()));
    o.eps(opts.at("eps").get<double>());
    nn::LayerNorm m(o);
    m->to(dev, kFloat64);
    copy_param(m->weight, in("w"));
    copy_param(m->bias, in("b"));
    w = m->weight, b = m->bias, y = m(x);
  } else if (c == "embedding") {
    nn::Embedding m(opts.at("num_embeddings").get<int64_t>(),
                    opts.at("embedding_dim").get<int64_t>());
    m->to(dev, kFloat64);
    copy_param(m->weight, in("w"));
    w = m->weight, y = m(x);
  } else if (starts_with(c, "cross_entropy_")) {
    nn::CrossEntropyLossOptions o;
    o.reduction(reduction_of(opts));
    o.ignore_index(opts.at("ignore_index").get<int64_t>());
    o.label_smoothing(opts.at("label_smoothing").get<double>());
    y = nn::CrossEntropyLoss(o)(x, in("target"));
  } else if (starts_with(c, "mse_")) {
    y = nn::MSELoss(nn::MSELossOptions(reduction_of(opts)))(x, in("target"));
  } else if (starts_with(c, "nll_")) {
    nn::NLLLossOptions o;
    o.reduction(reduction_of(opts));
    o.ignore_index(opts.at("ignore_index").get<int64_t>());
    y = nn::NLLLoss(o)(x, in("target"));
  } else if (starts_with(c, "bce_")) {
    nn::BCEWithLogitsLossOptions o;
    o.reduction(reduction_of(opts));
    if (f.has(c + ".weight")) o.weight(in("weight"));
    if (f.has(c + ".pos_weight")) o.pos_weight(in("pos_weight"));
    y = nn::BCEWithLogitsLoss(o)(x, in("target"));
  } else {
    FAIL("no Ember reproduction of fixture case \"" << c << "\"");
  }
  y.backward(in("gy"));
  Outputs out;
  out.y = y;
  if (x.requires_grad()) out.gx = x.grad();
  if (w.defined()) out.gw = w.grad();
  if (b.defined()) out.gb = b.grad();
  return out;
}

void check_layers(Device dev) {
  const Fixture f = load_fixture("nn_layers.safetensors");
  std::set<std::string> cases;
  std::stringstream list(f.meta("cases"));
  for (std::string c; std::getline(list, c, ',');) cases.insert(c);
  CHECK(cases == kLayerCases);
  for (const std::string& c : cases) {
    INFO("case " << c << " on " << dev.str());
    const Outputs out = run_layer_case(f, c, dev);
    const std::pair<const char*, const Tensor*> results[] = {
        {"y", &out.y}, {"gx", &out.gx}, {"gw", &out.gw}, {"gb", &out.gb}};
    for (const auto& [key, got] : results) {
      const std::string name = c + "." + key;
      // Ember computes exactly what the fixture records: no more, no fewer gradients.
      CHECK(f.has(name) == got->defined());
      if (!f.has(name) || !got->defined()) continue;
      CHECK(got->dtype() == f.get(name).dtype());
      check_close(*got, f.get(name), 1e-10, 1e-10, name + " on " + dev.str());
    }
  }
}

}  // namespace

TEST_CASE("parity with PyTorch: MLP trained 20 steps by plain SGD (CPU)", "[nn][parity]") {
  check_mlp_run("mlp_sgd_plain.safetensors", kPlain, Device::cpu());
}

TEST_CASE("parity with PyTorch: MLP trained 20 steps by SGD with nesterov and weight decay (CPU)",
          "[nn][parity]") {
  check_mlp_run("mlp_sgd_momentum.safetensors", kMomentum, Device::cpu());
}

TEST_CASE("parity with PyTorch: layers and losses in float64 (CPU)", "[nn][parity]") {
  check_layers(Device::cpu());
}

TEST_CASE("parity with PyTorch: MLP trained 20 steps by plain SGD (CUDA)", "[nn][parity][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_mlp_run("mlp_sgd_plain.safetensors", kPlain, Device::cuda(0));
}

TEST_CASE("parity with PyTorch: MLP trained 20 steps by SGD with nesterov and weight decay (CUDA)",
          "[nn][parity][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_mlp_run("mlp_sgd_momentum.safetensors", kMomentum, Device::cuda(0));
}

TEST_CASE("parity with PyTorch: layers and losses in float64 (CUDA)", "[nn][parity][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_layers(Device::cuda(0));
}
