// The slice_sums pass (jit/passes/slice_sums.cpp): the gradient of a tensor read in slices is
// one cat in the compiled step, and the step's gradients equal eager's exactly.
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "graph_builders.h"
#include "jit/compile.h"
#include "jit/passes.h"
#include "test_util.h"

using namespace ember;
using namespace ember::jit;
using namespace ember::jit::graph_test;

namespace {

using Vec = std::vector<double>;

// Runs `loss_of(w)` then backward, eagerly and compiled (three calls: trace, then replays), and
// returns w's gradient from each plus the compiled step's optimized graph.
template <class F>
void eager_and_compiled(Tensor w, F loss_of, Vec& eager, Vec& compiled, std::string& graph) {
  auto step = [&](const Tensor& x) {
    w.set_grad(Tensor());
    Tensor loss = loss_of(w * x);
    loss.backward();
    return loss;
  };
  const Tensor x = ones(w.sizes(), TensorOptions(w.dtype()).device(w.device())) * 1.5;
  step(x);
  eager = test::read(w.grad());
  auto c = compile(step);
  for (int i = 0; i < 3; ++i) c(x);
  CHECK(c.stats().replays >= 1);
  compiled = test::read(w.grad());
  graph = c.last_graph();
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

void check_device(Device dev) {
  const TensorOptions o = TensorOptions().device(dev);
  Vec eager, compiled;
  std::string graph;
  SECTION("four gates along the last dim: one cat, no whole-size fill") {
    manual_seed(1);
    const Tensor w = randn({6, 16}, o).requires_grad_(true);
    eager_and_compiled(
        w,
        [](const Tensor& g) {
          const Tensor i = sigmoid(g.slice(1, 0, 4)), f = sigmoid(g.slice(1, 4, 8));
          const Tensor c = tanh(g.slice(1, 8, 12)), out = sigmoid(g.slice(1, 12, 16));
          return sum(out * tanh(f * 0.5 + i * c));
        },
        eager, compiled, graph);
    CHECK(eager == compiled);
    CHECK(count(graph, "cat(") == 1);
    CHECK(count(graph, "fill() value=0 : float32[6,16]") == 0);
  }
  SECTION("time steps selected along dim 0") {
    manual_seed(2);
    const Tensor w = randn({5, 3, 4}, o).requires_grad_(true);
    eager_and_compiled(
        w,
        [](const Tensor& g) {
          Tensor h = zeros({3, 4}, TensorOptions().device(g.device()));
          for (int64_t t = 0; t < 5; ++t) h = tanh(g.select(0, t) + h * 0.5);
          return sum(h);
        },
        eager, compiled, graph);
    CHECK(eager == compiled);
    CHECK(count(graph, "cat(") == 1);
    CHECK(count(graph, "fill() value=0 : float32[5,3,4]") == 0);
  }
  SECTION("slices that leave gaps: zeros there") {
    manual_seed(3);
    const Tensor w = randn({4, 10}, o).requires_grad_(true);
    eager_and_compiled(
        w, [](const Tensor& g) { return sum(exp(g.slice(1, 1, 3)) * g.slice(1, 5, 8).sum()); },
        eager, compiled, graph);
    CHECK(eager == compiled);
    for (size_t r = 0; r < 4; ++r) {
      CHECK(compiled[r * 10 + 0] == 0.0);
      CHECK(compiled[r * 10 + 4] == 0.0);
      CHECK(compiled[r * 10 + 9] == 0.0);
      CHECK(compiled[r * 10 + 1] != 0.0);
    }
    CHECK(count(graph, "cat(") == 1);
  }
  SECTION("overlapping slices really add: no cat") {
    manual_seed(4);
    const Tensor w = randn({4, 10}, o).requires_grad_(true);
    eager_and_compiled(
        w, [](const Tensor& g) { return sum(exp(g.slice(1, 0, 6)) + tanh(g.slice(1, 4, 10))); },
        eager, compiled, graph);
    CHECK(eager == compiled);
    CHECK(count(graph, "cat(") == 0);
  }
}

}  // namespace

TEST_CASE("slice_sums: slice gradients assemble as one cat (CPU)", "[jit][slice_sums]") {
  check_device(Device::cpu());
}

TEST_CASE("slice_sums: slice gradients assemble as one cat (CUDA)", "[jit][slice_sums][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_device(Device::cuda(0));
}

TEST_CASE("slice_sums leaves a sum whose piece is written after its copy", "[jit][slice_sums]") {
  // z1 = zeros, z1[:, 0:4] = a; a += 1 (in place, after the copy); z2 = zeros, z2[:, 4:8] = b;
  // z1 + z2 must keep the old a: the pass may not read a at the sum. Without the write, the
  // same graph becomes one cat.
  const bool write_between = GENERATE(false, true);
  Graph g;
  const ValueId a = g.add_input(zeros({3, 4}), 0);
  const ValueId b = g.add_input(zeros({3, 4}), 1);
  const ValueId one = g.add_constant(ones({}));
  auto piece = [&](ValueId src, int64_t start) {
    const ValueId z = fill_node(g, Shape{3, 8}, 0.0);
    Attrs sl;
    sl.dim = 1;
    sl.start = start;
    sl.end = start + 4;
    sl.step = 1;
    Attrs cast;
    cast.dtype = kFloat32;
    write_inplace(g, OpId::cast, {src}, g.append(OpId::slice, {z}, sl), cast);  // z[:, s] = src
    return z;
  };
  const ValueId z1 = piece(a, 0);
  if (write_between) write_inplace(g, OpId::add, {a, one}, a);  // a += 1
  const ValueId z2 = piece(b, 4);
  const ValueId sum = g.append(OpId::add, {z1, z2});
  g.outputs = {sum};
  eliminate_dead_code(g);
  assemble_slice_sums(g);
  int cats = 0;
  for (const Node& n : g.nodes) cats += n.op == OpId::cat;
  CHECK(cats == (write_between ? 0 : 1));
}
