// Finite-difference gradient checks over the whole op table (core/ops.yaml). Every op has an
// entry: either float64 functions that reach it through the public API (broadcasting, views of
// the leaves that are not contiguous, keepdim both ways, several dims, in-place forms), each run
// through autograd::gradcheck_report, or "not differentiable", in which case the op's output must
// not require grad even when its inputs do. The hand-written ops have a case in the switch below;
// the activation ops (rows written as expressions) take their checks from the same rows as the
// op-table sweep (tests/core/activation_rows.cpp), in its default. An op in neither place fails
// the loop at run time.
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/formulas.h"
#include "core/activation_rows.h"
#include "core/collective.h"
#include "core/cuda_runtime.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/ops.h"
#include "test_util.h"

using namespace ember;
using autograd::GradcheckFn;
using autograd::GradcheckOptions;

namespace {

using Rng = std::mt19937_64;
using In = const std::vector<Tensor>&;

// ---- which ops a function dispatched ------------------------------------------------------

// Records the ops dispatched on this thread while alive, through core's trace hook (the JIT's
// tracer is not in use in these tests), so an entry can be shown to reach the op it covers.
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
  bool saw(OpId op) const {
    for (OpId o : ops)
      if (o == op) return true;
    return false;
  }
};

// ---- inputs -------------------------------------------------------------------------------

// A float64 leaf requiring grad, uniform in [lo, hi] and at least `margin` away from each point
// of `avoid` (kinks of relu/abs/clamp, where finite differences straddle the corner).
Tensor leaf(Rng& r, const Shape& shape, double lo, double hi, const std::vector<double>& avoid = {},
            double margin = 0.1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (double& x : v) {
    bool ok = false;
    while (!ok) {
      x = u(r);
      ok = true;
      for (double p : avoid) ok = ok && std::abs(x - p) >= margin;
    }
  }
  Tensor t = from_vector(v, shape);
  t.requires_grad_();
  return t;
}

Tensor index(const std::vector<int64_t>& v, const Shape& shape) { return from_vector(v, shape); }

// ---- entries ------------------------------------------------------------------------------

struct Check {
  std::string what;
  std::vector<Tensor> inputs;
  GradcheckFn fn;
  GradcheckOptions opts = {};
};

struct Entry {
  bool present = false;
  bool differentiable = true;
  std::vector<Check> checks;        // differentiable: finite-difference checks
  std::function<Tensor()> call;     // not differentiable: the op applied to inputs needing grad
  std::function<void()> hand = {};  // values derived by hand (ties, even splits)
};

Entry grad(std::vector<Check> checks, std::function<void()> hand = {}) {
  Entry e;
  e.present = true;
  e.checks = std::move(checks);
  e.hand = std::move(hand);
  return e;
}

Entry not_differentiable(std::function<Tensor()> call) {
  Entry e;
  e.present = true;
  e.differentiable = false;
  e.call = std::move(call);
  return e;
}

Tensor f64(const std::vector<double>& v, const Shape& s) {
  Tensor t = from_vector(v, s);
  t.requires_grad_();
  return t;
}

void check_grad(const Tensor& x, const std::vector<double>& want) {
  REQUIRE(x.grad().defined());
  CHECK(x.grad().sizes() == x.sizes());
  const std::vector<double> got = x.grad().to_vector<double>();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(1e-12));
  }
}

// Ties of amax/amin: the gradient is split evenly among the elements equal to the extremum.
void extremum_ties() {
  Tensor x = f64({1, 3, 3, 2}, {4});
  amax(x).backward();
  check_grad(x, {0, 0.5, 0.5, 0});

  Tensor y = f64({1, 4, 4, 2, 2, 2}, {2, 3});
  amax(y, {1}).backward(from_vector<double>({1, 3}, {2}));
  check_grad(y, {0, 0.5, 0.5, 1, 1, 1});

  Tensor z = f64({5, 1, 1, 0, 7, 0}, {2, 3});
  amin(z, {1}, /*keepdim=*/true).backward(from_vector<double>({2, 1}, {2, 1}));
  check_grad(z, {0, 1, 1, 0.5, 0, 0.5});

  Tensor w = f64({2, 2, 2, 2}, {2, 2});
  amin(w).backward();
  check_grad(w, {0.25, 0.25, 0.25, 0.25});
}

// Ties of maximum/minimum: each side gets half the gradient.
void pairwise_ties(bool is_max) {
  auto op = [&](const Tensor& a, const Tensor& b) {
    return is_max ? maximum(a, b) : minimum(a, b);
  };
  Tensor a = f64({1, 2, 3}, {3}), b = f64({3, 2, 1}, {3});
  op(a, b).sum().backward();
  check_grad(a, is_max ? std::vector<double>{0, 0.5, 1} : std::vector<double>{1, 0.5, 0});
  check_grad(b, is_max ? std::vector<double>{1, 0.5, 0} : std::vector<double>{0, 0.5, 1});

  // Broadcast [2,1] against [1,3]: column sums of the per-element shares.
  Tensor c = f64({2, 5}, {2, 1}), d = f64({1, 2, 3}, {1, 3});
  op(c, d).sum().backward();
  if (is_max) {
    check_grad(c, {1 + 0.5 + 0, 3});
    check_grad(d, {0, 0.5, 1});
  } else {
    check_grad(c, {0 + 0.5 + 1, 0});
    check_grad(d, {1 + 1, 0.5 + 1, 1});
  }

  // Against itself every element is a tie: halves from both sides make one.
  Tensor e = f64({0.5, -1}, {2});
  op(e, e).sum().backward();
  check_grad(e, {1, 1});
}

// The ops of the activation rows (tests/core/activation_rows.cpp): each row on a transposed leaf
// and on an expanded one, away from its kinks; their generated backward rows are not
// differentiable (no second derivatives).
Entry from_activation_rows(OpId op, Rng& r) {
  bool backward = false;
  const auto rows = test::optable::activation_rows_of(op, &backward);
  if (rows.empty()) return {};
  if (backward) {
    return not_differentiable([op, &r] {
      return dispatch(op, {leaf(r, {2, 3}, -1, 1), leaf(r, {2, 3}, 0.5, 1.5)}, Attrs{});
    });
  }
  std::vector<Check> checks;
  for (const auto* row : rows) {
    const test::optable::Api1 api = row->api;
    checks.push_back({row->label + " of a transposed leaf",
                      {leaf(r, {3, 4}, row->lo, row->hi, row->kinks)},
                      [api](In x) { return api(x[0].t()); }});
    checks.push_back({row->label + " of an expanded leaf",
                      {leaf(r, {4}, row->lo, row->hi, row->kinks)},
                      [api](In x) {
                        return api(x[0].expand({2, 4}));
                      }});
  }
  return grad(std::move(checks));
}

Entry entry_for(OpId op, Rng& r) {
  auto U = [&](const Shape& s, double lo = -1.5, double hi = 1.5) { return leaf(r, s, lo, hi); };
  auto S = [&](const Shape& s) { return leaf(r, s, -1.5, 1.5, {0.0}, 0.2); };  // no zeros
  auto P = [&](const Shape& s) { return leaf(r, s, 0.5, 2.0); };               // positive
  const GradcheckOptions f32_trip{.eps = 1e-3, .atol = 1e-4, .rtol = 1e-3};

  switch (op) {
    // ---- unary pointwise
    case OpId::neg:
      return grad({{"neg of a transposed leaf", {U({3, 4})}, [](In x) { return -x[0].t(); }},
                   {"neg of a strided slice", {U({3, 6})}, [](In x) {
                      return neg(x[0].slice(1, 0, 6, 2));
                    }}});
    case OpId::abs:
      return grad({{"abs of a transposed leaf", {S({3, 4})}, [](In x) { return abs(x[0].t()); }},
                   {"abs of an expanded leaf", {S({1, 4})}, [](In x) {
                      return abs(x[0].expand({3, 4}));
                    }}});
    case OpId::relu:
      return grad({{"relu of a transposed leaf", {S({3, 4})}, [](In x) { return relu(x[0].t()); }},
                   {"relu of an expanded leaf", {S({4})}, [](In x) {
                      return x[0].expand({2, 4}).relu();
                    }}});
    case OpId::exp:
      return grad({{"exp of a transposed leaf", {U({3, 4})}, [](In x) { return exp(x[0].t()); }},
                   {"exp of a strided slice", {U({2, 6})}, [](In x) {
                      return x[0].slice(1, 1, 6, 2).exp();
                    }}});
    case OpId::log:
      return grad({{"log of a transposed leaf", {P({3, 4})}, [](In x) { return log(x[0].t()); }},
                   {"log of an expanded leaf", {P({3, 1})}, [](In x) {
                      return log(x[0].expand({3, 4}));
                    }}});
    case OpId::sqrt:
      return grad({{"sqrt of a transposed leaf", {P({3, 4})}, [](In x) { return sqrt(x[0].t()); }},
                   {"sqrt of a strided slice", {P({6})}, [](In x) {
                      return sqrt(x[0].slice(0, 0, 6, 3));
                    }}});
    case OpId::rsqrt:
      return grad(
          {{"rsqrt of a transposed leaf", {P({3, 4})}, [](In x) { return rsqrt(x[0].t()); }},
           {"rsqrt of an expanded leaf", {P({1, 3})}, [](In x) {
              return rsqrt(x[0].expand({2, 3}));
            }}});
    case OpId::sigmoid:
      return grad({{"sigmoid of a transposed leaf", {U({3, 4}, -3, 3)}, [](In x) {
                      return sigmoid(x[0].t());
                    }}});
    case OpId::tanh:
      return grad(
          {{"tanh of a transposed leaf", {U({3, 4}, -2, 2)}, [](In x) { return tanh(x[0].t()); }}});
    case OpId::gelu:
      return grad({{"exact gelu of a transposed leaf",
                    {U({3, 4}, -3, 3)},
                    [](In x) { return gelu(x[0].t()); }},
                   {"tanh-approximated gelu of a strided slice", {U({3, 8}, -3, 3)}, [](In x) {
                      return gelu(x[0].slice(1, 0, 8, 2), /*approximate_tanh=*/true);
                    }}});
    case OpId::clamp: {
      auto X = [&] { return leaf(r, {4, 5}, -1.5, 1.5, {-0.5, 0.7}, 0.1); };
      return grad(
          {{"clamp to both bounds of a transposed leaf",
            {X()},
            [](In x) { return clamp(x[0].t(), -0.5, 0.7); }},
           {"clamp below only", {X()}, [](In x) { return clamp(x[0], -0.5, std::nullopt); }},
           {"clamp above only", {X()}, [](In x) { return clamp(x[0], std::nullopt, 0.7); }}});
    }
    case OpId::cast:
      return grad({{"contiguous copy of a transposed leaf",
                    {U({3, 4})},
                    [](In x) { return x[0].t().contiguous(); }},
                   {"clone of a strided slice",
                    {U({3, 4})},
                    [](In x) { return x[0].slice(1, 1, 4, 2).clone(); }},
                   {"float64 to float32 and back",
                    {U({2, 3})},
                    [](In x) { return cast(cast(x[0].t(), kFloat32) * 3, kFloat64); },
                    f32_trip}},
                  [] {
                    Tensor x = f64({1.5, -2}, {2});
                    CHECK_FALSE(cast(x, kInt64).requires_grad());
                    CHECK_FALSE(cast(x, kBool).requires_grad());
                  });
    case OpId::fill:
      return not_differentiable([&] {
        Tensor c = U({2, 3}).clone();
        c.fill_(1.5);
        return c;
      });

    // ---- binary pointwise
    case OpId::add:
      return grad(
          {{"[3,1] + [1,4]", {U({3, 1}), U({1, 4})}, [](In x) { return x[0] + x[1]; }},
           {"3-D plus a broadcast row",
            {U({2, 3, 4}), U({4})},
            [](In x) { return add(x[0], x[1]); }},
           {"transposed leaf plus a scalar", {U({3, 4})}, [](In x) { return x[0].t() + 2.5; }},
           {"a leaf plus itself", {U({3})}, [](In x) { return x[0] + x[0]; }},
           {"add_ of a broadcast row into a non-leaf clone",
            {U({3, 4}), U({1, 4})},
            [](In x) {
              Tensor c = x[0].clone();
              c.add_(x[1]);
              return c;
            }},
           {"add_ of a transposed leaf and a scalar into a clone",
            {U({3, 4}), U({4, 3})},
            [](In x) {
              Tensor c = x[0].clone();
              c.add_(x[1].t());
              c.add_(1.0);
              return c;
            }}});
    case OpId::sub:
      return grad(
          {{"[3,1] - [1,4]", {U({3, 1}), U({1, 4})}, [](In x) { return x[0] - x[1]; }},
           {"scalar minus a transposed leaf", {U({3, 4})}, [](In x) { return 1.0 - x[0].t(); }},
           {"3-D minus a broadcast column", {U({2, 3, 4}), U({3, 1})}, [](In x) {
              return sub(x[0], x[1]);
            }}});
    case OpId::mul:
      return grad({{"[3,1] * [1,4]", {U({3, 1}), U({1, 4})}, [](In x) { return x[0] * x[1]; }},
                   {"a leaf times itself", {U({3, 2})}, [](In x) { return x[0] * x[0]; }},
                   {"transposed leaf times a strided slice",
                    {U({4, 3}), U({3, 8})},
                    [](In x) { return x[0].t() * x[1].slice(1, 0, 8, 2); }},
                   {"mul_ by a scalar on a non-leaf clone",
                    {U({3, 4})},
                    [](In x) {
                      Tensor c = x[0].clone();
                      c.mul_(-2.5);
                      return c;
                    }},
                   {"mul_ by a tensor that requires grad on a non-leaf clone",
                    {U({3, 4}), U({1, 4})},
                    [](In x) {
                      Tensor c = x[0].clone();
                      c.mul_(x[1]);
                      return c;
                    }}});
    case OpId::div:
      return grad(
          {{"[3,1] / [1,4]", {U({3, 1}), P({1, 4})}, [](In x) { return x[0] / x[1]; }},
           {"scalar over a transposed leaf", {P({3, 4})}, [](In x) { return 2.0 / x[0].t(); }},
           {"a leaf over itself plus one", {P({3})}, [](In x) { return x[0] / (x[0] + 1); }}});
    case OpId::pow:
      return grad({{"[3,1] ^ [1,4]", {P({3, 1}), U({1, 4})}, [](In x) { return pow(x[0], x[1]); }},
                   // A number exponent is pow_scalar (an activation row); these keep a tensor one.
                   {"transposed leaf cubed",
                    {U({3, 4})},
                    [](In x) { return pow(x[0].t(), from_vector<double>({3}, {1})); }},
                   {"square root as a power", {P({4})}, [](In x) {
                      return pow(x[0], from_vector<double>({0.5}, {1}));
                    }}});
    case OpId::maximum:
      return grad({{"maximum of [3,1] and [1,4]",
                    {U({3, 1}), U({1, 4})},
                    [](In x) { return maximum(x[0], x[1]); }},
                   {"maximum of a transposed leaf and a scalar",
                    {leaf(r, {3, 4}, -1.5, 1.5, {0.3})},
                    [](In x) { return maximum(x[0].t(), 0.3); }}},
                  [] { pairwise_ties(true); });
    case OpId::minimum:
      return grad({{"minimum of [3,1] and [1,4]",
                    {U({3, 1}), U({1, 4})},
                    [](In x) { return minimum(x[0], x[1]); }},
                   {"minimum of a scalar and a strided slice",
                    {leaf(r, {6}, -1.5, 1.5, {0.3})},
                    [](In x) { return minimum(0.3, x[0].slice(0, 1, 6, 2)); }}},
                  [] { pairwise_ties(false); });
    case OpId::eq:
      return not_differentiable([&] { return eq(U({3}), U({3})); });
    case OpId::ne:
      return not_differentiable([&] { return ne(U({3}), U({3})); });
    case OpId::lt:
      return not_differentiable([&] { return lt(U({3}), U({1})); });
    case OpId::le:
      return not_differentiable([&] { return le(U({3}), 0.5); });
    case OpId::gt:
      return not_differentiable([&] { return gt(U({3, 1}), U({1, 2})); });
    case OpId::ge:
      return not_differentiable([&] { return ge(U({3}).t(), U({3})); });
    case OpId::gelu_backward:
      return not_differentiable([&] { return dispatch(OpId::gelu_backward, {U({3}), U({3})}); });

    case OpId::where: {
      const Tensor c = from_vector<bool>(
          {true, false, false, true, true, true, false, false, true, false, true, false}, {3, 4});
      return grad({{"where over [3,1] and [1,4]",
                    {U({3, 1}), U({1, 4})},
                    [c](In x) { return where(c, x[0], x[1]); }},
                   {"where of a transposed leaf and a scalar",
                    {U({4, 3})},
                    [c](In x) { return where(c, x[0].t(), 0.5); }},
                   {"where of a scalar and an expanded leaf", {U({4})}, [c](In x) {
                      return where(c, -1.0, x[0].expand({3, 4}));
                    }}});
    }

    // ---- reductions
    case OpId::sum:
      return grad(
          {{"sum of everything", {U({2, 3, 4})}, [](In x) { return x[0].sum(); }},
           {"sum over dim 1", {U({2, 3, 4})}, [](In x) { return sum(x[0], {1}); }},
           {"sum over dim 1 keepdim", {U({2, 3, 4})}, [](In x) { return sum(x[0], {1}, true); }},
           {"sum over dims 0 and 2",
            {U({2, 3, 4})},
            [](In x) {
              return sum(x[0], {0, 2});
            }},
           {"sum over dims 0 and -1 keepdim",
            {U({2, 3, 4})},
            [](In x) {
              return sum(x[0], {0, -1}, true);
            }},
           {"sum over dim 0 of a transposed leaf",
            {U({3, 4})},
            [](In x) { return x[0].t().sum({0}); }},
           {"sum of a 0-dim leaf", {U({})}, [](In x) { return sum(x[0]); }}});
    case OpId::mean:
      return grad(
          {{"mean of everything", {U({2, 3, 4})}, [](In x) { return x[0].mean(); }},
           {"mean over dim 2", {U({2, 3, 4})}, [](In x) { return mean(x[0], {2}); }},
           {"mean over dim 2 keepdim", {U({2, 3, 4})}, [](In x) { return mean(x[0], {2}, true); }},
           {"mean over dims 0 and 1 keepdim",
            {U({2, 3, 4})},
            [](In x) {
              return mean(x[0], {0, 1}, true);
            }},
           {"mean over dim 1 of an expanded leaf", {U({3, 1})}, [](In x) {
              return x[0].expand({3, 4}).mean({1});
            }}});
    case OpId::amax:
      return grad(
          {{"amax of everything", {U({2, 3, 4})}, [](In x) { return amax(x[0]); }},
           {"amax over dim 1", {U({2, 3, 4})}, [](In x) { return amax(x[0], {1}); }},
           {"amax over dim 1 keepdim", {U({2, 3, 4})}, [](In x) { return amax(x[0], {1}, true); }},
           {"amax over dims 0 and 2",
            {U({2, 3, 4})},
            [](In x) {
              return amax(x[0], {0, 2});
            }},
           {"amax over dim 0 of a transposed leaf keepdim",
            {U({3, 4})},
            [](In x) { return amax(x[0].t(), {0}, true); }}},
          extremum_ties);
    case OpId::amin:
      return grad({{"amin of everything", {U({2, 3, 4})}, [](In x) { return x[0].min(); }},
                   {"amin over dim 2", {U({2, 3, 4})}, [](In x) { return amin(x[0], {2}); }},
                   {"amin over dims 1 and 2 keepdim",
                    {U({2, 3, 4})},
                    [](In x) {
                      return amin(x[0], {1, 2}, true);
                    }},
                   {"amin over dim 1 of a strided slice", {U({3, 8})}, [](In x) {
                      return amin(x[0].slice(1, 0, 8, 2), {1});
                    }}});
    case OpId::argmax:
      return not_differentiable([&] { return argmax(U({3, 4}), 1); });
    case OpId::logsumexp:
      return grad(
          {{"logsumexp over dim 1", {U({2, 3, 4})}, [](In x) { return logsumexp(x[0], {1}); }},
           {"logsumexp over dim 1 keepdim",
            {U({2, 3, 4})},
            [](In x) { return logsumexp(x[0], {1}, true); }},
           {"logsumexp over dims 0 and 2",
            {U({2, 3, 4})},
            [](In x) {
              return logsumexp(x[0], {0, 2});
            }},
           {"logsumexp of everything of a transposed leaf", {U({3, 4})}, [](In x) {
              return logsumexp(x[0].t(), {});
            }}});

    // ---- matrix products
    case OpId::mm:
      return grad({{"[3,4] x [4,2]", {U({3, 4}), U({4, 2})}, [](In x) { return mm(x[0], x[1]); }},
                   {"transposed leaf x strided slice",
                    {U({4, 3}), U({4, 4})},
                    [](In x) { return mm(x[0].t(), x[1].slice(1, 0, 4, 2)); }},
                   {"matmul of [2,3,4] and [4,5] folds into one mm",
                    {U({2, 3, 4}), U({4, 5})},
                    [](In x) { return matmul(x[0], x[1]); }},
                   {"linear with a bias", {U({3, 4}), U({2, 4}), U({2})}, [](In x) {
                      return linear(x[0], x[1], x[2]);
                    }}});
    case OpId::bmm:
      return grad({{"[2,3,4] x [2,4,5]",
                    {U({2, 3, 4}), U({2, 4, 5})},
                    [](In x) { return bmm(x[0], x[1]); }},
                   {"with a transposed right side",
                    {U({2, 3, 4}), U({2, 5, 4})},
                    [](In x) { return bmm(x[0], x[1].transpose(1, 2)); }},
                   {"with an expanded batch",
                    {U({1, 3, 4}), U({2, 4, 2})},
                    [](In x) {
                      return bmm(x[0].expand({2, 3, 4}), x[1]);
                    }},
                   {"matmul broadcasting the batch", {U({2, 1, 3, 4}), U({3, 4, 2})}, [](In x) {
                      return matmul(x[0], x[1]);
                    }}});

    // ---- convolution (the row itself: nn/conv.cpp's checks are tested in tests/nn)
    case OpId::conv2d: {
      auto conv = [](std::vector<int64_t> st, std::vector<int64_t> pad, std::vector<int64_t> dil,
                     int64_t groups) {
        Attrs a;
        a.conv_stride = Dims(st);
        a.conv_padding = Dims(pad);
        a.conv_dilation = Dims(dil);
        a.groups = groups;
        return [a](In x) {
          return dispatch(OpId::conv2d, {x[0].contiguous(), x[1].contiguous()}, a);
        };
      };
      return grad(
          {{"3x3, padding 1", {U({2, 2, 4, 5}), U({3, 2, 3, 3})}, conv({1, 1}, {1, 1}, {1, 1}, 1)},
           {"stride 2, uneven padding, 2 groups",
            {U({1, 4, 5, 4}), U({4, 2, 3, 2})},
            conv({2, 1}, {1, 0}, {1, 1}, 2)},
           {"dilation 2", {U({1, 1, 5, 5}), U({2, 1, 2, 2})}, conv({1, 1}, {0, 0}, {2, 2}, 1)},
           {"1x1, depthwise",
            {U({2, 3, 2, 3}), U({3, 1, 1, 1})},
            conv({1, 1}, {0, 0}, {1, 1}, 3)}});
    }
    case OpId::max_pool2d:
    case OpId::max_pool2d_backward: {
      auto pool = [](std::vector<int64_t> k, std::vector<int64_t> st, std::vector<int64_t> pad) {
        Attrs a;
        a.window = Dims(k);
        a.conv_stride = Dims(st);
        a.conv_padding = Dims(pad);
        a.conv_dilation = {1, 1};
        return a;
      };
      if (op == OpId::max_pool2d_backward) {
        const Attrs a = pool({2, 2}, {2, 2}, {0, 0});
        return not_differentiable([=] {
          return dispatch(op, {U({1, 2, 2, 2}), U({1, 2, 4, 4})}, a);
        });
      }
      auto run = [](Attrs a) {
        return [a](In x) { return dispatch(OpId::max_pool2d, {x[0].contiguous()}, a); };
      };
      return grad({{"2x2 stride 2", {U({2, 2, 4, 6})}, run(pool({2, 2}, {2, 2}, {0, 0}))},
                   {"3x3 stride 1, overlapping, padding 1",
                    {U({1, 2, 5, 4})},
                    run(pool({3, 3}, {1, 1}, {1, 1}))}});
    }
    case OpId::conv2d_backward_input:
    case OpId::conv2d_backward_weight: {
      Attrs a;
      a.conv_stride = {1, 1};
      a.conv_padding = {1, 1};
      a.conv_dilation = {1, 1};
      a.shape = op == OpId::conv2d_backward_input ? Shape{2, 2, 3, 3} : Shape{4, 2, 3, 3};
      const Tensor other = op == OpId::conv2d_backward_input ? U({4, 2, 3, 3}) : U({2, 2, 3, 3});
      return not_differentiable([=] { return dispatch(op, {U({2, 4, 3, 3}), other}, a); });
    }

    // ---- fused attention (tests/nn/test_attention_fused.cpp checks the rows in depth)
    case OpId::attention: {
      auto att = [](bool causal, bool interleaved) {
        Attrs a;
        a.attn_scale = 0.6;
        a.causal = causal;
        a.interleaved = interleaved;
        return [a](In x) { return dispatch(OpId::attention, {x[0], x[1], x[2]}, a); };
      };
      return grad({{"3-D", {U({2, 3, 4}), U({2, 5, 4}), U({2, 5, 4})}, att(false, false)},
                   {"causal, 4-D, interleaved",
                    {U({1, 2, 4, 3}), U({1, 2, 4, 3}), U({1, 2, 4, 3})},
                    att(true, true)}});
    }
    case OpId::attention_lse:
    case OpId::attention_backward_query:
    case OpId::attention_backward_kv: {
      Attrs a;
      a.attn_scale = 0.6;
      if (op == OpId::attention_lse)
        return not_differentiable([=] { return dispatch(op, {U({2, 3, 4}), U({2, 5, 4})}, a); });
      return not_differentiable([=] {
        return dispatch(op,
                        {U({2, 3, 4}), U({2, 3, 4}), U({2, 5, 4}), U({2, 5, 4}), U({2, 3}).detach(),
                         U({2, 3}).detach()},
                        a);
      });
    }

    // ---- normalisers and losses
    case OpId::softmax:
      return grad({{"softmax over dim 1", {U({3, 5})}, [](In x) { return softmax(x[0], 1); }},
                   {"softmax over dim 0", {U({3, 5})}, [](In x) { return softmax(x[0], 0); }},
                   {"softmax over the last dim of a transposed leaf",
                    {U({4, 3})},
                    [](In x) { return softmax(x[0].t(), -1); }},
                   {"softmax over the middle dim of 3-D", {U({2, 3, 2})}, [](In x) {
                      return softmax(x[0], 1);
                    }}});
    case OpId::log_softmax:
      return grad(
          {{"log_softmax over dim 1", {U({3, 5})}, [](In x) { return log_softmax(x[0], 1); }},
           {"log_softmax over dim 0 of a transposed leaf",
            {U({5, 3})},
            [](In x) { return log_softmax(x[0].t(), 0); }},
           {"log_softmax over the middle dim of 3-D", {U({2, 3, 2})}, [](In x) {
              return log_softmax(x[0], 1);
            }}});
    case OpId::cross_entropy: {
      const Tensor t = index({1, 0, 4, 2}, {4});
      const Tensor t_ign = index({3, 0, 3, 1}, {4});
      auto smoothed = [](double e, int64_t ignore) {
        return [e, ignore](const Tensor& logits, const Tensor& target) {
          Attrs a;
          a.label_smoothing = e;
          a.ignore_index = ignore;
          return dispatch(OpId::cross_entropy, {logits.contiguous(), target}, a);
        };
      };
      return grad(
          {{"per-sample losses of [4,5] logits",
            {U({4, 5}, -2, 2)},
            [t](In x) { return cross_entropy_per_sample(x[0], t); }},
           {"mean loss of transposed logits",
            {U({5, 4}, -2, 2)},
            [t](In x) { return cross_entropy_per_sample(x[0].t(), t).mean(); }},
           {"ignored samples",
            {U({4, 5}, -2, 2)},
            [t_ign](In x) { return cross_entropy_per_sample(x[0], t_ign, /*ignore_index=*/3); }},
           {"label smoothing 0.1",
            {U({4, 5}, -2, 2)},
            [t, smoothed](In x) { return smoothed(0.1, -100)(x[0], t); }},
           {"label smoothing 0.25 with ignored samples",
            {U({4, 5}, -2, 2)},
            [t_ign, smoothed](In x) { return smoothed(0.25, 3)(x[0], t_ign); }}});
    }
    case OpId::layer_norm: {
      auto norm = [](const Tensor& x, int64_t dim, double eps) {
        Attrs a;
        a.dim = dim;
        a.eps = eps;
        return dispatch(OpId::layer_norm, {x.contiguous()}, a);
      };
      return grad({{"layer_norm over the last dim", {U({3, 5})},
                    [norm](In x) { return norm(x[0], 1, 1e-5); }},
                   {"layer_norm over the last two dims of 3-D, a large eps", {U({2, 3, 4})},
                    [norm](In x) { return norm(x[0], 1, 0.5); }},
                   {"layer_norm of a transposed leaf", {U({4, 3})},
                    [norm](In x) { return norm(x[0].t(), 1, 1e-5); }}});
    }
    case OpId::layer_norm_backward:
      return not_differentiable([&] {
        Attrs a;
        a.dim = 1;
        return dispatch(OpId::layer_norm_backward, {U({3, 4}), U({3, 4})}, a);
      });
    case OpId::cross_entropy_backward:
      return not_differentiable([&] {
        return dispatch(OpId::cross_entropy_backward,
                        {U({4}), U({4, 5}), index({1, 0, 4, 2}, {4})});
      });

    // ---- indexing and joining
    case OpId::gather: {
      const Tensor i1 = index({0, 3, 3, 1, 2, 2}, {3, 2});
      const Tensor i0 = index({2, 0, 1, 2, 2, 2, 0, 1}, {2, 4});
      return grad({{"gather along dim 1 with repeats",
                    {U({3, 4})},
                    [i1](In x) { return gather(x[0], 1, i1); }},
                   {"gather along dim 0 with repeats",
                    {U({3, 4})},
                    [i0](In x) { return gather(x[0], 0, i0); }},
                   {"gather along dim -1 of a transposed leaf", {U({4, 3})}, [i1](In x) {
                      return gather(x[0].t(), -1, i1);
                    }}});
    }
    case OpId::index_select: {
      const Tensor i = index({2, 0, 2}, {3});
      return grad({{"index_select rows with a repeat",
                    {U({4, 3})},
                    [i](In x) { return index_select(x[0], 0, i); }},
                   {"index_select columns of a transposed leaf",
                    {U({3, 4})},
                    [i](In x) { return index_select(x[0].t(), 1, i); }},
                   {"index_select of a 1-D leaf", {U({5})}, [i](In x) {
                      return index_select(x[0], 0, i);
                    }}});
    }
    case OpId::one_hot:
      return not_differentiable([] { return one_hot(index({0, 2, 1}, {3}), 3); });
    case OpId::cat:
      return grad({{"cat of three along dim 1",
                    {U({2, 1}), U({2, 3}), U({2, 2})},
                    [](In x) {
                      return cat({x[0], x[1], x[2]}, 1);
                    }},
                   {"cat of a transposed leaf and another along dim 0",
                    {U({3, 1}), U({2, 3})},
                    [](In x) {
                      return cat({x[0].t(), x[1]}, 0);
                    }},
                   {"cat of a leaf with itself",
                    {U({2, 2})},
                    [](In x) {
                      return cat({x[0], x[0]}, -1);
                    }},
                   {"stack of two", {U({3}), U({3})}, [](In x) {
                      return stack({x[0], x[1]}, 1);
                    }}});
    case OpId::scatter_add: {
      auto scatter = [](const Tensor& src, const Tensor& idx, int64_t dim, const Shape& shape) {
        Attrs a;
        a.dim = dim;
        a.shape = shape;
        return dispatch(OpId::scatter_add, {src, idx}, a);
      };
      const Tensor i1 = index({0, 3, 0, 1, 1, 2}, {2, 3});
      const Tensor i0 = index({2, 0, 2, 2}, {2, 2});
      return grad({{"scatter_add along dim 1 with repeats",
                    {U({2, 3})},
                    [=](In x) {
                      return scatter(x[0], i1, 1, {2, 4});
                    }},
                   {"scatter_add along dim 0 into a wider target",
                    {U({2, 2})},
                    [=](In x) {
                      return scatter(x[0], i0, 0, {3, 3});
                    }},
                   {"scatter_add of a transposed leaf made contiguous", {U({3, 2})}, [=](In x) {
                      return scatter(x[0].t().contiguous(), i1, 1, {2, 4});
                    }}});
    }

    // ---- views
    case OpId::view:
      return grad(
          {{"view [3,4] as [4,3]",
            {U({3, 4})},
            [](In x) {
              return x[0].view({4, 3}) * 2;
            }},
           {"reshape of a transposed leaf (a copy)",
            {U({3, 4})},
            [](In x) { return x[0].t().reshape({12}); }},
           {"flatten", {U({2, 3, 2})}, [](In x) { return x[0].flatten(1); }},
           {"unsqueeze then squeeze", {U({3})}, [](In x) { return x[0].unsqueeze(0).squeeze(); }},
           {"select a row", {U({3, 4})}, [](In x) { return x[0].select(0, 1); }}});
    case OpId::permute:
      return grad(
          {{"permute a 3-D leaf",
            {U({2, 3, 4})},
            [](In x) {
              return x[0].permute({2, 0, 1});
            }},
           {"transpose dims 0 and 2", {U({2, 3, 4})}, [](In x) { return x[0].transpose(0, 2); }},
           {"t of a strided slice", {U({3, 6})}, [](In x) { return x[0].slice(1, 0, 6, 2).t(); }}});
    case OpId::slice:
      return grad({{"slice with a step", {U({3, 5})}, [](In x) { return x[0].slice(1, 1, 5, 2); }},
                   {"narrow rows", {U({4, 3})}, [](In x) { return x[0].narrow(0, 1, 2); }},
                   {"slice of a slice of a transposed leaf", {U({6, 4})}, [](In x) {
                      return x[0].t().slice(1, 1, 6, 2).slice(0, 2, 4);
                    }}});
    case OpId::expand:
      return grad({{"expand [3,1] to [2,3,4]",
                    {U({3, 1})},
                    [](In x) {
                      return x[0].expand({2, 3, 4});
                    }},
                   {"expand a row",
                    {U({4})},
                    [](In x) {
                      return x[0].expand({3, 4});
                    }},
                   {"expand a 0-dim leaf", {U({})}, [](In x) {
                      return x[0].expand({2, 3}) * 1.5;
                    }}});

    // ---- factories and randomness: no tensor inputs, nothing to differentiate
    case OpId::arange:
      return not_differentiable([] { return arange(0.0, 5.0, 1.0, TensorOptions(kFloat64)); });
    case OpId::rand:
      return not_differentiable([] { return rand({3}, TensorOptions(kFloat64)); });
    case OpId::randn:
      return not_differentiable([] { return randn({3}, TensorOptions(kFloat64)); });
    case OpId::randint:
      return not_differentiable([] { return randint(0, 5, {3}); });

    case OpId::sgd_update:
      // Updates the parameter in place and returns nothing. The gradient input requires grad
      // here (as under a graph of gradients); the parameter does not, so no in-place rule on
      // leaves is involved, and nothing may be recorded on it.
      return not_differentiable([] {
        Tensor p = from_vector<float>({1, 2, 3}, {3});
        Tensor g = from_vector<float>({0.5f, 1, -1}, {3});
        g.requires_grad_();
        const Tensor hyper = from_vector<float>({0.5f, 0, 0, 0}, {4});  // lr, momentum, ...
        const Tensor step = zeros({});
        Attrs a;
        a.num_tensors = 1;
        const Tensor out = dispatch(OpId::sgd_update, {hyper, step, p, g}, a);
        CHECK(p.is_leaf());
        CHECK_FALSE(p.requires_grad());
        const std::vector<float> v = p.to_vector<float>();
        CHECK(v == std::vector<float>{0.75f, 1.5f, 3.5f});
        return out;
      });

    case OpId::amp_unscale:
      // In place, no output; nothing recorded on the gradient it scales.
      return not_differentiable([] {
        Tensor g = from_vector<float>({2, -4}, {2});
        Tensor found = zeros({});
        Attrs a;
        a.num_tensors = 1;
        a.grads_only = true;
        const Tensor out =
            dispatch(OpId::amp_unscale, {from_vector<float>({0.5f}, {1}), found, g}, a);
        CHECK_FALSE(g.requires_grad());
        CHECK(g.to_vector<float>() == std::vector<float>{1, -2});
        return out;
      });

    case OpId::multi_norm:
      // A vector of norms that carries no gradient, even of inputs that require one
      // (clip_grad_norm_ runs it under no_grad; PyTorch's _foreach_norm does have a gradient).
      return not_differentiable([] {
        Tensor g = from_vector<float>({3, -4}, {2});
        g.requires_grad_();
        const Tensor out = multi_norm({g}, 2);
        CHECK(out.to_vector<float>() == std::vector<float>{5});
        return out;
      });

    case OpId::adam_update:
    case OpId::rmsprop_update:
    case OpId::adagrad_update:
      // In place, no output, nothing recorded on the parameter even when the gradient input
      // requires grad (kernels and their numbers: tests/core/op_trials_adam_family.cpp).
      return not_differentiable([op] {
        Tensor p = from_vector<float>({1, 2, 3}, {3});
        Tensor g = from_vector<float>({0.5f, 1, -1}, {3});
        g.requires_grad_();
        std::vector<double> h = {0.5, 0.9, 0.99, 1e-8, 0};
        if (op == OpId::adagrad_update) h.resize(4);
        Attrs a;
        a.num_tensors = 1;
        a.num_states = op == OpId::adam_update ? 2 : 1;
        std::vector<Tensor> in = {from_vector(h, {static_cast<int64_t>(h.size())}), zeros({}), p,
                                  g};
        for (int64_t k = 0; k < a.num_states; ++k) in.push_back(zeros({3}));
        const Tensor out = dispatch(op, std::span<const Tensor>(in), a);
        CHECK(p.is_leaf());
        CHECK_FALSE(p.requires_grad());
        CHECK(p.to_vector<float>() != std::vector<float>{1, 2, 3});
        return out;
      });

    case OpId::all_reduce:
      // Across processes: a world of one rank here (what reaches the other ranks is theirs to
      // differentiate; DDP reduces gradients, which carry no graph).
      return not_differentiable([] {
        struct One final : Communicator {
          void all_reduce(const Tensor&, ReduceOp) override {}
          Device device() const override { return Device::cpu(); }
          std::string describe() const override { return "one rank"; }
          int rank() const override { return 0; }
          int size() const override { return 1; }
          std::vector<uint64_t> all_gather_words(const std::vector<uint64_t>& w) override {
            return w;
          }
        };
        static const int64_t id = register_communicator(std::make_shared<One>());
        Tensor t = from_vector<double>({1, 2}, {2});
        Attrs a;
        a.group = id;
        return dispatch(OpId::all_reduce, {t}, a, &t);
      });
    case OpId::to_device:
      return grad({{"to the same device",
                    {U({2, 3})},
                    [](In x) { return to_device(x[0].t(), Device::cpu()) * 2; }},
                   {"through the GPU and back when there is one", {U({2, 3})}, [](In x) {
                      if (!cuda::is_available()) return to_device(x[0], Device::cpu());
                      return to_device(to_device(x[0].t(), Device::cuda(0)) * 2, Device::cpu());
                    }}});
    default:
      // Rows of the activation table; an op in neither place fails the loop below.
      return from_activation_rows(op, r);
  }
  return {};  // an op of the table without an entry: the test fails below
}

}  // namespace

TEST_CASE("Every op of the table passes gradcheck or is marked not differentiable", "[autograd]") {
  Rng rng(20240611);
  int checked = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    INFO("op " << op_name(op));
    Entry e;
    try {
      e = entry_for(op, rng);
    } catch (const std::exception& ex) {
      FAIL_CHECK("building the entry threw: " << ex.what());
      continue;
    }
    CHECK(e.present);
    if (!e.present) continue;
    CHECK(autograd::is_differentiable(op) == e.differentiable);

    if (!e.differentiable) {
      OpLog log;
      try {
        const Tensor out = e.call();
        CHECK(log.saw(op));
        CHECK_FALSE((out.defined() && out.requires_grad()));
        if (out.defined()) CHECK(out.grad_fn() == nullptr);
      } catch (const std::exception& ex) {
        FAIL_CHECK("the call threw: " << ex.what());
      }
    } else {
      CHECK_FALSE(e.checks.empty());
      for (const Check& c : e.checks) {
        INFO(c.what);
        std::string report;
        bool reached = false;
        try {
          {
            OpLog log;
            const Tensor y = c.fn(c.inputs);
            reached = log.saw(op);
            CHECK(y.requires_grad());
          }
          report = autograd::gradcheck_report(c.fn, c.inputs, c.opts);
        } catch (const std::exception& ex) {
          report = std::string("threw: ") + ex.what();
        }
        CHECK(reached);
        CHECK(report == "");
        ++checked;
      }
    }
    if (e.hand) {
      try {
        e.hand();
      } catch (const std::exception& ex) {
        FAIL_CHECK("hand-derived check threw: " << ex.what());
      }
    }
  }
  CHECK(checked > 100);
}

TEST_CASE("gradcheck reports a wrong gradient and refuses inputs it cannot perturb", "[autograd]") {
  Tensor x = from_vector<double>({0.5, -1.25, 2}, {3});
  x.requires_grad_();
  // Backward sees x * const, finite differences see x * x: the analytical gradient is half.
  const std::string report =
      autograd::gradcheck_report([](In in) { return in[0] * in[0].detach(); }, {x});
  CHECK_THAT(report, Catch::Matchers::Contains("input 0"));
  CHECK(autograd::gradcheck([](In in) { return in[0] * in[0]; }, {x}));
  CHECK_FALSE(x.grad().defined());  // gradcheck leaves no gradient behind

  Tensor f = from_vector<float>({1, 2}, {2});
  f.requires_grad_();
  CHECK_THROWS_AS(autograd::gradcheck_report([](In in) { return in[0] * 2; }, {f}), Error);
  Tensor t = from_vector<double>({1, 2, 3, 4}, {2, 2}).t();
  t.requires_grad_();
  CHECK_THROWS_AS(autograd::gradcheck_report([](In in) { return in[0] * 2; }, {t}), Error);
}
