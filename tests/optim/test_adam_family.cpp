// Adam, AdamW, RMSprop, Adagrad beyond the PyTorch trajectories (test_optim_parity.cpp): bad
// hyperparameters, a parameter given twice, one update op per group and device, set_lr under a
// compiled step (no recompile, the new rate used: against a float64 Adam written here), state
// save/load (a round trip resumes identically; a bad file changes nothing), and clipping
// against float64 norms.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/clip_grad.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/rmsprop.h"
#include "optim/serialize.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

Tensor param(std::vector<double> v) {
  return test::make(v, {static_cast<int64_t>(v.size())}, kFloat32).requires_grad_();
}

// Counts the multi-tensor updates dispatched while alive.
struct UpdateCounter {
  static inline int count = 0;
  static inline OpObserver prev = nullptr;
  UpdateCounter() {
    count = 0;
    prev = trace_observer();
    set_trace_observer([](OpId op, std::span<const Tensor>, const Attrs&, const Tensor&, bool) {
      if (op_info(op).kind == OpKind::MultiTensor) ++count;
    });
  }
  ~UpdateCounter() { set_trace_observer(prev); }
};

}  // namespace

TEST_CASE("Adam family: bad hyperparameters are errors naming the value", "[optim]") {
  Tensor p = param({1, 2});
  using optim::AdamOptions, optim::AdamWOptions;
  CHECK_THROWS_WITH(optim::Adam({p}, AdamOptions(-0.1)), Contains("learning rate -0.1"));
  CHECK_THROWS_WITH(optim::Adam({p}, AdamOptions().eps(-1e-8)), Contains("epsilon value -1e-08"));
  CHECK_THROWS_WITH(optim::Adam({p}, AdamOptions().betas(1.0, 0.999)),
                    Contains("beta parameter at index 0: 1"));
  CHECK_THROWS_WITH(optim::AdamW({p}, AdamWOptions().betas(0.9, -0.5)),
                    Contains("beta parameter at index 1: -0.5"));
  CHECK_THROWS_WITH(optim::AdamW({p}, AdamWOptions().weight_decay(-1)),
                    Contains("weight_decay value -1"));
  CHECK_THROWS_WITH(optim::RMSprop({p}, optim::RMSpropOptions(-2)), Contains("learning rate -2"));
  CHECK_THROWS_WITH(optim::RMSprop({p}, optim::RMSpropOptions().eps(-1)),
                    Contains("epsilon value -1"));
  CHECK_THROWS_WITH(optim::Adagrad({p}, optim::AdagradOptions().lr_decay(-1)),
                    Contains("lr_decay value -1"));
  CHECK_THROWS_WITH(optim::Adagrad({p}, optim::AdagradOptions().eps(-3)),
                    Contains("epsilon value -3"));
  // A rejected change leaves the options as they were.
  optim::Adam opt({p}, AdamOptions(0.01));
  CHECK_THROWS_WITH(opt.set_lr(-1), Contains("learning rate -1"));
  CHECK_THROWS_WITH(opt.set_betas(0, 0.9, 1.5), Contains("index 1: 1.5"));
  CHECK(opt.get_lr(0) == 0.01);
  CHECK(opt.options().beta2() == 0.999);
}

TEST_CASE("Adam family: a parameter given twice is an error", "[optim]") {
  Tensor a = param({1}), b = param({2});
  CHECK_THROWS_WITH(optim::Adam({a, b, a}, optim::AdamOptions()),
                    Contains("repeats parameter 0"));
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});
  groups.emplace_back(std::vector<Tensor>{b, a});
  CHECK_THROWS_WITH(optim::AdamW(groups, optim::AdamWOptions()),
                    Contains("already parameter 0 of group 0"));
}

TEST_CASE("Adam: one update op per group and step with PyTorch's state names", "[optim]") {
  std::vector<Tensor> ps = {param({1, 2, 3}), param({4}), param({5, 6})};
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{ps[0], ps[1]});
  groups.emplace_back(std::vector<Tensor>{ps[2]}, optim::AdamOptions(0.5).amsgrad(true));
  optim::Adam opt(groups, optim::AdamOptions(0.1));
  for (Tensor& p : ps) p.set_grad(ones_like(p));
  {
    UpdateCounter c;
    opt.step();
    CHECK(UpdateCounter::count == 2);
  }
  CHECK(opt.steps(0) == 1);
  CHECK(opt.steps(1) == 1);
  CHECK(opt.state(0, 0, "exp_avg").defined());
  CHECK_FALSE(opt.state(0, 0, "max_exp_avg_sq").defined());
  CHECK(opt.state(1, 0, "max_exp_avg_sq").defined());
  // First Adam step with a gradient of 1: p -= lr (exactly, up to eps).
  CHECK(test::read(ps[0])[0] == Approx(1 - 0.1).epsilon(1e-6));
  CHECK(test::read(ps[2])[0] == Approx(5 - 0.5).epsilon(1e-6));
}

namespace {

// PyTorch's Adam on doubles, for a parameter whose gradient is 2 * p (loss sum(p^2)).
struct RefAdam {
  std::vector<double> p, m, v;
  int t = 0;
  void step(double lr, double b1, double b2, double eps) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = 2 * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(b2, t)) + eps;
      p[i] -= lr / (1 - std::pow(b1, t)) * m[i] / denom;
    }
  }
};

}  // namespace

TEST_CASE("Adam under jit::compile: set_lr and set_betas take effect with no recompile",
          "[optim][jit]") {
  const std::vector<double> init = {0.5, -1.25, 2.0, 0.75};
  Tensor p = param(init);
  optim::Adam opt({p}, optim::AdamOptions(0.1));
  // The compiled function takes a tensor it ignores (compile wants at least one argument).
  const Tensor unused = zeros({1});
  auto step = jit::compile(
      [&](const Tensor&) {
        opt.zero_grad();
        Tensor loss = sum(p * p);
        loss.backward();
        opt.step();
        return loss;
      },
      {.fullgraph = true});
  RefAdam ref{init, std::vector<double>(4, 0), std::vector<double>(4, 0)};
  double lr = 0.1, b1 = 0.9, b2 = 0.999;
  for (int i = 0; i < 12; ++i) {
    if (i == 4) opt.set_lr(lr = 0.03);
    if (i == 8) opt.set_betas(0, b1 = 0.8, b2 = 0.99);
    step(unused);
    ref.step(lr, b1, b2, 1e-8);
    INFO("step " << i + 1);
    const std::vector<double> got = test::read(p);
    for (size_t k = 0; k < init.size(); ++k) CHECK(got[k] == Approx(ref.p[k]).epsilon(1e-5));
  }
  CHECK(opt.steps(0) == 12);
  CHECK(step.stats().recompiles == 0);
  CHECK(step.stats().executables == 1);
  CHECK(step.stats().graph_breaks == 0);
}

TEST_CASE("Adam family: a saved state resumes identically and a bad file changes nothing",
          "[optim]") {
  test::TempDir dir;
  const std::string path = (dir.path() / "opt.safetensors").string();
  auto run = [](optim::ForeachOptimizer& opt, Tensor& p, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      Tensor loss = sum(p * p * p);
      loss.backward();
      opt.step();
    }
  };
  Tensor a = param({0.5, -1, 2});
  optim::RMSprop first({a}, optim::RMSpropOptions(0.01).momentum(0.5).centered(true));
  run(first, a, 3);
  optim::save(first, path);
  const std::vector<double> at3 = test::read(a);
  run(first, a, 4);
  const std::vector<double> at7 = test::read(a);

  Tensor b = test::make(at3, {3}, kFloat32).requires_grad_();
  optim::RMSprop second({b}, optim::RMSpropOptions(0.5));  // options come from the file
  optim::load(second, path);
  CHECK(second.steps(0) == 3);
  CHECK(second.options().momentum() == 0.5);
  CHECK(second.options().centered());
  run(second, b, 4);
  CHECK(test::read(b) == at7);

  // Another optimizer's file, or a mismatched layout: an error, and nothing changes.
  optim::Adam adam({b}, optim::AdamOptions(0.1));
  CHECK_THROWS_WITH(optim::load(adam, path), Contains("the state is for optimizer 'RMSprop'"));
  CHECK(adam.steps(0) == 0);
  Tensor c = param({1, 2});
  optim::RMSprop third({c}, optim::RMSpropOptions(0.2));
  CHECK_THROWS_WITH(optim::load(third, path), Contains("must be a floating tensor of shape"));
  CHECK(third.steps(0) == 0);
  CHECK(third.get_lr(0) == 0.2);
  CHECK_FALSE(third.state(0, 0, "square_avg").defined());
}

TEST_CASE("clip_grad_norm_ and clip_grad_value_ against float64 on the device and traced",
          "[optim][clip]") {
  Tensor a = param({3, -4, 1}), b = param({2, 0.5});
  a.set_grad(test::make({3, -4, 1}, {3}, kFloat32));
  b.set_grad(test::make({2, 0.5}, {2}, kFloat32));
  const double total = std::sqrt(9 + 16 + 1 + 4 + 0.25);
  Tensor n = nn::utils::clip_grad_norm_({a, b}, 1.0);
  CHECK(n.dim() == 0);
  CHECK(n.item<float>() == Approx(total).epsilon(1e-6));
  const double scale = 1.0 / (total + 1e-6);
  CHECK(test::read(a.grad())[1] == Approx(-4 * scale).epsilon(1e-6));
  CHECK(test::read(b.grad())[0] == Approx(2 * scale).epsilon(1e-6));
  // Below max_norm: unchanged (the scale is clamped at 1).
  a.set_grad(test::make({0.1, 0.2, 0.2}, {3}, kFloat32));
  Tensor none;
  b.set_grad(none);
  CHECK(nn::utils::clip_grad_norm_({a, b}, 1.0).item<float>() == Approx(0.3).epsilon(1e-6));
  CHECK(test::read(a.grad())[2] == Approx(0.2).epsilon(1e-7));
  // inf norm: the largest magnitude.
  a.set_grad(test::make({0.5, -3, 1}, {3}, kFloat32));
  CHECK(nn::utils::clip_grad_norm_({a}, 1.5, INFINITY).item<float>() == Approx(3.0));
  CHECK(test::read(a.grad())[1] == Approx(-3 * 1.5 / (3 + 1e-6)).epsilon(1e-6));
  a.set_grad(test::make({0.5, -3, 1}, {3}, kFloat32));
  nn::utils::clip_grad_value_({a}, 0.75);
  CHECK(test::read(a.grad()) == std::vector<double>{0.5, -0.75, 0.75});
  CHECK_THROWS_WITH(nn::utils::clip_grad_value_({a}, -1), Contains("clip_value"));
  CHECK_THROWS_WITH(nn::utils::clip_grad_norm_({a}, 1, 0.5), Contains("norm_type"));

  // Traced with fullgraph: no host read (no break), the returned norm a device value.
  Tensor p = param({1, 2, 2});
  const Tensor unused = zeros({1});
  auto step = jit::compile(
      [&](const Tensor&) {
        p.set_grad(Tensor());
        Tensor loss = sum(p * p);
        loss.backward();
        return nn::utils::clip_grad_norm_({p}, 1.0);
      },
      {.fullgraph = true});
  for (int i = 0; i < 3; ++i) {
    const Tensor norm = step(unused);
    CHECK(norm.item<float>() == Approx(6.0).epsilon(1e-6));  // |2p| = 2 * 3
    CHECK(test::read(p.grad())[1] == Approx(4.0 / (6 + 1e-6)).epsilon(1e-6));
  }
  CHECK(step.stats().graph_breaks == 0);
  CHECK(step.stats().recompiles == 0);
}

TEST_CASE("adam_update on CUDA: one call over mixed dtypes matches the CPU and counts once",
          "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  // The CUDA launcher runs one kernel per stretch of one storage type, so this call takes four
  // launches (float32, float16, float32, float64); sizes leave partial vectors at the ends.
  const std::vector<std::pair<DType, int64_t>> params = {
      {kFloat32, 37}, {kFloat16, 9}, {kFloat32, 5}, {kFloat64, 3}};
  const int64_t n = static_cast<int64_t>(params.size());
  Attrs a;
  a.num_tensors = n;
  a.num_states = 3;
  a.amsgrad = true;
  a.decoupled_weight_decay = true;
  a.increment_step = true;  // the last launch counts the step, once per call
  manual_seed(11);
  // [hyper, step, params, grads, exp_avg, exp_avg_sq, max_exp_avg_sq], on the CPU.
  std::vector<Tensor> cpu = {test::make({0.05, 0.9, 0.99, 1e-6, 0.1}, {5}, kFloat64),
                             zeros({}, kFloat32)};
  for (int group = 0; group < 5; ++group)
    for (const auto& [dt, size] : params) {
      Tensor t = randn({size}).to(dt);
      cpu.push_back(group >= 3 ? abs(t) : t);  // second moments are non-negative
    }
  std::vector<Tensor> gpu;
  for (const Tensor& t : cpu) gpu.push_back(t.to(Device::cuda(0)));
  for (int step = 0; step < 3; ++step) {
    dispatch(OpId::adam_update, std::span<const Tensor>(cpu), a);
    dispatch(OpId::adam_update, std::span<const Tensor>(gpu), a);
  }
  CHECK(test::read(cpu[1]) == std::vector<double>{3});
  CHECK(test::read(gpu[1]) == std::vector<double>{3});
  for (size_t i = 2; i < cpu.size(); ++i) {
    if ((i - 2) / n == 1) continue;  // the gradients, unchanged
    const DType dt = cpu[i].dtype();
    // The GPU's fused multiply-adds round differently: a rounding of the dtype per step apart.
    const double ulp = dt == kFloat64 ? 2.3e-16 : dt == kFloat32 ? 1.2e-7 : 1e-3;
    const std::vector<double> want = test::read(cpu[i]), got = test::read(gpu[i]);
    INFO("tensor " << i << " (" << dtype_name(dt) << ")");
    REQUIRE(got.size() == want.size());
    for (size_t e = 0; e < want.size(); ++e)
      CHECK(std::abs(got[e] - want[e]) <= 4 * ulp * std::max(1.0, std::abs(want[e])));
  }
}
