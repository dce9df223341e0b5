// Compiled functions and threads: calls of one compiled function from several threads are
// serialised (each gets its own correct result), a call from inside the function's own body runs
// the body directly, and another thread drawing from the default generator while a step is
// traced does not break the trace. Tagged [threads]: the `tsan` preset runs these.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "test_util.h"

using namespace ember;

namespace {

// No Catch2 assertion in here: the worker threads call it, and Catch2 is not thread-safe.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

}  // namespace

TEST_CASE("jit threads: one compiled function called from four threads", "[jit][threads]") {
  manual_seed(1);
  const Tensor w = randn({8, 5});
  auto f = jit::compile([&](const Tensor& x) { return relu(mm(x, w)) * 2 + 1; });
  constexpr int kThreads = 4, kCalls = 60;
  // Inputs made up front: the threads only call the compiled function.
  std::vector<std::vector<Tensor>> inputs(kThreads);
  for (auto& v : inputs)
    for (int i = 0; i < kCalls; ++i) v.push_back(randn({6, 8}));
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (const Tensor& x : inputs[t]) {
        try {
          const Tensor got = f(x);
          if (!got.defined() || max_abs_diff(got, relu(mm(x, w)) * 2 + 1) != 0) ++wrong;
        } catch (const Error&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0);
  CHECK(errors.load() == 0);
  const jit::CompileStats& s = f.stats();
  CHECK(s.traces + s.replays + s.eager_calls == kThreads * kCalls);
  CHECK(s.executables == 1);
}

TEST_CASE("jit threads: a training step called from two threads stays consistent",
          "[jit][threads]") {
  manual_seed(2);
  nn::Sequential net(nn::Linear(10, 16), nn::ReLU(), nn::Linear(16, 3));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss crit;
  auto step = jit::compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss.detach();
  });
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 80; ++i) {
    xs.push_back(randn({8, 10}));
    ys.push_back(randint(0, 3, {8}));
  }
  std::atomic<int> bad{0};
  auto worker = [&](int first) {
    for (int i = first; i < 80; i += 2)
      if (!std::isfinite(step(xs[i], ys[i]).item<float>())) ++bad;
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(bad.load() == 0);
  CHECK(step.stats().eager_calls == 0);
  CHECK(step.stats().traces + step.stats().replays == 80);
  // Serialised calls are 80 ordinary steps: the step count says every update ran once.
  CHECK(opt.steps(0) == 80);
}

TEST_CASE("jit threads: a recursive call runs the body and returns its result", "[jit]") {
  manual_seed(3);
  const Tensor x = randn({4});
  std::function<Tensor(const Tensor&, int)>* self = nullptr;
  auto f = jit::compile([&](const Tensor& t, int depth) -> Tensor {
    if (depth == 0) return t * 2;
    return (*self)(t, depth - 1) + 1;
  });
  std::function<Tensor(const Tensor&, int)> call = [&](const Tensor& t, int d) { return f(t, d); };
  self = &call;
  for (int rep = 0; rep < 5; ++rep) {
    const Tensor got = f(x, 3);
    REQUIRE(got.defined());
    CHECK(max_abs_diff(got, x * 2 + 3) < 1e-6);
  }
  // The same after the signature went eager (a host read is a graph break).
  auto g = jit::compile([&](const Tensor& t, int depth) -> Tensor {
    if (depth == 0) return t * (t.sum().item<float>() > 0 ? 1.0 : 1.0);
    return (*self)(t, depth - 1) * 2;
  });
  call = [&](const Tensor& t, int d) { return g(t, d); };
  for (int rep = 0; rep < 4; ++rep) {
    const Tensor got = g(x, 2);
    REQUIRE(got.defined());
    CHECK(max_abs_diff(got, x * 4) < 1e-6);
  }
  CHECK(g.stats().graph_breaks == 1);
}

TEST_CASE("jit threads: another thread drawing random numbers does not break a trace",
          "[jit][threads]") {
  manual_seed(4);
  nn::Sequential net(nn::Linear(10, 32), nn::ReLU(), nn::Dropout(0.3), nn::Linear(32, 3));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05));
  nn::CrossEntropyLoss crit;
  auto step = jit::compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss.detach();
  });
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 12; ++i) {
    xs.push_back(randn({16, 10}));
    ys.push_back(randint(0, 3, {16}));
  }
  std::atomic<bool> stop{false};
  std::thread noise([&] {
    while (!stop.load()) (void)randn({64});
  });
  for (int i = 0; i < 12; ++i) CHECK(std::isfinite(step(xs[i], ys[i]).item<float>()));
  stop = true;
  noise.join();
  CHECK(step.stats().graph_breaks == 0);
  CHECK(step.stats().executables == 1);
  CHECK(step.stats().traces <= 3);
  CHECK(step.stats().replays == 12 - step.stats().traces);
}
