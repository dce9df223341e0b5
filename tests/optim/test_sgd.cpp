// SGD against a float64 transcription of PyTorch's algorithm (tests/optim/sgd_reference.h):
// every option combination over several steps, parameters that get a gradient late or never,
// hyperparameter changes between steps, several groups, mixed dtypes, validation errors.
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "optim/sgd.h"
#include "optim/sgd_reference.h"
#include "test_util.h"

using namespace ember;
using test::RefSGD;
using test::Vec;

namespace {

struct Combo {
  double momentum, dampening, weight_decay;
  bool nesterov, maximize;
  std::string str() const {
    return "momentum=" + std::to_string(momentum) + " dampening=" + std::to_string(dampening) +
           " weight_decay=" + std::to_string(weight_decay) +
           " nesterov=" + std::to_string(nesterov) + " maximize=" + std::to_string(maximize);
  }
};

// Every valid combination (nesterov needs momentum and no dampening).
std::vector<Combo> all_combos() {
  std::vector<Combo> out;
  for (double m : {0.0, 0.9})
    for (double d : {0.0, 0.3})
      for (double wd : {0.0, 0.05})
        for (bool nes : {false, true})
          for (bool mx : {false, true}) {
            if (nes && (m == 0 || d != 0)) continue;
            out.push_back({m, d, wd, nes, mx});
          }
  return out;
}

// The value a hyperparameter has once stored in the optimizer's float32 device tensor.
double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

RefSGD reference_for(double lr, const Combo& c) {
  RefSGD r;
  r.lr = f32(lr);
  r.momentum = f32(c.momentum);
  r.dampening = f32(c.dampening);
  r.weight_decay = f32(c.weight_decay);
  r.nesterov = c.nesterov;
  r.maximize = c.maximize;
  return r;
}

optim::SGDOptions options_for(double lr, const Combo& c) {
  return optim::SGDOptions(lr)
      .momentum(c.momentum)
      .dampening(c.dampening)
      .weight_decay(c.weight_decay)
      .nesterov(c.nesterov)
      .maximize(c.maximize);
}

// |a - b| <= tol * (1 + |b|) elementwise.
void check_close(const Vec& actual, const Vec& expected, double tol, const std::string& what) {
  INFO(what << ": got " << test::join(actual) << ", expected " << test::join(expected));
  REQUIRE(actual.size() == expected.size());
  for (size_t k = 0; k < actual.size(); ++k) {
    INFO("element " << k);
    CHECK(std::fabs(actual[k] - expected[k]) <= tol * (1 + std::fabs(expected[k])));
  }
}

// Parameters of several shapes; which of them get a gradient at each step.
const std::vector<Shape> kShapes = {{3, 4}, {5}, {}, {2, 1, 3}};
bool has_grad(size_t param, int step) {
  if (param == 1) return step >= 2;  // its momentum buffer is born after the group's first step
  if (param == 3) return false;      // never: must stay untouched, with no buffer
  return true;
}

// Runs `steps` updates of SGD and the reference side by side on `device`/`dtype` and checks
// parameters and momentum buffers after every step. `between` may change both between steps.
template <class Between>
void run_against_reference(const Combo& c, DType dtype, Device device, double tol, int steps,
                           Between&& between) {
  std::mt19937 rng(1234);
  std::vector<Vec> ref_params;
  std::vector<Tensor> params;
  for (const Shape& s : kShapes) {
    Vec v = test::random_vec(rng, static_cast<size_t>(numel_of(s)));
    for (double& x : v) x = test::round_to(dtype, x);
    ref_params.push_back(v);
    params.push_back(test::make(v, s, dtype, device).requires_grad_());
  }
  const double lr = 0.1;
  optim::SGD opt(params, options_for(lr, c));
  RefSGD ref = reference_for(lr, c);
  const Vec untouched = test::read(params[3]);
  for (int step = 0; step < steps; ++step) {
    between(step, opt, ref);
    std::vector<std::optional<Vec>> grads(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (!has_grad(i, step)) {
        params[i].set_grad(Tensor());
        continue;
      }
      Vec g = test::random_vec(rng, ref_params[i].size());
      for (double& x : g) x = test::round_to(dtype, x);
      grads[i] = g;
      params[i].set_grad(test::make(g, kShapes[i], dtype, device));
    }
    opt.step();
    ref.step(ref_params, grads);
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string what = c.str() + " " + std::string(dtype_name(dtype)) + " step " +
                               std::to_string(step) + " param " + std::to_string(i);
      check_close(test::read(params[i]), ref_params[i], tol, what);
      const Tensor buf = opt.momentum_buffer(0, i);
      const bool want_buf = ref.buffers.size() > i && ref.buffers[i].has_value();
      CHECK(buf.defined() == want_buf);
      if (buf.defined() && want_buf) check_close(test::read(buf), *ref.buffers[i], tol, what);
    }
  }
  CHECK(test::read(params[3]) == untouched);
  CHECK(!opt.momentum_buffer(0, 3).defined());
}

void no_change(int, optim::SGD&, RefSGD&) {}

}  // namespace

TEST_CASE("SGD matches PyTorch's algorithm for every option combination", "[optim]") {
  for (const Combo& c : all_combos()) {
    run_against_reference(c, kFloat64, Device::cpu(), 1e-12, 5, no_change);
    run_against_reference(c, kFloat32, Device::cpu(), 2e-6, 5, no_change);
  }
}

TEST_CASE("SGD 16-bit parameters compute in float and round once per step", "[optim]") {
  // One step from known values: p' = round(p - lr * d), buf = round(d).
  for (DType dt : {kFloat16, kBFloat16}) {
    const Vec p0 = {0.5, -1.25, 2.0, 0.125}, g = {0.25, 0.5, -1.0, 3.0};
    Tensor p = test::make(p0, {4}, dt).requires_grad_();
    p.set_grad(test::make(g, {4}, dt));
    optim::SGD opt({p}, optim::SGDOptions(0.5).momentum(0.9).weight_decay(0.5));
    opt.step();
    Vec want(4), want_buf(4);
    for (size_t k = 0; k < 4; ++k) {
      const double d = g[k] + f32(0.5) * p0[k];
      want_buf[k] = test::round_to(dt, d);
      want[k] = test::round_to(dt, p0[k] - f32(0.5) * want_buf[k]);
    }
    INFO(dtype_name(dt));
    CHECK(test::read(p) == want);
    CHECK(test::read(opt.momentum_buffer(0, 0)) == want_buf);
  }
}

TEST_CASE("SGD set_lr and group setters between steps take effect", "[optim]") {
  // lr drops at step 2, momentum and weight decay change at step 3 (with dampening 0 first and
  // nonzero later), and the reference changes the same way.
  const Combo c{0.9, 0.0, 0.0, false, false};
  auto change = [](int step, optim::SGD& opt, RefSGD& ref) {
    if (step == 2) {
      opt.set_lr(0.01);
      ref.lr = f32(0.01);
      CHECK(opt.get_lr(0) == 0.01);
      CHECK(opt.options(0).lr() == 0.01);
    }
    if (step == 3) {
      opt.set_momentum(0, 0.5);
      opt.set_dampening(0, 0.25);
      opt.set_weight_decay(0, 0.125);
      ref.momentum = 0.5;
      ref.dampening = 0.25;
      ref.weight_decay = 0.125;
    }
    if (step == 4) {
      opt.set_maximize(0, true);
      ref.maximize = true;
      opt.set_options(0, optim::SGDOptions(0.2).momentum(0.7));
      ref.lr = f32(0.2);
      ref.momentum = f32(0.7);
      ref.dampening = 0;
      ref.weight_decay = 0;
      ref.maximize = false;
    }
  };
  run_against_reference(c, kFloat64, Device::cpu(), 1e-12, 6, change);
}

TEST_CASE("SGD momentum turned on later starts its buffers like PyTorch", "[optim]") {
  // momentum 0 for two steps (no buffers), then 0.9 with dampening: the buffers are born
  // after the group's first step and must start as a copy of d_p, not (1 - dampening) d_p.
  const Combo c{0.0, 0.5, 0.0, false, false};
  auto change = [](int step, optim::SGD& opt, RefSGD& ref) {
    if (step == 2) {
      opt.set_momentum(0, 0.9);
      ref.momentum = f32(0.9);
    }
  };
  run_against_reference(c, kFloat64, Device::cpu(), 1e-12, 5, change);
}

TEST_CASE("SGD parameter groups keep their own options", "[optim]") {
  std::mt19937 rng(7);
  Vec a0 = test::random_vec(rng, 6), b0 = test::random_vec(rng, 4), c0 = test::random_vec(rng, 3);
  Tensor a = test::make(a0, {2, 3}, kFloat64).requires_grad_();
  Tensor b = test::make(b0, {4}, kFloat64).requires_grad_();
  Tensor c = test::make(c0, {3}, kFloat32).requires_grad_();  // float32 next to float64
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});  // the defaults
  groups.emplace_back(std::vector<Tensor>{b, c},
                      optim::SGDOptions(0.5).momentum(0.5).nesterov(true));
  optim::SGD opt(groups, optim::SGDOptions(0.25).weight_decay(0.5));
  REQUIRE(opt.num_groups() == 2);
  CHECK(opt.options(0).lr() == 0.25);
  CHECK(opt.options(0).weight_decay() == 0.5);
  CHECK(opt.options(1).momentum() == 0.5);
  CHECK(opt.options(1).weight_decay() == 0);

  RefSGD r0, r1;
  r0.lr = 0.25;
  r0.weight_decay = 0.5;
  r1.lr = 0.5;
  r1.momentum = 0.5;
  r1.nesterov = true;
  std::vector<Vec> p0 = {a0}, p1 = {b0, c0};
  for (double& x : p1[1]) x = f32(x);
  for (int step = 0; step < 3; ++step) {
    Vec ga = test::random_vec(rng, 6), gb = test::random_vec(rng, 4), gc = test::random_vec(rng, 3);
    for (double& x : gc) x = f32(x);
    a.set_grad(test::make(ga, {2, 3}, kFloat64));
    b.set_grad(test::make(gb, {4}, kFloat64));
    c.set_grad(test::make(gc, {3}, kFloat32));
    opt.step();
    r0.step(p0, {ga});
    r1.step(p1, {gb, gc});
    check_close(test::read(a), p0[0], 1e-12, "group 0");
    check_close(test::read(b), p1[0], 1e-12, "group 1 float64");
    check_close(test::read(c), p1[1], 2e-6, "group 1 float32");
  }
  CHECK(opt.steps(0) == 3);
  CHECK(opt.steps(1) == 3);

  // set_lr(group) changes one group only; set_lr() all of them.
  opt.set_lr(1, 0.125);
  CHECK(opt.get_lr(0) == 0.25);
  CHECK(opt.get_lr(1) == 0.125);
  opt.set_lr(1.0);
  CHECK(opt.get_lr(0) == 1.0);
  CHECK(opt.get_lr(1) == 1.0);
  CHECK_THROWS_WITH(opt.set_lr(2, 0.1), Catch::Contains("group 2 out of range"));
  CHECK_THROWS_WITH(opt.options(5), Catch::Contains("group 5 out of range"));
}

TEST_CASE("SGD add_param_group after construction", "[optim]") {
  Tensor a = test::make({1.0, 2.0}, {2}, kFloat32).requires_grad_();
  Tensor b = test::make({3.0}, {1}, kFloat32).requires_grad_();
  optim::SGD opt({a}, optim::SGDOptions(0.5));
  opt.add_param_group(optim::ParamGroup({b}, optim::SGDOptions(0.25).momentum(0.5)));
  a.set_grad(test::make({1.0, 1.0}, {2}, kFloat32));
  b.set_grad(test::make({2.0}, {1}, kFloat32));
  opt.step();
  CHECK(test::read(a) == Vec{0.5, 1.5});
  CHECK(test::read(b) == Vec{2.5});
  opt.step();
  // b: buf = 0.5 * 2 + 2 = 3, b = 2.5 - 0.25 * 3
  CHECK(test::read(b) == Vec{1.75});
  CHECK_THROWS_WITH(opt.add_param_group(optim::ParamGroup({a})),
                    Catch::Contains("is already parameter 0 of group 0"));
}

TEST_CASE("SGD updates a model trained with autograd", "[optim]") {
  // loss = sum(w * w * x): dloss/dw = 2 w x, computed by backward, applied by step.
  const Vec w0 = {0.5, -1.0, 2.0}, x = {1.0, 2.0, -0.5};
  Tensor w = test::make(w0, {3}, kFloat64).requires_grad_();
  Tensor xt = test::make(x, {3}, kFloat64);
  optim::SGD opt({w}, optim::SGDOptions(0.1).momentum(0.9));
  RefSGD ref;
  ref.lr = f32(0.1);
  ref.momentum = f32(0.9);
  std::vector<Vec> rp = {w0};
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    Tensor loss = sum(w * w * xt);
    loss.backward();
    Vec g(3);
    for (size_t k = 0; k < 3; ++k) g[k] = 2 * rp[0][k] * x[k];
    opt.step();
    ref.step(rp, {g});
    check_close(test::read(w), rp[0], 1e-12, "w at step " + std::to_string(step));
    CHECK(w.is_leaf());
    CHECK(!w.grad_fn());
  }
}

TEST_CASE("Optimizer zero_grad drops or zeroes gradients", "[optim]") {
  Tensor a = test::make({1.0, 2.0}, {2}, kFloat32).requires_grad_();
  Tensor b = test::make({3.0}, {1}, kFloat32).requires_grad_();
  optim::SGD opt({a, b}, optim::SGDOptions(0.1));
  Tensor ga = test::make({5.0, 6.0}, {2}, kFloat32);
  a.set_grad(ga);
  opt.zero_grad(false);  // b has no gradient: stays without one
  REQUIRE(a.grad().defined());
  CHECK(a.grad().is_same(ga));  // zeroed in place, not replaced
  CHECK(test::read(ga) == Vec{0, 0});
  CHECK(!b.grad().defined());
  opt.zero_grad();
  CHECK(!a.grad().defined());
  // No gradients at all: step is a no-op that changes nothing.
  opt.step();
  CHECK(test::read(a) == Vec{1.0, 2.0});
  CHECK(opt.steps(0) == 0);
}

TEST_CASE("SGD rejects invalid options like PyTorch", "[optim]") {
  Tensor p = test::make({1.0}, {1}, kFloat32).requires_grad_();
  auto make = [&](const optim::SGDOptions& o) { optim::SGD opt({p}, o); };
  CHECK_THROWS_AS(make(optim::SGDOptions(-0.1)), Error);
  CHECK_THROWS_WITH(make(optim::SGDOptions(-0.1)), Catch::Contains("learning rate"));
  CHECK_THROWS_WITH(make(optim::SGDOptions(std::nan(""))),
                    Catch::Contains("invalid learning rate nan"));
  CHECK_THROWS_WITH(make(optim::SGDOptions(0.1).momentum(-0.5)), Catch::Contains("momentum"));
  CHECK_THROWS_WITH(make(optim::SGDOptions(0.1).weight_decay(-1)), Catch::Contains("weight_decay"));
  CHECK_THROWS_WITH(make(optim::SGDOptions(0.1).nesterov(true)), Catch::Contains("nesterov"));
  CHECK_THROWS_WITH(make(optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)),
                    Catch::Contains("dampening"));
  CHECK_NOTHROW(make(optim::SGDOptions(0.0).momentum(0.9).nesterov(true)));

  // Parameter lists.
  CHECK_THROWS_WITH(optim::SGD(std::vector<Tensor>{}, optim::SGDOptions(0.1)),
                    Catch::Contains("empty parameter list"));
  CHECK_THROWS_WITH(optim::SGD({p, p}, optim::SGDOptions(0.1)), Catch::Contains("repeats"));
  CHECK_THROWS_WITH(optim::SGD({test::make({1.0}, {1}, kInt64)}, optim::SGDOptions(0.1)),
                    Catch::Contains("floating"));
  CHECK_THROWS_WITH(optim::SGD({Tensor()}, optim::SGDOptions(0.1)),
                    Catch::Contains("parameter 0 of group 0 is undefined"));
  Tensor non_leaf = p * 2.0;
  CHECK_THROWS_WITH(optim::SGD({non_leaf}, optim::SGDOptions(0.1)), Catch::Contains("leaf"));

  // A rejected change leaves the group as it was.
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  CHECK_THROWS_WITH(opt.set_lr(-1), Catch::Contains("invalid learning rate -1"));
  CHECK(opt.get_lr(0) == 0.1);
  CHECK_THROWS_WITH(opt.set_nesterov(0, true), Catch::Contains("nesterov"));
  CHECK(!opt.options(0).nesterov());
  CHECK_THROWS_WITH(opt.set_momentum(0, -1), Catch::Contains("invalid momentum -1"));
  CHECK(opt.options(0).momentum() == 0);
  p.set_grad(test::make({1.0}, {1}, kFloat32));
  opt.step();
  CHECK(test::read(p) == Vec{f32(1.0 - f32(0.1))});

  // A gradient that does not fit its parameter is an error, not a crash, and nothing changes:
  // not the parameters of an earlier group, not the step counters.
  Tensor q = test::make({1.0, 2.0, 3.0, 4.0}, {2, 2}, kFloat32).requires_grad_();
  Tensor r = test::make({5.0}, {1}, kFloat32).requires_grad_();
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{r});
  groups.emplace_back(std::vector<Tensor>{q});
  optim::SGD opt2(groups, optim::SGDOptions(0.1).momentum(0.9));
  r.set_grad(test::make({1.0}, {1}, kFloat32));
  q.impl()->autograd->grad = test::make({1.0, 2.0}, {2}, kFloat32);  // past set_grad's check
  CHECK_THROWS_WITH(opt2.step(), Catch::Contains("gradient of parameter 0 of group 1") &&
                                     Catch::Contains("[2]") && Catch::Contains("[2, 2]"));
  CHECK(test::read(r) == Vec{5.0});
  CHECK(!opt2.momentum_buffer(0, 0).defined());
  CHECK(opt2.steps(0) == 0);
  Tensor strided = test::make({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}, kFloat32).slice(1, 0, 2);
  strided.requires_grad_();
  optim::SGD opt3({strided}, optim::SGDOptions(0.1));
  strided.set_grad(test::make({1, 1, 1, 1}, {2, 2}, kFloat32));
  CHECK_THROWS_WITH(opt3.step(), Catch::Contains("not contiguous"));
}

TEST_CASE("SGD reads a non-contiguous gradient", "[optim]") {
  Tensor p = test::make({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat64).requires_grad_();
  Tensor g = test::make({1, 2, 3, 4, 5, 6}, {3, 2}, kFloat64).t();  // [[1,3,5],[2,4,6]]
  p.set_grad(g);
  optim::SGD opt({p}, optim::SGDOptions(f32(0.5)));
  opt.step();
  CHECK(test::read(p) == Vec{0.5, 0.5, 0.5, 3.0, 3.0, 3.0});
}

TEST_CASE("SGD matches the reference on CUDA", "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (const Combo& c : all_combos()) {
    run_against_reference(c, kFloat64, Device::cuda(0), 1e-12, 4, no_change);
    run_against_reference(c, kFloat32, Device::cuda(0), 2e-6, 4, no_change);
  }
  const Combo c{0.9, 0.0, 0.0, false, false};
  auto change = [](int step, optim::SGD& opt, RefSGD& ref) {
    if (step == 2) {
      opt.set_lr(0.01);
      ref.lr = f32(0.01);
      opt.set_dampening(0, 0.5);
      ref.dampening = 0.5;
    }
  };
  run_against_reference(c, kFloat32, Device::cuda(0), 2e-6, 5, change);
}

TEST_CASE("SGD 16-bit parameters on CUDA", "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {kFloat16, kBFloat16}) {
    const Vec p0 = {0.5, -1.25, 2.0, 0.125}, g = {0.25, 0.5, -1.0, 3.0};
    Tensor p = test::make(p0, {4}, dt, Device::cuda(0)).requires_grad_();
    p.set_grad(test::make(g, {4}, dt, Device::cuda(0)));
    optim::SGD opt({p}, optim::SGDOptions(0.5).momentum(0.9).weight_decay(0.5));
    opt.step();
    Vec want(4);
    for (size_t k = 0; k < 4; ++k) {
      const double b = test::round_to(dt, g[k] + f32(0.5) * p0[k]);
      want[k] = test::round_to(dt, p0[k] - f32(0.5) * b);
    }
    INFO(dtype_name(dt));
    CHECK(test::read(p) == want);
  }
}

TEST_CASE("SGD holds no gradient after its step: zero_grad frees them", "[optim]") {
  // PyTorch's zero_grad(set_to_none) frees the gradients before the next backward; an optimizer
  // that kept a reference would carry two sets of gradients through every step.
  manual_seed(3);
  Tensor w = randn({8, 4}).requires_grad_(), b = randn({4}).requires_grad_();
  optim::SGD opt({w, b}, optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss = sum(mul(add(mm(randn({2, 8}), w), b), 2.0));
    loss.backward();
    const std::weak_ptr<TensorImpl> gw = w.grad().impl_ptr(), gb = b.grad().impl_ptr();
    opt.step();
    opt.zero_grad();
    CHECK(gw.expired());
    CHECK(gb.expired());
  }
}
