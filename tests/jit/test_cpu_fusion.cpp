// CPU execution of fused groups chunk by chunk, checked against eager on shapes that span many
// chunks (rows reduced across chunks, rows longer than a chunk), and jit::explain's report.
#include <catch2/catch.hpp>
#include <ember/ember.h>

#include <cmath>

#include "jit/cpu_group.h"

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
  CHECK(ex.passes.size() == 6);
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
