// Autograd behaviour beyond single-op gradients: leaf rules, accumulation, graphs that reuse a
// tensor, retain_graph, explicit gradients, detach, grad mode, in-place version checks, pruning
// of gradients nobody needs, set_grad, and CPU/CUDA agreement. Expected values are derived by
// hand in each case (float64, so exact comparisons up to rounding).
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "autograd/autograd.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/ops.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

using Vec = std::vector<double>;

Tensor leaf(const Vec& v, const Shape& s) {
  Tensor t = from_vector(v, s);
  t.requires_grad_();
  return t;
}
Tensor leaf(const Vec& v) { return leaf(v, {static_cast<int64_t>(v.size())}); }

void check_values(const Tensor& t, const Vec& want, double tol = 1e-12) {
  REQUIRE(t.defined());
  const Vec got = t.to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << " of " << t.sizes());
    CHECK(got[i] == Approx(want[i]).margin(tol));
  }
}

void check_grad(const Tensor& x, const Vec& want) {
  REQUIRE(x.grad().defined());
  CHECK(x.grad().sizes() == x.sizes());
  CHECK(x.grad().dtype() == x.dtype());
  check_values(x.grad(), want);
}

// Counts the ops dispatched on this thread while alive (core's trace hook; no JIT tracer runs in
// these tests), to show which gradients backward computed.
thread_local std::vector<OpId>* t_seen = nullptr;
void note_op(OpId op, std::span<const Tensor>, const Attrs&, const Tensor&, bool) {
  if (t_seen) t_seen->push_back(op);
}
struct OpLog {
  std::vector<OpId> ops;
  OpObserver prev = trace_observer();
  OpLog() {
    t_seen = &ops;
    set_trace_observer(&note_op);
  }
  ~OpLog() {
    set_trace_observer(prev);
    t_seen = nullptr;
  }
  int count(OpId op) const {
    int n = 0;
    for (OpId o : ops) n += o == op;
    return n;
  }
};

}  // namespace

TEST_CASE("Leaf and non-leaf rules", "[autograd]") {
  Tensor x = from_vector<double>({1, 2, 3}, {3});
  CHECK(x.is_leaf());
  CHECK_FALSE(x.requires_grad());
  CHECK(x.grad_fn() == nullptr);
  CHECK_FALSE(x.grad().defined());
  const Tensor plain = x * 2;  // nothing requires grad: nothing is recorded
  CHECK(plain.is_leaf());
  CHECK_FALSE(plain.requires_grad());

  CHECK(&x.requires_grad_() == &x);
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK(x.grad_fn() == nullptr);

  Tensor y = x * 2;
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "mulBackward");
  CHECK((plain + y).requires_grad());  // one input requiring grad is enough
  CHECK_FALSE((plain + 1).requires_grad());
  CHECK_FALSE((y > 1).requires_grad());  // comparisons have no gradient
  CHECK_FALSE(y.argmax().requires_grad());

  const Tensor v = x.view({3, 1});  // a view of a leaf is a recorded op, so not a leaf
  CHECK_FALSE(v.is_leaf());
  CHECK(v.requires_grad());

  // Only leaves can stop requiring grad (a non-leaf is cut with detach()).
  CHECK_THROWS_WITH(y.requires_grad_(false),
                    Contains("requires_grad_") && Contains("leaf") && Contains("detach()"));
  CHECK(y.requires_grad());
  x.requires_grad_(false);
  CHECK_FALSE(x.requires_grad());
  CHECK_FALSE((x * 2).requires_grad());

  // The gradient of a non-leaf is not kept.
  Tensor a = leaf({1, 2});
  const Tensor b = a * 3;
  b.sum().backward();
  CHECK_FALSE(b.grad().defined());
  check_grad(a, {3, 3});
}

TEST_CASE("Only floating-point tensors can require grad", "[autograd]") {
  for (DType t : {kInt64, kInt32, kBool}) {
    INFO(dtype_name(t));
    Tensor x = zeros({2}, t);
    CHECK_THROWS_WITH(x.requires_grad_(),
                      Contains("requires_grad_") && Contains(std::string(dtype_name(t))));
    CHECK_FALSE(x.requires_grad());
    CHECK_NOTHROW(x.requires_grad_(false));
  }
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO(dtype_name(t));
    Tensor x = zeros({2}, t);
    CHECK_NOTHROW(x.requires_grad_());
    CHECK(x.requires_grad());
  }
  // An integer result of a tensor that requires grad does not require grad.
  const Tensor f = leaf({1.5, -2.5});
  CHECK_FALSE(cast(f, kInt64).requires_grad());
}

TEST_CASE("The autograd accessors of an undefined tensor raise instead of crashing",
          "[autograd]") {
  Tensor u;
  CHECK_THROWS_WITH(u.requires_grad(), Contains("requires_grad") && Contains("undefined"));
  CHECK_THROWS_WITH(u.is_leaf(), Contains("is_leaf") && Contains("undefined"));
  CHECK_THROWS_WITH(u.grad(), Contains("grad") && Contains("undefined"));
  CHECK_THROWS_WITH(u.grad_fn(), Contains("grad_fn") && Contains("undefined"));
  CHECK_THROWS_WITH(u.set_grad(Tensor()), Contains("set_grad") && Contains("undefined"));
  CHECK_THROWS_WITH(u.set_grad(zeros({2})), Contains("set_grad") && Contains("undefined"));
}

TEST_CASE("Gradients accumulate over backward calls until cleared", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  (x * x).sum().backward();
  check_grad(x, {2, 4, 6});
  (x * x).sum().backward();
  check_grad(x, {4, 8, 12});
  x.set_grad({});
  CHECK_FALSE(x.grad().defined());
  (x * 5).sum().backward();
  check_grad(x, {5, 5, 5});
}

TEST_CASE("A float32 leaf gets a float32 gradient through a float64 graph", "[autograd]") {
  Tensor x = from_vector<float>({1, 2}, {2});
  x.requires_grad_();
  const Tensor w = from_vector<double>({0.5, -3}, {2});
  (cast(x, kFloat64) * w).sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kFloat32);
  check_values(x.grad(), {0.5, -3});
}

TEST_CASE("Gradients of a tensor used several times are summed", "[autograd]") {
  SECTION("the same tensor on both sides") {
    Tensor x = leaf({1, -2});
    (x + x).sum().backward();
    check_grad(x, {2, 2});
  }
  SECTION("a diamond") {
    Tensor x = leaf({0.5, -1, 2});
    const Tensor b = x * 2, c = exp(x);
    (b * c).sum().backward();
    Vec want;
    for (double v : {0.5, -1.0, 2.0}) want.push_back(2 * std::exp(v) + 2 * v * std::exp(v));
    check_grad(x, want);
  }
  SECTION("an intermediate used twice") {
    Tensor x = leaf({1, 2});
    const Tensor b = x * 3;
    (b + b * b).sum().backward();  // d/dx = 3 (1 + 2b) = 3 + 18x
    check_grad(x, {21, 39});
  }
  SECTION("two roots sharing a leaf") {
    Tensor x = leaf({1, 2});
    const Tensor y1 = (x * x).sum(), y2 = (x * 3).sum();
    autograd::backward({y1, y2}, {Tensor(), Tensor()});
    check_grad(x, {5, 7});
  }
  SECTION("one root given twice") {
    Tensor x = leaf({1, 2});
    const Tensor y = (x * x).sum();
    autograd::backward({y, y}, {Tensor(), scalar_tensor(2.0, kFloat64)});
    check_grad(x, {6, 12});  // (1 + 2) * 2x
  }
}

TEST_CASE("retain_graph allows another backward and without it a second one is an error",
          "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  const Tensor y = (x * x).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  check_grad(x, {4, 8, 12});
  CHECK_THROWS_WITH(y.backward(), Contains("retain_graph"));
  check_grad(x, {4, 8, 12});  // the refused backward accumulated nothing

  Tensor z = leaf({2});
  const Tensor e = exp(z) * z;
  e.backward();
  CHECK_THROWS_WITH(e.backward(), Contains("mulBackward") && Contains("retain_graph"));
}

TEST_CASE("backward with an explicit gradient and its checks", "[autograd]") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor y = x * 3;
  y.backward(from_vector<double>({1, 0, -1, 2, 0.5, 4}, {2, 3}), /*retain_graph=*/true);
  check_grad(x, {3, 0, -3, 6, 1.5, 12});

  x.set_grad({});
  CHECK_THROWS_WITH(y.backward(ones({3, 2}, kFloat64), true),
                    Contains("backward") && Contains("[3, 2]") && Contains("[2, 3]"));
  CHECK_THROWS_WITH(y.backward(ones({6}, kFloat64), true),
                    Contains("backward") && Contains("[6]") && Contains("[2, 3]"));
  CHECK_FALSE(x.grad().defined());

  // A gradient of another floating dtype is converted.
  y.backward(ones({2, 3}, kFloat32), true);
  check_grad(x, {3, 3, 3, 3, 3, 3});
}

TEST_CASE("backward of a non-scalar without a gradient is an error", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  const Tensor y = x * 2;
  CHECK_THROWS_WITH(y.backward(), Contains("gradient") && Contains("[3]"));
  CHECK_FALSE(x.grad().defined());

  // One element in any shape is a scalar for this purpose.
  Tensor w = leaf({4}, {1, 1});
  (w * w).backward();
  check_grad(w, {8});

  // A tensor outside any graph has nothing to backpropagate.
  CHECK_THROWS_WITH(from_vector<double>({1}, {1}).backward(),
                    Contains("backward") && Contains("[1]") && Contains("does not require grad"));
}

TEST_CASE("detach cuts the graph and shares storage", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  const Tensor y = x * 2;
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.impl()->storage.get() == y.impl()->storage.get());
  CHECK(d.raw_data() == y.raw_data());
  CHECK_FALSE((d * x.detach()).requires_grad());

  // d is a constant to the graph: d * x differentiates to d only.
  (d * x).sum().backward();
  check_grad(x, {2, 4, 6});

  // Writes through the detached tensor are visible in the original (one storage)...
  d.fill_(7);
  check_values(y, {7, 7, 7});

  // ...and share its version counter, so a saved tensor modified that way is detected.
  Tensor z = leaf({0.5, 1});
  const Tensor e = exp(z);  // saves its output
  e.detach().zero_();
  CHECK_THROWS_WITH(e.sum().backward(), Contains("exp"));
}

TEST_CASE("NoGradGuard records nothing and nested guards restore the mode", "[autograd]") {
  Tensor x = leaf({1, 2});
  CHECK(GradMode::is_enabled());
  {
    NoGradGuard outer;
    CHECK_FALSE(GradMode::is_enabled());
    const Tensor y = x * 2;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    CHECK(y.grad_fn() == nullptr);
    {
      NoGradGuard inner;
      CHECK_FALSE(GradMode::is_enabled());
    }
    CHECK_FALSE(GradMode::is_enabled());
    {
      EnableGradGuard on;
      CHECK(GradMode::is_enabled());
      CHECK((x * 2).requires_grad());
      {
        NoGradGuard again;
        CHECK_FALSE((x * 2).requires_grad());
      }
      CHECK(GradMode::is_enabled());
    }
    CHECK_FALSE(GradMode::is_enabled());

    // Grad mode is per thread.
    bool other_thread = false;
    std::thread t([&] { other_thread = GradMode::is_enabled(); });
    t.join();
    CHECK(other_thread);

    // Updating a leaf in place is allowed here (an optimizer step) and keeps it a leaf.
    x.add_(1.0);
    x.mul_(2.0);
  }
  CHECK(GradMode::is_enabled());
  check_values(x, {4, 6});
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  (x * x).sum().backward();
  check_grad(x, {8, 12});
}

TEST_CASE("In-place on a leaf that requires grad is an error that leaves the data unchanged",
          "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  const uint32_t v0 = x.version();
  CHECK_THROWS_WITH(x.add_(1.0), Contains("leaf"));
  CHECK_THROWS_WITH(x.add_(from_vector<double>({1, 1, 1}, {3})),
                    Contains("add_") && Contains("leaf"));
  CHECK_THROWS_WITH(x.mul_(2.0), Contains("mul_") && Contains("leaf"));
  CHECK_THROWS_WITH(x.mul_(x), Contains("mul_") && Contains("leaf"));
  // zero_ is fill_(0): the refusal names the op that writes.
  CHECK_THROWS_WITH(x.zero_(), Contains("fill_") && Contains("leaf"));
  CHECK_THROWS_WITH(x.fill_(5), Contains("fill_") && Contains("leaf"));
  CHECK_THROWS_WITH(x.copy_(from_vector<double>({9, 9, 9}, {3})),
                    Contains("copy_") && Contains("leaf"));
  CHECK_THROWS_WITH(x.add_(from_vector<int64_t>({1, 1, 1}, {3})),
                    Contains("add_") && Contains("leaf"));
  check_values(x, {1, 2, 3});
  CHECK(x.version() == v0);
  CHECK(x.is_leaf());
  CHECK(x.grad_fn() == nullptr);
  (x * 2).sum().backward();  // the graph still works
  check_grad(x, {2, 2, 2});
}

TEST_CASE("In-place on a tensor saved for backward makes backward throw naming the op",
          "[autograd]") {
  Tensor x = leaf({1, 2, 3}), w = leaf({4, 5, 6});
  SECTION("an input saved by mul") {
    Tensor c = x.clone();
    const Tensor y = c * w;  // saves c for w's gradient
    c.add_(1.0);
    CHECK_THROWS_WITH(y.sum().backward(), Contains("mul") && Contains("in-place"));
  }
  SECTION("an output saved by exp") {
    Tensor e = exp(x.clone());
    e.mul_(2.0);  // exp's backward reads its output
    CHECK_THROWS_WITH(e.sum().backward(), Contains("exp") && Contains("in-place"));
  }
  SECTION("a tensor that is not saved may be modified") {
    Tensor c = x.clone();
    const Tensor y = c + w;  // add saves nothing
    c.mul_(2.0);
    y.sum().backward();
    check_grad(x, {1, 1, 1});
    check_grad(w, {1, 1, 1});
  }
  SECTION("gradients through a chain of in-place ops") {
    Tensor c = x.clone();
    c.mul_(3.0);
    c.add_(w);
    (c * c).sum().backward();  // c = 3x + w; d/dc = 2c
    check_grad(x, {6 * 7, 6 * 11, 6 * 15});
    check_grad(w, {2 * 7, 2 * 11, 2 * 15});
  }
}

TEST_CASE("In-place writes to a view of a tensor that requires grad are refused", "[autograd]") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor c = x * 1;
  Tensor row = c.slice(0, 0, 1);
  CHECK_THROWS_WITH(row.add_(1.0), Contains("view"));
  Tensor ct = c.t();
  CHECK_THROWS_WITH(ct.mul_(2.0), Contains("mul_") && Contains("view"));
  Tensor flat = x.view({6});
  CHECK_THROWS_WITH(flat.zero_(), Contains("fill_") && Contains("view"));
  check_values(c, {1, 2, 3, 4, 5, 6});
  check_values(x, {1, 2, 3, 4, 5, 6});
  c.sum().backward();
  check_grad(x, {1, 1, 1, 1, 1, 1});
}

TEST_CASE("Writing a value that requires grad into a view never loses its gradient silently",
          "[autograd]") {
  // PyTorch makes the base part of the graph; refusing the write (or the backward) is also
  // acceptable. A missing gradient is not.
  Tensor w = leaf({1, 2, 3});
  Tensor u = leaf({1, 1, 1, 1, 1, 1}, {2, 3});
  Tensor base = zeros({2, 3}, kFloat64);
  try {
    base.select(0, 1).copy_(w * 2);
    (base * u).sum().backward();
  } catch (const Error&) {
    SUCCEED("refused");
    return;
  }
  REQUIRE(w.grad().defined());
  check_grad(w, {2, 2, 2});
}

TEST_CASE("A view used after an in-place write to its base never gets a stale gradient",
          "[autograd]") {
  // v is a view of c; c.mul_(w) changes what v holds to a*w. PyTorch rebases v's history onto
  // the write; refusing (at the write, the use or backward) is also acceptable. A gradient that
  // ignores the write is not.
  Tensor a = leaf({1, 2, 3}), w = leaf({5, 6, 7});
  Tensor c = a * 1;
  const Tensor v = c.slice(0, 0, 2);
  try {
    c.mul_(w);
    v.sum().backward();
  } catch (const Error&) {
    SUCCEED("refused");
    return;
  }
  check_grad(a, {5, 6, 0});
  check_grad(w, {1, 2, 0});
}

TEST_CASE("A node that receives no gradient does not stall other branches", "[autograd]") {
  // A node whose formula yields no gradient for an input that wants one (zero by absence).
  struct Silent final : autograd::Node {
    std::vector<Tensor> apply(Tensor) override { return {Tensor()}; }
    std::string name() const override { return "Silent"; }
  };
  Tensor a = leaf({1, 2});
  const Tensor u = a * 2;
  auto silent = std::make_shared<Silent>();
  silent->next.push_back(autograd::gradient_edge(u));
  silent->sequence_nr = autograd::next_sequence_nr();
  Tensor s = u.detach();
  autograd::meta(s).requires_grad = true;
  autograd::meta(s).grad_fn = silent;
  // a is reached through u (no gradient arrives there) and through a * 3.
  (s + a * 3).sum().backward();
  check_grad(a, {3, 3});

  // Only part of a graph reaches the leaves that require grad.
  Tensor p = leaf({1, 2}), q = leaf({5, 7}), unused = leaf({1, 1});
  const Tensor b = from_vector<double>({3, 4}, {2});  // does not require grad
  ((p * b).sum() + (q * 2).sum() + (b * b).sum()).backward();
  check_grad(p, {3, 4});
  check_grad(q, {2, 2});
  CHECK_FALSE(b.grad().defined());
  CHECK_FALSE(unused.grad().defined());
}

TEST_CASE("An input batch without requires_grad gets no gradient and mm never computes it",
          "[autograd]") {
  const Vec xv = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const Tensor x = from_vector(xv, {4, 3});
  Tensor w = leaf({0.5, -1, 2, 0, 1, 3}, {3, 2});
  const Tensor y = mm(x, w);
  {
    OpLog log;
    y.sum().backward();
    CHECK(log.count(OpId::mm) == 1);  // dW only
  }
  CHECK_FALSE(x.grad().defined());
  // dW[i][j] = sum_n x[n][i]
  check_grad(w, {22, 22, 26, 26, 30, 30});

  // mm saves only what the needed gradient reads: x, not w, so w may change after the forward.
  Tensor w2 = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor y2 = mm(x, w2);
  {
    NoGradGuard no_grad;
    w2.mul_(2.0);
  }
  y2.sum().backward();
  check_grad(w2, {22, 22, 26, 26, 30, 30});

  // When the batch does require grad, both products run (and w is saved).
  Tensor xg = leaf(xv, {4, 3});
  Tensor w3 = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor y3 = mm(xg, w3);
  {
    OpLog log;
    y3.sum().backward({}, true);
    CHECK(log.count(OpId::mm) == 2);
  }
  check_grad(xg, {3, 7, 11, 3, 7, 11, 3, 7, 11, 3, 7, 11});
  {
    NoGradGuard no_grad;
    w3.mul_(2.0);
  }
  CHECK_THROWS_WITH(y3.sum().backward(), Contains("mm"));

  // A two-layer MLP on a batch without grad: dW1, dW2 and dH only.
  Tensor w1 = leaf({0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, {2, 3}), b1 = leaf({0.1, 0.2});
  Tensor wo = leaf({1, -1, 0.5, 2}, {2, 2}), bo = leaf({0, 1});
  const Tensor out = linear(relu(linear(x, w1, b1)), wo, bo);
  {
    OpLog log;
    out.sum().backward();
    CHECK(log.count(OpId::mm) == 3);
  }
  CHECK_FALSE(x.grad().defined());
  CHECK(w1.grad().defined());
  CHECK(b1.grad().defined());
}

TEST_CASE("set_grad checks the gradient it is given", "[autograd]") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK_THROWS_WITH(x.set_grad(zeros({3, 2}, kFloat64)),
                    Contains("set_grad") && Contains("[3, 2]"));
  CHECK_THROWS_WITH(x.set_grad(zeros({2, 3}, kFloat32)),
                    Contains("set_grad") && Contains("float32") && Contains("float64"));
  CHECK_THROWS_WITH(x.set_grad(zeros({6}, kFloat64)),
                    Contains("set_grad") && Contains("[6]") && Contains("[2, 3]"));
  CHECK_FALSE(x.grad().defined());

  x.set_grad(ones({2, 3}, kFloat64));
  check_grad(x, {1, 1, 1, 1, 1, 1});
  (x * 2).sum().backward();  // accumulates onto what was set
  check_grad(x, {3, 3, 3, 3, 3, 3});
  x.set_grad({});
  CHECK_FALSE(x.grad().defined());

  Tensor plain = zeros({2});
  CHECK_NOTHROW(plain.set_grad({}));
  CHECK_FALSE(plain.grad().defined());
}

TEST_CASE("A leaf's gradient does not alias the gradient given to backward", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  Tensor g = from_vector<double>({1, 2, 3}, {3});
  x.view({3, 1}).backward(g.view({3, 1}));
  check_grad(x, {1, 2, 3});
  g.fill_(100);
  check_grad(x, {1, 2, 3});

  Tensor z = leaf({1, 2});
  Tensor h = from_vector<double>({5, 6}, {2});
  (z + 0.0).backward(h);
  h.zero_();
  check_grad(z, {5, 6});
}

TEST_CASE("Gradients on CUDA match the CPU for an MLP-like graph", "[autograd][cuda]") {
  EMBER_REQUIRE_CUDA();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0, 1);
  auto values = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = nd(rng) * scale;
    return v;
  };
  const int64_t n = 16, in = 10, hid = 12, out = 5;
  const std::vector<float> xv = values(n * in, 1), w1v = values(hid * in, 0.3f),
                           b1v = values(hid, 0.1f), w2v = values(out * hid, 0.3f),
                           b2v = values(out, 0.1f), gv = values(hid, 1);
  std::vector<int64_t> tv;
  for (int64_t i = 0; i < n; ++i) tv.push_back((i * 3) % out);

  struct Run {
    Tensor w1, b1, w2, b2, gain, loss;
  };
  auto run = [&](Device dev) {
    auto param = [&](const std::vector<float>& v, const Shape& s) {
      Tensor t = from_vector(v, s, TensorOptions(kFloat32).device(dev));
      t.requires_grad_();
      return t;
    };
    Run r{param(w1v, {hid, in}), param(b1v, {hid}), param(w2v, {out, hid}),
          param(b2v, {out}),     param(gv, {hid}),  Tensor()};
    const Tensor x = from_vector(xv, {n, in}, TensorOptions(kFloat32).device(dev));
    const Tensor y = from_vector(tv, {n}, TensorOptions(kInt64).device(dev));
    const Tensor h = relu(linear(x, r.w1, r.b1));
    const Tensor h2 = gelu(h * r.gain) + tanh(h).t().t();  // a diamond through views
    const Tensor logits = linear(h2, r.w2, r.b2);
    const Tensor ce = cross_entropy_per_sample(logits, y).mean();
    const Tensor reg =
        (softmax(logits, 1) * log_softmax(logits, 1)).sum() * 0.01 + amax(logits, {1}).mean() * 0.1;
    r.loss = ce + reg;
    r.loss.backward();
    CHECK_FALSE(x.grad().defined());
    return r;
  };
  const Run cpu = run(Device::cpu());
  const Run gpu = run(Device::cuda(0));
  CHECK(gpu.loss.item<float>() == Approx(cpu.loss.item<float>()).epsilon(1e-5));
  const std::pair<const char*, std::pair<Tensor, Tensor>> pairs[] = {
      {"w1", {cpu.w1, gpu.w1}},
      {"b1", {cpu.b1, gpu.b1}},
      {"w2", {cpu.w2, gpu.w2}},
      {"b2", {cpu.b2, gpu.b2}},
      {"gain", {cpu.gain, gpu.gain}}};
  for (const auto& [name, p] : pairs) {
    INFO(name);
    REQUIRE(p.second.grad().defined());
    CHECK(p.second.grad().is_cuda());
    CHECK(allclose(p.second.grad().cpu(), p.first.grad(), 1e-4, 1e-6));
  }

  // A gradient crossing devices: a CPU leaf used on the GPU gets a CPU gradient.
  Tensor c = from_vector<float>({1, 2, 3}, {3});
  c.requires_grad_();
  (c.cuda() * c.cuda()).sum().backward();
  REQUIRE(c.grad().defined());
  CHECK(c.grad().device().is_cpu());
  check_values(c.grad(), {2, 4, 6}, 1e-6);

  // A gradient on the wrong device is refused.
  Tensor d = from_vector<float>({1, 2}, {2}, TensorOptions(kFloat32).device(Device::cuda(0)));
  d.requires_grad_();
  CHECK_THROWS_WITH((d * 2).backward(ones({2})),
                    Contains("backward") && Contains("cpu") && Contains("cuda:0"));
}
