// Gradients a compiled function reads rather than creates: gradient accumulation over
// micro-batches (opt.step() every k calls, outside the compiled function), a .grad slot the user
// replaces or clears between calls. Each loop runs eagerly and compiled from the same weights and
// must agree bit for bit, with no eager calls.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

using namespace ember;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.nbytes())) == 0;
}

std::string describe(const jit::CompileStats& s) {
  return "traces " + std::to_string(s.traces) + ", executables " + std::to_string(s.executables) +
         ", recompiles " + std::to_string(s.recompiles) + ", replays " + std::to_string(s.replays) +
         ", eager calls " + std::to_string(s.eager_calls);
}

struct Batches {
  std::vector<Tensor> x, y;
};

Batches make_batches(Device dev, int n, int64_t b) {
  manual_seed(11);
  Batches r;
  for (int i = 0; i < n; ++i) {
    r.x.push_back(randn({b, 12}, dev));
    r.y.push_back(randint(0, 4, {b}, dev));
  }
  return r;
}

struct Result {
  std::vector<float> losses;
  std::vector<Tensor> params, grads;
  jit::CompileStats stats;
};

// `between(i, net, opt)` runs after call i (eager code the user writes around the step).
template <class Between>
Result accumulate(Device dev, const Batches& b, const jit::Options* opts, Between between) {
  manual_seed(3);
  nn::Sequential net(nn::Linear(12, 24), nn::GELU(), nn::Linear(24, 4));
  net->to(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss crit;
  auto micro = [&](const Tensor& x, const Tensor& y) {
    Tensor loss = crit(net(x), y) / 4.0;
    loss.backward();
    return loss;  // still requires grad: backward ran on it
  };
  auto compiled = jit::compile(micro, opts ? *opts : jit::Options{});
  Result r;
  for (size_t i = 0; i < b.x.size(); ++i) {
    const Tensor loss = opts ? compiled(b.x[i], b.y[i]) : micro(b.x[i], b.y[i]);
    r.losses.push_back(loss.item<float>());
    between(static_cast<int>(i), net, opt);
  }
  for (const Tensor& p : net->parameters()) {
    r.params.push_back(p.detach().clone());
    r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  }
  r.stats = compiled.stats();
  return r;
}

template <class Between>
jit::CompileStats accumulate_both(Device dev, jit::Options opts, Between between) {
  const Batches b = make_batches(dev, 24, 16);
  const Result eager = accumulate(dev, b, nullptr, between);
  const Result comp = accumulate(dev, b, &opts, between);
  INFO(describe(comp.stats));
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("call " << i << ": compiled " << comp.losses[i] << ", eager " << eager.losses[i]);
    REQUIRE(std::memcmp(&comp.losses[i], &eager.losses[i], sizeof(float)) == 0);
  }
  for (size_t i = 0; i < eager.params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(bitwise_equal(comp.params[i], eager.params[i]));
    REQUIRE(comp.grads[i].defined() == eager.grads[i].defined());
    if (eager.grads[i].defined()) CHECK(bitwise_equal(comp.grads[i], eager.grads[i]));
  }
  CHECK(eager.losses.back() != eager.losses.front());
  CHECK(comp.stats.eager_calls == 0);
  CHECK(comp.stats.graph_breaks == 0);
  return comp.stats;
}

void accumulation_cases(Device dev, jit::Options opts) {
  SECTION("step and zero_grad(set_to_none) every 4 micro-batches") {
    const jit::CompileStats s = accumulate_both(dev, opts, [](int i, auto&, optim::SGD& opt) {
      if ((i + 1) % 4 == 0) {
        opt.step();
        opt.zero_grad(true);
      }
    });
    // One executable accumulates into existing gradients, one creates them.
    CHECK(s.executables == 2);
    CHECK(s.replays >= 16);
  }
  SECTION("step and zero_grad(set_to_none=false) every 4 micro-batches") {
    const jit::CompileStats s = accumulate_both(dev, opts, [](int i, auto&, optim::SGD& opt) {
      if ((i + 1) % 4 == 0) {
        opt.step();
        opt.zero_grad(false);
      }
    });
    CHECK(s.executables <= 2);
    CHECK(s.replays >= 18);
  }
  SECTION("the user replaces every gradient between calls") {
    const jit::CompileStats s = accumulate_both(dev, opts, [](int i, nn::Sequential& net, auto&) {
      if (i % 5 == 4)
        for (Tensor& p : net->parameters()) p.set_grad(full(p.sizes(), 0.25, p.device()));
    });
    // The first call creates the gradients; every later one accumulates into whatever
    // tensor the slot holds then, so one executable serves them all.
    CHECK(s.executables == 1);
    CHECK(s.replays >= 18);
  }
}

}  // namespace

TEST_CASE("jit state: gradient accumulation over micro-batches equals eager", "[jit]") {
  accumulation_cases(Device::cpu(), {});
}

TEST_CASE("jit state: gradient accumulation on CUDA equals eager in every mode", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (jit::Mode mode : {jit::Mode::Default, jit::Mode::ReduceOverhead}) {
    INFO("mode " << static_cast<int>(mode));
    accumulation_cases(Device::cuda(0), {.mode = mode});
  }
}

TEST_CASE("jit state: a gradient the user sets between replays of a full step is read live",
          "[jit]") {
  // A step without zero_grad accumulates into whatever .grad holds; the user swaps it.
  manual_seed(8);
  const Tensor w0 = randn({6, 3});
  auto run = [&](bool compiled) {
    Tensor w = w0.clone().requires_grad_();
    optim::SGD opt({w}, optim::SGDOptions(0.1));
    auto step = [&](const Tensor& x) {
      const Tensor h = mm(x, w);
      Tensor loss = (h * h).mean();
      loss.backward();
      opt.step();
      return loss.detach();
    };
    auto c = jit::compile(step);
    std::vector<float> losses;
    manual_seed(9);
    for (int i = 0; i < 10; ++i) {
      const Tensor x = randn({5, 6});
      losses.push_back((compiled ? c(x) : step(x)).item<float>());
      if (i == 5) w.set_grad(zeros({6, 3}));
      if (i == 7) w.set_grad(Tensor());
    }
    return std::pair{losses, w.detach().clone()};
  };
  const auto [le, we] = run(false);
  const auto [lc, wc] = run(true);
  for (size_t i = 0; i < le.size(); ++i) {
    INFO("call " << i);
    CHECK(std::memcmp(&lc[i], &le[i], sizeof(float)) == 0);
  }
  CHECK(bitwise_equal(wc, we));
}
