// Dynamic shapes: one executable across batch sizes, compared with eager on fresh inputs.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "jit/executor.h"
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

// Trains two copies of Net (SGD with momentum) on the same batches, one eagerly and one compiled
// with `opts`, over `rounds` passes through `sizes`, checking every loss and the final weights
// against eager. `after` sees each step's batch size and the compiled function's stats. Returns
// the stats at the end.
jit::CompileStats train_both(
    Device dev, jit::Options opts, const std::vector<int64_t>& sizes, int rounds, uint64_t seed,
    const std::function<void(int64_t, const jit::CompileStats&)>& after = nullptr) {
  manual_seed(seed);
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
  for (int round = 0; round < rounds; ++round)
    for (int64_t n : sizes) {
      const Tensor x = randn({n, 12}, dev), y = randint(0, 4, {n}, dev);
      const Tensor got = compiled(x, y);
      const Tensor want = step(b, ob, cb, x, y);
      INFO("round " << round << ", batch " << n);
      CHECK(max_rel(got.cpu(), want.cpu()) < 1e-5);
      if (after) after(n, compiled.stats());
    }
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(max_rel(pa[i].cpu(), pb[i].cpu()) < 1e-4);
  return compiled.stats();
}

// Batch sizes that grow and shrink, so an executable runs again after another one grew the
// arenas they share (jit/executor.h, ArenaPool).
const std::vector<int64_t> kGrowShrink = {16, 64, 8, 64, 128, 16, 8, 128, 32, 200, 16};

}  // namespace

TEST_CASE("jit: dynamic=true trains with momentum across batch sizes 1..512 like eager", "[jit]") {
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 512; n += (n < 16 ? 1 : 37)) sizes.push_back(n);
  int traces_after_generalizing = -1;
  const jit::CompileStats st = train_both(Device::cpu(), {.dynamic = true}, sizes, 1, 3,
                                          [&](int64_t n, const jit::CompileStats& s) {
                                            if (n == 4) traces_after_generalizing = s.traces;
                                          });
  // Sizes 1..3 traced (state creation, then two sizes to generalize from); none after that.
  CHECK(st.traces == traces_after_generalizing);
  CHECK(st.executables == 1);
  CHECK(st.replays > 20);
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

TEST_CASE("jit: executables of one function share their arenas, growing and shrinking", "[jit]") {
  // dynamic=true: one template, an executable per batch size, all in one set of arenas.
  const jit::CompileStats dyn = train_both(Device::cpu(), {.dynamic = true}, kGrowShrink, 3, 8);
  CHECK(dyn.replays > 20);
  // Specialized: an executable per signature (traced three times each), the same arenas.
  const jit::CompileStats spec =
      train_both(Device::cpu(), {.dynamic = false, .recompile_limit = 16}, kGrowShrink, 3, 8);
  CHECK(spec.executables >= 4);
  CHECK(spec.replays > 10);
}

TEST_CASE("jit: CUDA graphs are captured again when a shared arena grows", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const jit::CompileStats st = train_both(
      Device::cuda(0), {.mode = jit::Mode::ReduceOverhead, .dynamic = true}, kGrowShrink, 3, 8);
  CHECK(st.graph_replays > 10);
}

TEST_CASE("jit: ArenaPool hands every executable the same storage and grows it in place", "[jit]") {
  jit::ArenaPool pool;
  const Device cpu = Device::cpu();
  const StoragePtr a = pool.storage(0, cpu), b = pool.storage(0, cpu), c = pool.storage(1, cpu);
  CHECK(a.get() == b.get());  // one Storage per (arena, device), shared by the slots of all
  CHECK(a.get() != c.get());
  CHECK(a->nbytes == 0);
  CHECK(pool.generation() == 0);
  pool.reserve(0, cpu, 1000);
  CHECK(a->nbytes == 1000);
  REQUIRE(a->data != nullptr);
  const uint64_t g1 = pool.generation();
  CHECK(g1 > 0);
  static_cast<char*>(a->data)[999] = 7;  // the whole arena is usable
  pool.reserve(0, cpu, 600);             // smaller: nothing moves
  CHECK(a->nbytes == 1000);
  CHECK(pool.generation() == g1);
  pool.reserve(0, cpu, 5000);  // larger: new memory in the same Storage object
  CHECK(a->nbytes == 5000);
  CHECK(b->nbytes == 5000);
  CHECK(pool.generation() > g1);
  CHECK(c->nbytes == 0);  // another arena is untouched
}
