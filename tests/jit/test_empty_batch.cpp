// Empty extents through the compiled paths: a reduction or contraction over zero elements
// yields its identity (0 for a sum or a product with K = 0, NaN for a mean), exactly as eager,
// whatever memory the executable's buffers held before. The whole training step on an empty
// batch, in every mode and on both devices, leaves the loss, gradients, parameters and momentum
// buffers bit for bit where eager leaves them.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <catch2/catch.hpp>

#include "test_util.h"

using namespace ember;

namespace {

// Bit patterns of a float32 tensor (NaN compares equal to the same NaN, -0 differs from 0).
std::vector<uint32_t> bits_of(const Tensor& t) {
  const std::vector<float> v = t.cpu().to_vector<float>();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

void check_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": shape " << got.sizes().str() << ", expected " << want.sizes().str());
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<uint32_t> a = bits_of(got), b = bits_of(want);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && bad++ == 0) first = i;
  INFO(bad << " elements differ, the first at " << first);
  CHECK(bad == 0);
}

const char* mode_name(jit::Mode m) {
  switch (m) {
    case jit::Mode::Default:
      return "Default";
    case jit::Mode::ReduceOverhead:
      return "ReduceOverhead";
    case jit::Mode::MaxAutotune:
      return "MaxAutotune";
  }
  return "?";
}

// f(x) = (x * 2).relu() reduced over dim 0, compiled with `opts`, called on batches of `sizes`
// rows (the non-empty ones leave their numbers in the memory the empty ones get), each result
// compared bit for bit with eager.
void check_reduction_over_batches(Device dev, jit::Options opts, const std::vector<int64_t>& sizes,
                                  bool mean) {
  auto body = [mean](const Tensor& x) {
    const Tensor r = (x * 2).relu();
    return mean ? r.mean({0}) : r.sum({0});
  };
  auto f = jit::compile(body, opts);
  manual_seed(11);
  int empty_replays = 0;
  for (int round = 0; round < 4; ++round)
    for (int64_t n : sizes) {
      const Tensor x = randn({n, 6}, dev);
      const Tensor want = body(x);
      const int replays = f.stats().replays;
      const Tensor got = f(x);
      if (n == 0) empty_replays += f.stats().replays - replays;
      check_same_bits(got, want,
                      std::string(mean ? "mean" : "sum") + " over " + std::to_string(n) + " rows");
      if (n == 0) {
        // Eager's own answer is the identity: 0 for the sum, NaN for the mean.
        for (float v : want.cpu().to_vector<float>()) CHECK((mean ? std::isnan(v) : v == 0.0f));
      }
    }
  // The empty batch was served by an executable, not only traced.
  CHECK(empty_replays >= 2);
}

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(784, 512));
    fc2 = register_module("fc2", nn::Linear(512, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(Net);

std::vector<Tensor> parameters_on(Net& net, Device dev) {
  net->to(dev);
  return net->parameters();
}

struct Trainer {
  Net net;
  optim::SGD opt;
  nn::CrossEntropyLoss crit;
  explicit Trainer(Device dev)
      : opt(parameters_on(net, dev), optim::SGDOptions(0.05).momentum(0.9)) {}
  Tensor step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  }
};

// Makes `dst` hold `src`'s parameters and optimizer state, in place (no new memory, so a
// compiled step over `dst` keeps its executables).
void copy_state(Trainer& dst, Trainer& src) {
  NoGradGuard g;
  auto pd = dst.net->parameters(), ps = src.net->parameters();
  for (size_t i = 0; i < pd.size(); ++i) pd[i].copy_(ps[i]);
  const optim::OptimizerState sd = dst.opt.state_dict(), ss = src.opt.state_dict();
  REQUIRE(sd.tensors.size() == ss.tensors.size());
  for (const auto& [key, t] : ss.tensors) {
    INFO("optimizer state " << key);
    REQUIRE(sd.tensors.count(key) == 1);
    Tensor d = sd.tensors.at(key);
    d.copy_(t);
  }
}

void check_same_state(Trainer& got, Trainer& want, const std::string& what) {
  auto pg = got.net->parameters(), pw = want.net->parameters();
  for (size_t i = 0; i < pw.size(); ++i) {
    check_same_bits(pg[i], pw[i], what + ": parameter " + std::to_string(i));
    INFO(what << ": parameter " << i << " has a gradient");
    REQUIRE(pw[i].grad().defined());
    REQUIRE(pg[i].grad().defined());
    check_same_bits(pg[i].grad(), pw[i].grad(), what + ": gradient " + std::to_string(i));
  }
  const optim::OptimizerState sg = got.opt.state_dict(), sw = want.opt.state_dict();
  for (const auto& [key, t] : sw.tensors) {
    INFO(what << ": optimizer state " << key);
    REQUIRE(sg.tensors.count(key) == 1);
    if (t.dtype() == kFloat32) check_same_bits(sg.tensors.at(key), t, what + ": " + key);
  }
}

// A few ordinary steps, then empty batches ([0, 784], [0] targets) through the compiled step
// (traced, then replayed), each from exactly eager's state, then an ordinary step again.
void check_empty_batch_step(Device dev, jit::Options opts) {
  const std::string what = std::string(mode_name(opts.mode)) +
                           (!opts.dynamic   ? ", dynamic auto"
                            : *opts.dynamic ? ", dynamic"
                                            : ", specialized") +
                           " on " + dev.str();
  INFO(what);
  manual_seed(21);
  Trainer eager(dev);
  manual_seed(21);
  Trainer comp(dev);
  auto compiled =
      jit::compile([&](const Tensor& x, const Tensor& y) { return comp.step(x, y); }, opts);
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({16, 784}, dev), y = randint(0, 10, {16}, dev);
    compiled(x, y);
    eager.step(x, y);
  }
  const int replays_before = compiled.stats().replays;
  for (int rep = 0; rep < 4; ++rep) {
    copy_state(comp, eager);  // compiled and eager may differ in the last bits by now
    const Tensor x = randn({0, 784}, dev), y = randint(0, 10, {0}, dev);
    const Tensor got = compiled(x, y);
    const Tensor want = eager.step(x, y);
    const std::string call = what + ", empty batch call " + std::to_string(rep + 1);
    check_same_bits(got, want, call + ": loss");
    check_same_state(comp, eager, call);
    // What eager does, so the comparison is not between two wrong answers: the mean over no
    // targets is NaN (as in PyTorch) and every gradient is exactly zero.
    CHECK(std::isnan(want.item<float>()));
    for (const Tensor& p : eager.net->parameters())
      for (float v : p.grad().cpu().to_vector<float>()) REQUIRE(v == 0.0f);
  }
  // Specialized, the empty batch itself runs compiled from its third call on. (With dynamic
  // shapes its traces do not agree yet, so it runs eagerly; the comparison above holds anyway.)
  INFO("stats: traces " << compiled.stats().traces << ", replays " << compiled.stats().replays
                        << ", eager calls " << compiled.stats().eager_calls);
  if (opts.dynamic == false) CHECK(compiled.stats().replays - replays_before >= 2);
  // And training goes on as before.
  copy_state(comp, eager);
  const Tensor x = randn({16, 784}, dev), y = randint(0, 10, {16}, dev);
  const float got = compiled(x, y).item<float>(), want = eager.step(x, y).item<float>();
  CHECK(std::isfinite(got));
  CHECK(std::abs(got - want) <= 1e-5f * std::abs(want));
}

Tensor mm_plus_one(const Tensor& a, const Tensor& b) { return relu(mm(a, b)) + 1; }

// [M, 0] x [0, N] is M x N zeros: eager, compiled plainly and with a pointwise tail, after calls
// with K > 0 left numbers in the memory.
void check_mm_empty_k(Device dev) {
  manual_seed(31);
  auto plain = jit::compile([](const Tensor& a, const Tensor& b) { return mm(a, b); },
                            {.dynamic = false, .recompile_limit = 16});
  auto tail = jit::compile(&mm_plus_one, {.dynamic = false, .recompile_limit = 16});
  for (int64_t k : {5, 0, 7, 0, 0}) {
    INFO("K = " << k << " on " << dev.str());
    const Tensor a = randn({3, k}, dev), b = randn({k, 4}, dev);
    const Tensor want = mm(a, b);
    check_same_bits(plain(a, b), want, "compiled mm");
    check_same_bits(tail(a, b), mm_plus_one(a, b), "compiled relu(mm) + 1");
    if (k == 0) {
      for (float v : want.cpu().to_vector<float>()) CHECK(v == 0.0f);
      for (float v : mm_plus_one(a, b).cpu().to_vector<float>()) CHECK(v == 1.0f);
    }
  }
  // A batched product and one whose operands are transposed views, K = 0.
  const Tensor a = randn({0, 3}, dev), b = randn({4, 0}, dev);
  for (float v : mm(a.t(), b.t()).cpu().to_vector<float>()) CHECK(v == 0.0f);
  for (float v : bmm(randn({2, 3, 0}, dev), randn({2, 0, 5}, dev)).cpu().to_vector<float>())
    CHECK(v == 0.0f);
  CHECK(plain.stats().replays > 0);
}

}  // namespace

TEST_CASE("jit: a compiled sum or mean over an empty batch gives eager's identity", "[jit]") {
  for (bool mean : {false, true}) {
    INFO((mean ? "mean" : "sum"));
    check_reduction_over_batches(Device::cpu(), {.dynamic = false}, {0}, mean);
    check_reduction_over_batches(Device::cpu(), {.dynamic = true}, {8, 16, 0, 8, 0}, mean);
    check_reduction_over_batches(Device::cpu(), {}, {8, 16, 0, 16, 0}, mean);
  }
}

TEST_CASE("jit: a reduction over an empty inner dim gives eager's identity", "[jit]") {
  // Rows survive, the reduced dim is empty: [n, 0] -> [n].
  auto body = [](const Tensor& x) { return (x * 2).relu().sum({1}) + (x - 1).mean({1}); };
  auto f = jit::compile(body, {.dynamic = false});
  for (int rep = 0; rep < 4; ++rep) {
    const Tensor x = randn({5, 0});
    check_same_bits(f(x), body(x), "sum + mean over dim 1 of [5, 0]");
    for (float v : body(x).to_vector<float>()) CHECK(std::isnan(v));
  }
  // Whichever path serves it (a [5, 0] pointwise result breaks the trace today, so eager).
}

TEST_CASE("jit: mm with K = 0 gives zeros eagerly and compiled", "[jit]") {
  check_mm_empty_k(Device::cpu());
}

TEST_CASE("jit: a compiled step on an empty batch leaves loss and state exactly as eager",
          "[jit]") {
  for (jit::Mode mode : {jit::Mode::Default, jit::Mode::ReduceOverhead, jit::Mode::MaxAutotune}) {
    check_empty_batch_step(Device::cpu(), {.mode = mode, .dynamic = false});
    check_empty_batch_step(Device::cpu(), {.mode = mode});
    check_empty_batch_step(Device::cpu(), {.mode = mode, .dynamic = true});
  }
}

TEST_CASE("jit: CUDA sum or mean over an empty batch gives eager's identity", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  for (bool mean : {false, true}) {
    INFO((mean ? "mean" : "sum"));
    check_reduction_over_batches(dev, {.dynamic = false}, {0}, mean);
    check_reduction_over_batches(dev, {.dynamic = true}, {8, 16, 0, 8, 0}, mean);
    check_reduction_over_batches(dev, {.mode = jit::Mode::ReduceOverhead, .dynamic = true},
                                 {8, 16, 0, 8, 0}, mean);
  }
}

TEST_CASE("jit: CUDA mm with K = 0 gives zeros eagerly and compiled", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_mm_empty_k(Device::cuda(0));
}

TEST_CASE("jit: a compiled CUDA step on an empty batch leaves loss and state exactly as eager",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (jit::Mode mode : {jit::Mode::Default, jit::Mode::ReduceOverhead, jit::Mode::MaxAutotune}) {
    check_empty_batch_step(Device::cuda(0), {.mode = mode, .dynamic = false});
    check_empty_batch_step(Device::cuda(0), {.mode = mode});
    check_empty_batch_step(Device::cuda(0), {.mode = mode, .dynamic = true});
  }
}
