// CPU execution of fused groups chunk by chunk, checked against eager on shapes that span many
// chunks (rows reduced across chunks, rows longer than a chunk), and jit::explain's report.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <cmath>

#include "jit/cpu_group.h"
#include "test_util.h"

using namespace ember;

namespace {

double max_err(const Tensor& got, const Tensor& want) {
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  REQUIRE(g.size() == w.size());
  double m = 0;
  for (size_t i = 0; i < g.size(); ++i)
    m = std::max(m, std::fabs(g[i] - w[i]) / (1e-6 + std::fabs(w[i])));
  return m;
}

// A pointwise chain feeding reductions over rows (dim 0, across chunks) and within rows.
std::vector<Tensor> program(const Tensor& x, const Tensor& b) {
  Tensor h = relu(x * 0.5 + b);
  Tensor g = where(gt(h, 0.1), tanh(h), h * 2.0);
  return {g, sum(g, {0}), mean(g * g, {0}, true), amax(g - 1.0, {0}), sum(exp(-g), {1})};
}

}  // namespace

TEST_CASE("jit: CPU fused groups over many chunks match eager", "[jit]") {
  manual_seed(11);
  const int64_t rows_for_many_chunks = 5 * jit::CpuGroupRunner::kChunkElems / 7 + 3;
  for (const Shape& shape : {Shape{rows_for_many_chunks, 7}, Shape{3, 40000}, Shape{1, 5}}) {
    INFO("shape " << shape);
    auto f = jit::compile([](const Tensor& x, const Tensor& b) { return program(x, b); });
    for (int call = 0; call < 4; ++call) {
      Tensor x = randn(shape), b = randn({shape[1]});
      const std::vector<Tensor> got = f(x, b);
      const std::vector<Tensor> want = program(x, b);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("call " << call << " output " << i);
        CHECK(max_err(got[i], want[i]) < 1e-5);
      }
    }
    CHECK(f.stats().replays >= 2);
  }
}

TEST_CASE("jit: explain reports the graph, passes, fused groups and the arena", "[jit]") {
  manual_seed(12);
  Tensor w = randn({16, 8}), bias = randn({8});
  auto fn = [&](const Tensor& x) { return sum(relu(mm(x, w) + bias) * 3.0, {1}); };
  Tensor x = randn({32, 16});
  const jit::Explanation ex = jit::explain(fn, x);
  CHECK(ex.captured);
  CHECK(ex.breaks.empty());
  CHECK(ex.nodes_traced >= 5);
  CHECK(ex.nodes_optimized <= ex.nodes_traced);
  CHECK(ex.passes.size() == 14);  // optimize()'s pipeline, each reported
  CHECK(ex.traced_graph.find("mm(") != std::string::npos);
  CHECK(ex.optimized_graph.find("[group") != std::string::npos);
  CHECK_FALSE(ex.groups.empty());
  CHECK(ex.arena_bytes > 0);
  CHECK(ex.dot.find("digraph") != std::string::npos);
  CHECK(ex.str().find("fused groups") != std::string::npos);

  // A function that reads a value on the host is reported as not captured, with the reason.
  auto reads = [&](const Tensor& y) { return y * y.sum().item<float>(); };
  const jit::Explanation broken = jit::explain(reads, x);
  CHECK_FALSE(broken.captured);
  REQUIRE(broken.breaks.size() == 1);
  CHECK(broken.breaks[0].find("item") != std::string::npos);
  CHECK(broken.breaks[0].find("test_cpu_fusion.cpp") != std::string::npos);
}

TEST_CASE("jit: train()/eval() and optimizer structure changes retrace", "[jit]") {
  manual_seed(13);
  nn::Sequential model(nn::Linear(6, 8), nn::Dropout(0.5), nn::Linear(8, 3));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  auto fwd = [&](const Tensor& x) {
    NoGradGuard no_grad;
    return model->forward(x);
  };
  auto f = jit::compile(fwd);
  Tensor x = randn({5, 6});
  for (int i = 0; i < 4; ++i) f(x);  // compiled in train mode (dropout active)
  const int traces = f.stats().traces;
  model->eval();
  // In eval mode dropout is the identity: the compiled function must agree with eager exactly.
  for (int i = 0; i < 4; ++i) CHECK(max_err(f(x), fwd(x)) == 0);
  CHECK(f.stats().traces > traces);
  CHECK(f.stats().recompiles >= 1);

  // Turning momentum on changes which tensors the update touches: the step must retrace.
  nn::CrossEntropyLoss crit;
  Tensor y = randint(0, 3, {5});
  auto step = jit::compile([&](const Tensor& in, const Tensor& t) {
    opt.zero_grad();
    Tensor loss = crit(model->forward(in), t);
    loss.backward();
    opt.step();
    return loss;
  });
  for (int i = 0; i < 5; ++i) step(x, y);
  const int before = step.stats().traces;
  opt.set_momentum(0, 0.9);
  for (int i = 0; i < 5; ++i) step(x, y);
  CHECK(step.stats().traces > before);
  CHECK(opt.momentum_buffer(0, 0).defined());
}

TEST_CASE("jit: a transposed product's copy stays on the CPU, so replays keep eager's bits",
          "[jit]") {
  manual_seed(14);
  Tensor a = randn({9, 5}), b = randn({5, 7});
  auto fn = [&](const Tensor& x) { return (mm(x, b).t()).contiguous() * 1.0; };
  const jit::Explanation ex = jit::explain(fn, a);
  REQUIRE(ex.captured);
  CHECK(ex.traced_graph.find("cast(") != std::string::npos);
  // Folding it into mm(b^T, x^T), a [7, 9] product, would make Eigen round differently from
  // eager; the copy itself may go (the multiply reads the transposed view).
  CHECK(ex.optimized_graph.find("mm(") != std::string::npos);
  CHECK(ex.optimized_graph.find("float32[7,9]  [group") == std::string::npos);
  CHECK(ex.optimized_graph.find("mm(%0, %1) : float32[9,7]") != std::string::npos);
  auto f = jit::compile(fn);
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({64, 5});
    CHECK(max_err(f(x), fn(x)) == 0);
  }
}

TEST_CASE("jit: on CUDA a transposed product's copy becomes one GEMM with transposed operands",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(14);
  const Device dev = Device::cuda(0);
  Tensor a = randn({9, 5}, dev), b = randn({5, 7}, dev);
  auto fn = [&](const Tensor& x) { return (mm(x, b).t()).contiguous() * 1.0; };
  const jit::Explanation ex = jit::explain(fn, a);
  REQUIRE(ex.captured);
  CHECK(ex.optimized_graph.find("cast(") == std::string::npos);
  auto f = jit::compile(fn);
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({64, 5}, dev);
    CHECK(max_err(f(x).cpu(), fn(x).cpu()) < 1e-6);
  }
}
