// The batch_products pass (jit/passes/batch_products.cpp): independent products sharing a right
// operand run as one product; a cell loop compiled this way trains like eager.
#include <cmath>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "graph_builders.h"
#include "jit/compile.h"
#include "jit/passes.h"
#include "nn/rnn.h"
#include "test_util.h"

using namespace ember;
using namespace ember::jit;
using namespace ember::jit::graph_test;

namespace {

using Vec = std::vector<double>;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Products in an optimized graph's text with this output type, e.g. "float32[15,24]".
int products(const std::string& graph, const std::string& type) {
  int n = 0;
  size_t at = 0;
  while ((at = graph.find(" = mm(", at)) != std::string::npos) {
    const size_t end = graph.find('\n', at);
    if (graph.substr(at, end - at).find(": " + type) != std::string::npos) ++n;
    at = end;
  }
  return n;
}

void check_close(const Vec& a, const Vec& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(a[i]));
  }
  INFO("largest difference " << worst << " of largest magnitude " << scale);
  CHECK(worst <= tol * std::max(scale, 1.0));
}

void cell_loop(Device dev) {
  const int64_t T = 5, B = 3, in = 4, H = 6;
  manual_seed(5);
  nn::LSTMCell cell(nn::LSTMCellOptions(in, H));
  cell->to(dev);
  auto step = [&](const Tensor& x) {
    for (Tensor& p : cell->parameters()) p.set_grad(Tensor());
    Tensor h, c;
    for (int64_t t = 0; t < T; ++t) {
      auto [h2, c2] = t == 0 ? cell->forward(x.select(0, t), std::nullopt)
                             : cell->forward(x.select(0, t), std::make_tuple(h, c));
      h = h2;
      c = c2;
    }
    Tensor loss = sum(h * h);
    loss.backward();
    return loss;
  };
  const Tensor x = randn({T, B, in}, TensorOptions().device(dev));
  auto grads = [&] {
    Vec all;
    for (const Tensor& p : cell->parameters())
      for (double v : test::read(p.grad())) all.push_back(v);
    return all;
  };
  const double eager_loss = step(x).item<float>();
  const Vec eager = grads();
  auto compiled = compile(step);
  double loss = 0;
  for (int i = 0; i < 3; ++i) loss = compiled(x).item<float>();
  CHECK(compiled.stats().replays >= 1);
  CHECK(std::abs(loss - eager_loss) <= 1e-5 * std::abs(eager_loss));
  check_close(eager, grads(), 1e-5);
  const std::string graph = compiled.last_graph();
  INFO(graph);
  // The input projections: one product over the T * B rows forward; the recurrent ones stay
  // one per step (the first step's state is zeros, still multiplied).
  CHECK(products(graph, "float32[15,24]") == 1);
  CHECK(products(graph, "float32[3,24]") == T);
}

}  // namespace

TEST_CASE("batch_products: an LSTMCell loop's input products become one (CPU)",
          "[jit][batch_products]") {
  cell_loop(Device::cpu());
}

TEST_CASE("batch_products: an LSTMCell loop's input products become one (CUDA)",
          "[jit][batch_products][cuda]") {
  EMBER_REQUIRE_CUDA();
  cell_loop(Device::cuda(0));
}

TEST_CASE("batch_products leaves dependent products and products across a write",
          "[jit][batch_products]") {
  SECTION("a chain through the same weight stays one product per step") {
    manual_seed(6);
    const Tensor w = randn({4, 4}).requires_grad_(true);
    auto f = [&](const Tensor& x) {
      Tensor h = x;
      for (int t = 0; t < 4; ++t) h = tanh(mm(h, w));
      return sum(h);
    };
    const Explanation e = explain(f, randn({2, 4}));
    CHECK(products(e.optimized_graph, "float32[2,4]") == 4);
    CHECK(count(e.optimized_graph, "cat(") == 0);
  }
  SECTION("independent products: one, and the results are the row blocks") {
    manual_seed(7);
    const Tensor w = randn({4, 5});
    auto f = [&](const Tensor& a, const Tensor& b) { return mm(a, w) * 2.0 + mm(b, w); };
    const Tensor a = randn({3, 4}), b = randn({3, 4});
    const Explanation e = explain(f, a, b);
    CHECK(products(e.optimized_graph, "float32[6,5]") == 1);
    CHECK(products(e.optimized_graph, "float32[3,5]") == 0);
    auto c = compile(f);
    Tensor got;
    for (int i = 0; i < 3; ++i) got = c(a, b);
    check_close(test::read(f(a, b)), test::read(got), 1e-6);
  }
  SECTION("a left operand written between the products keeps them apart") {
    const bool write_between = GENERATE(false, true);
    Graph g;
    const ValueId x0 = g.add_input(zeros({3, 4}), 0);
    const ValueId x1 = g.add_input(zeros({3, 4}), 1);
    const ValueId w = g.add_state(zeros({4, 5}));
    const ValueId one = g.add_constant(ones({}));
    const ValueId m0 = g.append(OpId::mm, {x0, w});
    if (write_between) write_inplace(g, OpId::add, {x1, one}, x1);  // x1 += 1
    const ValueId m1 = g.append(OpId::mm, {x1, w});
    g.outputs = {g.append(OpId::add, {m0, m1})};
    batch_products(g);
    int mms = 0, cats = 0;
    for (const Node& n : g.nodes) {
      mms += n.op == OpId::mm;
      cats += n.op == OpId::cat;
    }
    CHECK(mms == (write_between ? 2 : 1));
    CHECK(cats == (write_between ? 0 : 1));
  }
}

// The sum_products pass (jit/passes/sum_products.cpp): a weight's gradient summed over the steps
// of a loop is one product over the joined steps.
namespace {

// transposed: the weight is used as w^T, as Linear and the recurrent layers store theirs
// ([out, in]); its per-step gradients then reach the sum as transposes of transposed products.
void recurrent_weight(Device dev, bool transposed) {
  manual_seed(8);
  const int T = 6;
  const TensorOptions o = TensorOptions().device(dev);
  Tensor w = randn({4, 4}, o).requires_grad_(true), b = randn({4}, o).requires_grad_(true);
  auto step = [&](const Tensor& x) {
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    Tensor h = x;
    for (int t = 0; t < T; ++t) h = tanh(mm(h, transposed ? w.t() : w) + b);
    Tensor loss = sum(h * h);
    loss.backward();
    return loss;
  };
  const Tensor x = randn({2, 4}, o);
  step(x);
  const Vec eager_w = test::read(w.grad()), eager_b = test::read(b.grad());
  auto compiled = compile(step);
  for (int i = 0; i < 3; ++i) compiled(x);
  CHECK(compiled.stats().replays >= 1);
  check_close(eager_w, test::read(w.grad()), 1e-5);
  check_close(eager_b, test::read(b.grad()), 1e-5);
  const std::string graph = compiled.last_graph();
  INFO(graph);
  CHECK(products(graph, "float32[4,4]") == 1);          // the weight's gradient: one product, not T
  CHECK(products(graph, "float32[2,4]") == 2 * T - 1);  // forward chain, hidden-state gradient
  // The bias's: one column sum over the same joined gradients the product reads.
  CHECK(count(graph, "= sum(") == 2);   // the loss, the bias gradient
  CHECK(count(graph, " = cat(") == 2);  // the step gradients (shared), the hidden states
}

}  // namespace

TEST_CASE("sum_products: a recurrent weight's and bias's gradients are one product and one sum",
          "[jit][sum_products]") {
  recurrent_weight(Device::cpu(), GENERATE(false, true));
}

TEST_CASE("sum_products: a recurrent weight's and bias's gradients (CUDA)",
          "[jit][sum_products][cuda]") {
  EMBER_REQUIRE_CUDA();
  recurrent_weight(Device::cuda(0), GENERATE(false, true));
}

TEST_CASE("sum_products leaves a sum whose operand is written before the sum",
          "[jit][sum_products]") {
  const bool write_between = GENERATE(false, true);
  Graph g;
  const ValueId a0 = g.add_input(zeros({3, 4}), 0);
  const ValueId a1 = g.add_input(zeros({3, 4}), 1);
  const ValueId b = g.add_state(zeros({4, 5}));
  const ValueId one = g.add_constant(ones({}));
  const ValueId p0 = g.append(OpId::mm, {a0, b});
  if (write_between) write_inplace(g, OpId::add, {a0, one}, a0);  // a0 changes after its product
  const ValueId p1 = g.append(OpId::mm, {a1, b});
  g.outputs = {g.append(OpId::add, {p0, p1})};
  sum_products(g);
  eliminate_dead_code(g);
  int mms = 0, cats = 0;
  for (const Node& n : g.nodes) {
    mms += n.op == OpId::mm;
    cats += n.op == OpId::cat;
  }
  CHECK(mms == (write_between ? 2 : 1));
  CHECK(cats == (write_between ? 0 : 2));
}

TEST_CASE("jit split_sliced_pointwise: a compiled gate step equals eager", "[jit]") {
  manual_seed(12);
  const Tensor w = randn({6, 16}), b = randn({16});
  auto f = [&](const Tensor& x, const Tensor& h) {
    const Tensor pre = add(mm(h, w), x) + b;  // [5, 16], cut into four gates of 4
    const Tensor i = sigmoid(pre.slice(1, 0, 4)), fg = sigmoid(pre.slice(1, 4, 8));
    const Tensor gg = tanh(pre.slice(1, 8, 12)), o = sigmoid(pre.slice(1, 12, 16));
    return o * tanh(fg * i + i * gg);
  };
  const Tensor x = randn({5, 16}), h = randn({5, 6});
  const jit::Explanation e = explain(f, x, h);
  INFO(e.optimized_graph);
  // The gates' pre-activations are four adds of slices, computed in the gates' kernel.
  int gate_adds = 0;
  for (size_t at = 0; (at = e.optimized_graph.find(" = add(", at)) != std::string::npos; ++at) {
    const std::string line = e.optimized_graph.substr(at, e.optimized_graph.find('\n', at) - at);
    gate_adds += line.find("float32[5,4]") != std::string::npos;
  }
  CHECK(gate_adds == 5);  // the four gates' and the cell's (fg * i + i * gg)
  auto c = compile(f);
  Tensor got;
  for (int k = 0; k < 3; ++k) got = c(x, h);
  CHECK(test::read(got) == test::read(f(x, h)));
}
