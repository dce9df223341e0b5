// Dynamic shapes: one executable across batch sizes, compared with eager on fresh inputs.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <cmath>

#include "test_util.h"

using namespace ember;

namespace {

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(12, 16));
    fc2 = register_module("fc2", nn::Linear(16, 4));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(Net);

double max_rel(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i)
    m = std::max(m, std::fabs(x[i] - y[i]) / (1e-6 + std::fabs(y[i])));
  return m;
}

}  // namespace

TEST_CASE("jit: dynamic=true trains with momentum across batch sizes 1..512 like eager", "[jit]") {
  manual_seed(3);
  Net a, b;
  {
    NoGradGuard g;
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
  }
  optim::SGD oa(a->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD ob(b->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss ca, cb;
  auto step = [](Net& m, optim::SGD& o, nn::CrossEntropyLoss& c, const Tensor& x, const Tensor& y) {
    o.zero_grad();
    Tensor loss = c(m(x), y);
    loss.backward();
    o.step();
    return loss;
  };
  auto compiled = jit::compile(
      [&](const Tensor& x, const Tensor& y) { return step(a, oa, ca, x, y); }, {.dynamic = true});
  int traces_after_generalizing = -1;
  for (int64_t n = 1; n <= 512; n += (n < 16 ? 1 : 37)) {
    Tensor x = randn({n, 12}), y = randint(0, 4, {n});
    const Tensor got = compiled(x, y);
    const Tensor want = step(b, ob, cb, x, y);
    INFO("batch " << n);
    CHECK(max_rel(got, want) < 1e-5);
    if (n == 4) traces_after_generalizing = compiled.stats().traces;
  }
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(max_rel(pa[i], pb[i]) < 1e-4);
  // Sizes 1..3 traced (state creation, then two sizes to generalize from); none after that.
  CHECK(compiled.stats().traces == traces_after_generalizing);
  CHECK(compiled.stats().executables == 1);
  CHECK(compiled.stats().replays > 20);
}

TEST_CASE("jit: dynamic auto specializes, then marks a changed dim symbolic", "[jit]") {
  manual_seed(4);
  Tensor w = randn({8, 5});
  auto f = jit::compile([&](const Tensor& x) { return relu(mm(x, w)) * 2 + 1; });
  for (int rep = 0; rep < 3; ++rep) f(randn({6, 8}));  // specialized at 6
  const int traces = f.stats().traces;
  for (int64_t n : {7, 9, 10, 11, 30}) {
    Tensor x = randn({n, 8});
    CHECK(max_rel(f(x), relu(mm(x, w)) * 2 + 1) < 1e-6);
  }
  // One trace at the new size generalizes against the specialized one; later sizes replay.
  CHECK(f.stats().traces == traces + 1);
  CHECK(f.stats().replays >= 5);
}

namespace {

// Trains two copies of Net on the same batches, one eagerly and one compiled with `opts`, over
// batch sizes that grow and shrink, so an executable runs again after another one grew the
// arenas they share (jit/executor.h, ArenaPool). Returns the compiled function's stats.
jit::CompileStats train_cycle(Device dev, jit::Options opts, const std::vector<int64_t>& sizes) {
  manual_seed(8);
  Net a, b;
  a->to(dev);
  b->to(dev);
  {
    NoGradGuard g;
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
  }
  optim::SGD oa(a->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD ob(b->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss ca, cb;
  auto step = [](Net& m, optim::SGD& o, nn::CrossEntropyLoss& c, const Tensor& x, const Tensor& y) {
    o.zero_grad();
    Tensor loss = c(m(x), y);
    loss.backward();
    o.step();
    return loss;
  };
  auto compiled =
      jit::compile([&](const Tensor& x, const Tensor& y) { return step(a, oa, ca, x, y); }, opts);
  for (int round = 0; round < 3; ++round)
    for (int64_t n : sizes) {
      const Tensor x = randn({n, 12}, dev), y = randint(0, 4, {n}, dev);
      const Tensor got = compiled(x, y);
      const Tensor want = step(b, ob, cb, x, y);
      INFO("round " << round << ", batch " << n);
      CHECK(max_rel(got.cpu(), want.cpu()) < 1e-5);
    }
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(max_rel(pa[i].cpu(), pb[i].cpu()) < 1e-4);
  return compiled.stats();
}

const std::vector<int64_t> kGrowShrink = {16, 64, 8, 64, 128, 16, 8, 128, 32, 200, 16};

}  // namespace

TEST_CASE("jit: executables of one function share their arenas, growing and shrinking", "[jit]") {
  // dynamic=true: one template, an executable per batch size, all in one set of arenas.
  const jit::CompileStats dyn = train_cycle(Device::cpu(), {.dynamic = true}, kGrowShrink);
  CHECK(dyn.replays > 20);
  // Specialized: an executable per signature (traced three times each), the same arenas.
  const jit::CompileStats spec =
      train_cycle(Device::cpu(), {.dynamic = false, .recompile_limit = 16}, kGrowShrink);
  CHECK(spec.executables >= 4);
  CHECK(spec.replays > 10);
}

TEST_CASE("jit: CUDA graphs are captured again when a shared arena grows", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const jit::CompileStats st = train_cycle(
      Device::cuda(0), {.mode = jit::Mode::ReduceOverhead, .dynamic = true}, kGrowShrink);
  CHECK(st.graph_replays > 10);
}
