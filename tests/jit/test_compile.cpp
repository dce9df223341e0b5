// jit::compile's behaviour, always against the eager path run on an identical copy of the model
// (or against float64 math written here), never against compiled code:
//  - a whole MLP training step (zero_grad, forward, cross entropy, backward, SGD step) compiled
//    vs eager for 20 steps from the same init on the same batches: losses, final weights, grads
//    and optimizer state; with momentum + nesterov + weight decay, with Dropout (same Philox
//    stream), with set_lr between steps (no new executable); parameters reallocated or frozen
//    between steps (the executable goes stale and retraces). CPU, and CUDA on a GPU machine.
//  - random ops replay the draws eager makes; an in-place write to an argument is replayed.
//  - the signature cache: hits, misses with the logged reason, plain arguments guarded by value,
//    recompile_limit, dynamic=true over batch sizes 1..512, dynamic auto on a training step.
//  - graph breaks: fullgraph=true raises on item() naming the op and call site; otherwise the
//    signature runs eagerly (correctly) and the break is logged once; a host constant that
//    changes between calls is a break.
//  - returned tensors never alias a later call's; tuple / pair / vector / void returns.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "jit/errors.h"
#include "jit/log.h"
#include "nn/dropout.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;

namespace {

// ---- host-side comparison ------------------------------------------------------------------

std::vector<double> host(const Tensor& t) {
  return t.detach().cpu().to(kFloat64).contiguous().to_vector<double>();
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// |actual - expected| <= atol + rtol * |expected| everywhere; reports the worst element.
void check_close(const std::vector<double>& a, const std::vector<double>& e, double rtol,
                 double atol, const std::string& what) {
  INFO(what);
  REQUIRE(a.size() == e.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]), tol = atol + rtol * std::abs(e[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / tol;
    if (!(err <= tol)) ++bad;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (bad == 0) return;
  std::ostringstream msg;
  msg.precision(17);
  msg << what << ": " << bad << " of " << a.size() << " elements out of tolerance (rtol " << rtol
      << ", atol " << atol << "); worst at " << worst << ": got " << a[worst] << ", expected "
      << e[worst];
  FAIL_CHECK(msg.str());
}

void check_close(const Tensor& actual, const Tensor& expected, double rtol, double atol,
                 const std::string& what) {
  INFO(what);
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  REQUIRE(actual.sizes() == expected.sizes());
  check_close(host(actual), host(expected), rtol, atol, what);
}

// Trained weights: 1e-6 relative to the element, with a floor of 1e-6 of the tensor's scale
// for elements near zero (CPU replays run the eager kernels, so this is nearly bitwise).
void check_weights(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const double scale = max_abs(host(expected));
  check_close(actual, expected, 1e-6, 1e-6 * scale, what);
}

using test::LogCapture;

unsigned mask_of(jit::Log l) { return static_cast<unsigned>(l); }

// ---- the model -----------------------------------------------------------------------------

// Big enough that the CPU executor runs the fused [batch, hidden] groups in several chunks.
constexpr int64_t kIn = 100, kHidden = 256, kOut = 10, kBatch = 64, kSteps = 20;

struct JitNetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::Dropout drop{nullptr};
  explicit JitNetImpl(double p) {
    fc1 = register_module("fc1", nn::Linear(kIn, kHidden));
    if (p > 0) drop = register_module("drop", nn::Dropout(p));
    fc2 = register_module("fc2", nn::Linear(kHidden, kOut));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = relu(fc1(x));
    if (drop) h = drop(h);
    return fc2(h);
  }
};
EMBER_MODULE(JitNet);

struct RunConfig {
  optim::SGDOptions sgd = optim::SGDOptions(0.01);
  double dropout = 0;
  int64_t lr_change_step = -1;  // calls opt.set_lr(new_lr) before this step
  double new_lr = 0.05;
  Device dev = Device::cpu();
};

struct Batches {
  std::vector<Tensor> x, y;
};

Batches make_batches(Device dev, int64_t n = kSteps, uint64_t seed = 1234) {
  manual_seed(seed);
  Batches b;
  for (int64_t i = 0; i < n; ++i) {
    b.x.push_back(randn({kBatch, kIn}, dev));
    b.y.push_back(randint(0, kOut, {kBatch}, dev));
  }
  return b;
}

// What a run leaves behind.
struct RunResult {
  std::vector<double> losses;
  std::vector<Tensor> params, grads;
  optim::OptimizerState opt_state;
  int64_t opt_steps = 0;
  jit::CompileStats stats;
};

constexpr uint64_t kInitSeed = 7, kRunSeed = 99;

// Trains a fresh model (same init every time) for the batches, eagerly or compiled.
RunResult train(const RunConfig& cfg, const Batches& batches, bool compiled) {
  manual_seed(kInitSeed);
  JitNet net(cfg.dropout);
  net->to(cfg.dev);
  net->train();
  optim::SGD opt(net->parameters(), cfg.sgd);
  nn::CrossEntropyLoss criterion;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = criterion(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = jit::compile(body);
  manual_seed(kRunSeed);  // the dropout masks: the same stream for both runs
  RunResult r;
  for (size_t i = 0; i < batches.x.size(); ++i) {
    if (static_cast<int64_t>(i) == cfg.lr_change_step) opt.set_lr(cfg.new_lr);
    const Tensor loss =
        compiled ? step(batches.x[i], batches.y[i]) : body(batches.x[i], batches.y[i]);
    r.losses.push_back(loss.item<float>());
  }
  for (const Tensor& p : net->parameters()) {
    r.params.push_back(p.detach().clone());
    r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  }
  r.opt_state = opt.state_dict();
  for (auto& [k, t] : r.opt_state.tensors) t = t.clone();  // the live state aliases the optimizer
  r.opt_steps = opt.steps(0);
  r.stats = step.stats();
  return r;
}

void compare_runs(const RunResult& compiled, const RunResult& eager, const std::string& what) {
  INFO(what);
  REQUIRE(compiled.losses.size() == eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step " << i + 1 << ": compiled loss " << compiled.losses[i] << ", eager "
                 << eager.losses[i]);
    CHECK(std::abs(compiled.losses[i] - eager.losses[i]) <= 1e-6 * std::abs(eager.losses[i]));
  }
  REQUIRE(compiled.params.size() == eager.params.size());
  for (size_t i = 0; i < eager.params.size(); ++i) {
    check_weights(compiled.params[i], eager.params[i], what + ": parameter " + std::to_string(i));
    REQUIRE(eager.grads[i].defined());
    INFO("parameter " << i << " has a grad after the last compiled step");
    REQUIRE(compiled.grads[i].defined());
    check_weights(compiled.grads[i], eager.grads[i],
                  what + ": grad of parameter " + std::to_string(i));
  }
  // The optimizer's tensors: hyperparameters, the step counter, momentum buffers.
  for (const auto& [key, t] : eager.opt_state.tensors) {
    INFO("optimizer state " << key);
    const auto it = compiled.opt_state.tensors.find(key);
    REQUIRE(it != compiled.opt_state.tensors.end());
    check_weights(it->second, t, what + ": optimizer " + key);
  }
  CHECK(compiled.opt_state.tensors.size() == eager.opt_state.tensors.size());
}

void check_whole_step_compiled(const jit::CompileStats& s) {
  INFO("traces " << s.traces << ", executables " << s.executables << ", recompiles " << s.recompiles
                 << ", replays " << s.replays << ", eager calls " << s.eager_calls
                 << ", graph breaks " << s.graph_breaks);
  CHECK(s.replays >= 15);
  CHECK(s.executables == 1);
  CHECK(s.graph_breaks == 0);
  CHECK(s.eager_calls == 0);
  CHECK(s.recompiles == 0);
}

void mlp_compiled_vs_eager(const RunConfig& cfg, const std::string& what) {
  const Batches batches = make_batches(cfg.dev);
  const RunResult eager = train(cfg, batches, false);
  const RunResult compiled = train(cfg, batches, true);
  compare_runs(compiled, eager, what);
  check_whole_step_compiled(compiled.stats);
  // The model learned something, so the comparison is not between two frozen models.
  CHECK(eager.losses.back() != eager.losses.front());
}

const optim::SGDOptions kNesterov =
    optim::SGDOptions(0.01).momentum(0.9).nesterov(true).weight_decay(1e-3);

}  // namespace

// ---- 1. the training step ------------------------------------------------------------------

TEST_CASE("jit: compiled MLP SGD step matches eager for 20 steps", "[jit]") {
  mlp_compiled_vs_eager(RunConfig{}, "plain SGD lr 0.01");
}

TEST_CASE("jit: compiled MLP step with momentum, nesterov and weight decay matches eager",
          "[jit]") {
  RunConfig cfg;
  cfg.sgd = kNesterov;
  mlp_compiled_vs_eager(cfg, "SGD momentum 0.9 nesterov weight_decay 1e-3");
}

TEST_CASE("jit: compiled MLP step with Dropout draws the same masks as eager", "[jit]") {
  RunConfig cfg;
  cfg.dropout = 0.3;
  mlp_compiled_vs_eager(cfg, "dropout 0.3");
  // The masks matter: a run with another stream trains to other weights, so agreement above
  // is not an accident of dropout doing nothing.
  const Batches batches = make_batches(cfg.dev);
  const RunResult a = train(cfg, batches, false);
  RunConfig no_drop = cfg;
  no_drop.dropout = 0;
  const RunResult b = train(no_drop, batches, false);
  CHECK(a.losses.back() != b.losses.back());
}

TEST_CASE("jit: set_lr between compiled steps takes effect without a new executable", "[jit]") {
  RunConfig cfg;
  cfg.sgd = optim::SGDOptions(0.01).momentum(0.9);
  cfg.lr_change_step = 10;
  cfg.new_lr = 0.05;
  mlp_compiled_vs_eager(cfg, "set_lr(0.05) at step 10");
  // And the change is visible: without it the run ends elsewhere.
  const Batches batches = make_batches(cfg.dev);
  RunConfig same = cfg;
  same.lr_change_step = -1;
  const RunResult with_change = train(cfg, batches, true);
  const RunResult without = train(same, batches, true);
  CHECK(with_change.losses.back() != without.losses.back());
  CHECK(with_change.stats.executables == 1);
}

TEST_CASE("jit: a compiled SGD step leaves the optimizer's step count as eager does", "[jit]") {
  RunConfig cfg;
  cfg.sgd = kNesterov;
  const Batches batches = make_batches(cfg.dev);
  const RunResult eager = train(cfg, batches, false);
  const RunResult compiled = train(cfg, batches, true);
  CHECK(eager.opt_steps == kSteps);
  CHECK(compiled.opt_steps == eager.opt_steps);
}

TEST_CASE("jit: compiled MLP step matches eager on CUDA", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  RunConfig cfg;
  cfg.dev = Device::cuda(0);
  mlp_compiled_vs_eager(cfg, "CUDA plain SGD");
  cfg.sgd = kNesterov;
  mlp_compiled_vs_eager(cfg, "CUDA nesterov");
  cfg.dropout = 0.3;
  cfg.lr_change_step = 10;
  mlp_compiled_vs_eager(cfg, "CUDA nesterov + dropout + set_lr");
}

TEST_CASE("jit: random ops in a compiled function draw what eager draws", "[jit]") {
  // Three draws per call (rand, randn, a dropout mask): each replay must take its numbers from
  // where the generator stands, at each op's own position within the call.
  auto body = [](const Tensor& x) {
    return std::make_tuple(x * rand({6, 5}) + randn({6, 5}), nn::functional::dropout(x, 0.5, true));
  };
  auto f = jit::compile(body);
  manual_seed(12);
  std::vector<Tensor> xs;
  for (int i = 0; i < 6; ++i) xs.push_back(randn({6, 5}));
  manual_seed(77);
  std::vector<std::tuple<Tensor, Tensor>> want;
  for (const Tensor& x : xs) want.push_back(body(x));
  const uint64_t eager_offset = default_generator().offset();
  manual_seed(77);
  for (size_t i = 0; i < xs.size(); ++i) {
    auto [a, b] = f(xs[i]);
    check_close(a, std::get<0>(want[i]), 0, 0, "rand/randn, call " + std::to_string(i + 1));
    check_close(b, std::get<1>(want[i]), 0, 0, "dropout, call " + std::to_string(i + 1));
  }
  CHECK(default_generator().offset() == eager_offset);
  CHECK(f.stats().replays >= 3);
  CHECK(f.stats().graph_breaks == 0);
}

TEST_CASE("jit: reallocated or frozen parameters retrace and still match eager", "[jit]") {
  // A round trip through float64 gives every parameter new memory (same values); freezing a
  // bias changes which parameters get gradients. Each makes the executable stale: the next
  // call retraces instead of replaying into dead memory or updating a frozen parameter.
  const Batches batches = make_batches(Device::cpu());
  auto run = [&](bool compiled) {
    manual_seed(kInitSeed);
    JitNet net(0);
    optim::SGD opt(net->parameters(), kNesterov);
    nn::CrossEntropyLoss criterion;
    auto body = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = criterion(net(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto step = jit::compile(body);
    RunResult r;
    for (size_t i = 0; i < batches.x.size(); ++i) {
      if (i == 7) {
        net->to(kFloat64);
        net->to(kFloat32);
      }
      if (i == 14) net->fc1->bias.requires_grad_(false);
      const Tensor loss =
          compiled ? step(batches.x[i], batches.y[i]) : body(batches.x[i], batches.y[i]);
      r.losses.push_back(loss.item<float>());
    }
    for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().clone());
    r.stats = step.stats();
    return r;
  };
  const RunResult eager = run(false), compiled = run(true);
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step " << i + 1 << ": compiled " << compiled.losses[i] << ", eager " << eager.losses[i]);
    CHECK(std::abs(compiled.losses[i] - eager.losses[i]) <= 1e-6 * std::abs(eager.losses[i]));
  }
  for (size_t i = 0; i < eager.params.size(); ++i)
    check_weights(compiled.params[i], eager.params[i], "parameter " + std::to_string(i));
  const jit::CompileStats& s = compiled.stats;
  INFO("traces " << s.traces << ", executables " << s.executables << ", recompiles " << s.recompiles
                 << ", replays " << s.replays << ", eager calls " << s.eager_calls);
  CHECK(s.recompiles >= 2);
  CHECK(s.executables >= 3);
  CHECK(s.replays >= 8);
  CHECK(s.eager_calls == 0);
  CHECK(s.graph_breaks == 0);
}

TEST_CASE("jit: an in-place write to an argument is replayed on the caller's tensor", "[jit]") {
  auto body = [](const Tensor& x) {
    Tensor y = x;
    y.mul_(2.0);
    return y + 1.0;
  };
  auto f = jit::compile(body);
  manual_seed(13);
  for (int i = 0; i < 5; ++i) {
    INFO("call " << i + 1);
    const Tensor x = randn({5, 4});
    const Tensor x_ref = x.clone();
    const Tensor got = f(x);
    const Tensor want = body(x_ref);
    check_close(x, x_ref, 0, 0, "the argument after the call");
    check_close(got, want, 0, 0, "the result");
  }
  CHECK(f.stats().replays >= 2);
}

// ---- 2. the signature cache ----------------------------------------------------------------

namespace {

// f(x) = 3 relu(x) - rowsum(x), and its float64 reference.
Tensor cache_fn(const Tensor& x) { return relu(x) * 3.0 - x.sum({1}, true); }

std::vector<double> cache_ref(const Tensor& x) {
  const std::vector<double> v = host(x);
  const int64_t rows = x.size(0), cols = x.size(1);
  std::vector<double> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += v[r * cols + c];
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = 3 * std::max(0.0, v[r * cols + c]) - s;
  }
  return out;
}

template <class F>
void call_and_check(F& f, int64_t batch, const std::string& what) {
  const Tensor x = randn({batch, 6});
  const Tensor y = f(x);
  REQUIRE(y.sizes() == Shape{batch, 6});
  check_close(host(y), cache_ref(x), 1e-5, 1e-5, what + ", batch " + std::to_string(batch));
}

}  // namespace

TEST_CASE("jit: cache hits and misses by shape, with the logged reason", "[jit]") {
  LogCapture logs(mask_of(jit::Log::recompiles));
  auto f = jit::compile(&cache_fn, jit::Options{.dynamic = false});
  manual_seed(3);
  for (int i = 0; i < 3; ++i) call_and_check(f, 8, "first signature");
  CHECK(f.stats().executables == 1);
  CHECK(f.stats().recompiles == 0);
  CHECK(f.stats().replays >= 1);
  for (int i = 0; i < 3; ++i) call_and_check(f, 16, "second signature");
  INFO("logs:\n" << logs.all());
  CHECK(f.stats().executables == 2);
  CHECK(f.stats().recompiles >= 1);
  CHECK(logs.count("input 0 dim 0: 8 -> 16") >= 1);
  // Back to batch 8: served by the first executable, no new trace.
  const int traces = f.stats().traces, replays = f.stats().replays;
  const int recompiles = f.stats().recompiles;
  for (int i = 0; i < 3; ++i) call_and_check(f, 8, "first signature again");
  CHECK(f.stats().traces == traces);
  CHECK(f.stats().replays == replays + 3);
  CHECK(f.stats().executables == 2);
  CHECK(f.stats().recompiles == recompiles);
  CHECK(f.stats().eager_calls == 0);
}

TEST_CASE("jit: a plain argument is guarded by value", "[jit]") {
  LogCapture logs(mask_of(jit::Log::recompiles));
  auto f = jit::compile([](const Tensor& x, int k) { return x * static_cast<double>(k) + 1.0; },
                        jit::Options{.dynamic = false});
  manual_seed(4);
  auto check = [&](int k) {
    const Tensor x = randn({5, 3});
    const std::vector<double> xv = host(x);
    std::vector<double> want(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) want[i] = xv[i] * k + 1;
    check_close(host(f(x, k)), want, 1e-6, 1e-6, "k = " + std::to_string(k));
  };
  for (int i = 0; i < 3; ++i) check(2);
  CHECK(f.stats().executables == 1);
  // k = 3 is a new signature: replays must not serve the value traced with k = 2.
  for (int i = 0; i < 4; ++i) check(3);
  INFO("logs:\n" << logs.all());
  CHECK(f.stats().executables == 2);
  CHECK(f.stats().recompiles >= 1);
  CHECK(logs.count("plain") >= 1);
  const int traces = f.stats().traces;
  check(2);
  CHECK(f.stats().traces == traces);
}

TEST_CASE("jit: past recompile_limit new signatures run eagerly and stay correct", "[jit]") {
  auto f = jit::compile(&cache_fn, jit::Options{.dynamic = false, .recompile_limit = 2});
  manual_seed(5);
  for (int i = 0; i < 2; ++i) call_and_check(f, 8, "signature 1");
  for (int i = 0; i < 2; ++i) call_and_check(f, 16, "signature 2");
  CHECK(f.stats().executables == 2);
  const int traces = f.stats().traces, eager = f.stats().eager_calls;
  for (int i = 0; i < 3; ++i) call_and_check(f, 24, "signature 3, past the limit");
  CHECK(f.stats().eager_calls == eager + 3);
  CHECK(f.stats().traces == traces);
  CHECK(f.stats().executables == 2);
  // The signatures within the limit still replay.
  const int replays = f.stats().replays;
  call_and_check(f, 8, "signature 1 again");
  call_and_check(f, 16, "signature 2 again");
  CHECK(f.stats().replays == replays + 2);
}

TEST_CASE("jit: dynamic=true keeps one executable over batch sizes 1..512", "[jit]") {
  auto f = jit::compile(&cache_fn, jit::Options{.dynamic = true});
  manual_seed(6);
  for (int64_t b = 1; b <= 512; ++b) call_and_check(f, b, "dynamic");
  INFO("traces " << f.stats().traces << ", executables " << f.stats().executables
                 << ", eager calls " << f.stats().eager_calls);
  CHECK(f.stats().executables == 1);
  CHECK(f.stats().traces <= 2);
  CHECK(f.stats().eager_calls == 0);
  CHECK(f.stats().graph_breaks == 0);
  CHECK(f.stats().replays >= 510);
}

TEST_CASE("jit: dynamic auto: an MLP step over changing batch sizes matches eager", "[jit]") {
  // The default: specialize, then make the batch dim symbolic once it changes. The loss's
  // mean divides by the batch size, so the symbolic graph must rescale that constant too.
  const std::vector<int64_t> sizes = {64, 64, 32, 48, 17, 64, 5, 100, 32, 1, 77, 64};
  manual_seed(21);
  std::vector<Tensor> xs, ys;
  for (int64_t b : sizes) {
    xs.push_back(randn({b, kIn}));
    ys.push_back(randint(0, kOut, {b}));
  }
  auto run = [&](bool compiled) {
    manual_seed(kInitSeed);
    JitNet net(0);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
    nn::CrossEntropyLoss criterion;
    auto body = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = criterion(net(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto step = jit::compile(body);
    RunResult r;
    for (size_t i = 0; i < xs.size(); ++i)
      r.losses.push_back(compiled ? step(xs[i], ys[i]).item<float>()
                                  : body(xs[i], ys[i]).item<float>());
    for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().clone());
    r.stats = step.stats();
    return r;
  };
  const RunResult eager = run(false), compiled = run(true);
  for (size_t i = 0; i < sizes.size(); ++i) {
    INFO("call " << i + 1 << ", batch " << sizes[i] << ": compiled " << compiled.losses[i]
                 << ", eager " << eager.losses[i]);
    CHECK(std::abs(compiled.losses[i] - eager.losses[i]) <= 1e-6 * std::abs(eager.losses[i]));
  }
  for (size_t i = 0; i < eager.params.size(); ++i)
    check_weights(compiled.params[i], eager.params[i], "parameter " + std::to_string(i));
  const jit::CompileStats& s = compiled.stats;
  INFO("traces " << s.traces << ", executables " << s.executables << ", replays " << s.replays
                 << ", eager calls " << s.eager_calls << ", graph breaks " << s.graph_breaks);
  CHECK(s.eager_calls == 0);
  CHECK(s.graph_breaks == 0);
  CHECK(s.executables <= 2);
  CHECK(s.replays >= static_cast<int>(sizes.size()) - 4);
}

// ---- 3. graph breaks -----------------------------------------------------------------------

TEST_CASE("jit: fullgraph raises GraphBreakError on item() naming the op and call site", "[jit]") {
  const Batches batches = make_batches(Device::cpu(), 2);
  manual_seed(kInitSeed);
  JitNet net(0);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01));
  nn::CrossEntropyLoss criterion;
  float seen = 0;
  auto step = jit::compile(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = criterion(net(x), y);
        loss.backward();
        opt.step();
        seen = loss.item<float>();
        return loss;
      },
      jit::Options{.fullgraph = true});
  std::string message;
  try {
    step(batches.x[0], batches.y[0]);
  } catch (const jit::GraphBreakError& e) {
    message = e.what();
  }
  INFO("message: " << message);
  REQUIRE(!message.empty());
  CHECK(message.find("item") != std::string::npos);
  CHECK(message.find("test_compile.cpp") != std::string::npos);
  CHECK_THROWS_AS(step(batches.x[1], batches.y[1]), jit::GraphBreakError);
  // The tracer was uninstalled by the throw: another compiled function traces and replays.
  auto g = jit::compile(&cache_fn);
  for (int i = 0; i < 3; ++i) call_and_check(g, 4, "after a GraphBreakError");
  CHECK(g.stats().replays == 1);
}

TEST_CASE("jit: a graph break falls back to eager, logs once and stays correct", "[jit]") {
  LogCapture logs(mask_of(jit::Log::graph_breaks));
  const Batches batches = make_batches(Device::cpu(), 6);
  std::vector<double> seen_eager, seen_compiled;
  auto run = [&](bool compiled) {
    manual_seed(kInitSeed);
    JitNet net(0);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
    nn::CrossEntropyLoss criterion;
    std::vector<double>& seen = compiled ? seen_compiled : seen_eager;
    auto body = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = criterion(net(x), y);
      loss.backward();
      opt.step();
      seen.push_back(loss.item<float>());  // a host read inside the step: a break
      return loss * 2.0;
    };
    auto step = jit::compile(body);
    std::vector<double> out;
    for (size_t i = 0; i < batches.x.size(); ++i)
      out.push_back(compiled ? step(batches.x[i], batches.y[i]).item<float>()
                             : body(batches.x[i], batches.y[i]).item<float>());
    RunResult r;
    r.losses = out;
    for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().clone());
    r.stats = step.stats();
    return r;
  };
  const RunResult eager = run(false);
  const RunResult compiled = run(true);
  REQUIRE(compiled.losses.size() == eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("call " << i + 1);
    CHECK(compiled.losses[i] == eager.losses[i]);
    CHECK(seen_compiled.at(i) == seen_eager.at(i));
    CHECK(std::abs(compiled.losses[i] - 2 * seen_eager.at(i)) <=
          1e-6 * std::abs(compiled.losses[i]));
  }
  for (size_t i = 0; i < eager.params.size(); ++i)
    check_weights(compiled.params[i], eager.params[i], "parameter " + std::to_string(i));
  INFO("logs:\n" << logs.all());
  CHECK(compiled.stats.graph_breaks == 1);
  CHECK(compiled.stats.replays == 0);
  CHECK(compiled.stats.executables == 0);
  CHECK(compiled.stats.eager_calls >= 4);
  CHECK(logs.count("graph break") == 1);
  CHECK(logs.count("item") == 1);
  CHECK(logs.count("test_compile.cpp") == 1);
}

TEST_CASE("jit: a host constant that changes between calls is a graph break", "[jit]") {
  LogCapture logs(mask_of(jit::Log::graph_breaks));
  float c = 1.0f;
  auto body = [&c](const Tensor& x) {
    const Tensor k = from_vector<float>({c}, {1});
    return x * k + 0.5;
  };
  auto f = jit::compile(body);
  manual_seed(8);
  for (int i = 0; i < 6; ++i) {
    c = 1.5f + static_cast<float>(i);
    const Tensor x = randn({4, 3});
    const Tensor got = f(x);
    const Tensor want = body(x);  // the eager function, same c
    check_close(got, want, 0, 0, "call " + std::to_string(i + 1));
    const std::vector<double> xv = host(x);
    std::vector<double> ref(xv.size());
    for (size_t j = 0; j < xv.size(); ++j) ref[j] = xv[j] * c + 0.5;
    check_close(host(got), ref, 1e-6, 1e-6, "call " + std::to_string(i + 1) + " vs float64");
  }
  INFO("logs:\n" << logs.all());
  CHECK(f.stats().graph_breaks >= 1);
  CHECK(f.stats().replays == 0);
  CHECK(logs.count("host constant") >= 1);

  // An unchanging constant is frozen into the executable and replayed correctly.
  c = 4.0f;
  auto g = jit::compile(body);
  for (int i = 0; i < 4; ++i) {
    const Tensor x = randn({4, 3});
    check_close(g(x), body(x), 1e-6, 1e-6, "constant c, call " + std::to_string(i + 1));
  }
  CHECK(g.stats().graph_breaks == 0);
  CHECK(g.stats().replays >= 1);
}

// ---- 4. outputs and return types -----------------------------------------------------------

TEST_CASE("jit: returned tensors never alias a later call's outputs", "[jit]") {
  auto f = jit::compile([](const Tensor& x) { return x * 2.0 + 1.0; });
  manual_seed(9);
  std::vector<Tensor> xs, ys;
  std::vector<std::vector<double>> x_host;
  for (int i = 0; i < 6; ++i) {
    xs.push_back(randn({7, 5}));
    x_host.push_back(host(xs.back()));
    ys.push_back(f(xs.back()));
  }
  CHECK(f.stats().replays >= 3);
  for (size_t i = 0; i < ys.size(); ++i) {
    std::vector<double> want(x_host[i].size());
    for (size_t j = 0; j < want.size(); ++j) want[j] = x_host[i][j] * 2 + 1;
    check_close(host(ys[i]), want, 1e-6, 1e-6, "kept result of call " + std::to_string(i + 1));
    for (size_t j = 0; j < i; ++j) CHECK(ys[i].raw_data() != ys[j].raw_data());
  }
}

TEST_CASE("jit: tuple, pair and vector returns", "[jit]") {
  auto ft = jit::compile([](const Tensor& x) { return std::make_tuple(x + 1.0, x * x, x.sum()); });
  auto fp = jit::compile(
      [](const Tensor& a, const Tensor& b) { return std::make_pair(a - b, maximum(a, b)); });
  auto fv = jit::compile([](const Tensor& x) {
    return std::vector<Tensor>{relu(x), x.mean({0}), neg(x)};
  });
  manual_seed(10);
  for (int call = 0; call < 5; ++call) {
    INFO("call " << call + 1);
    const Tensor x = randn({4, 3}), y = randn({4, 3});
    const std::vector<double> xv = host(x), yv = host(y);
    auto [t0, t1, t2] = ft(x);
    std::vector<double> w0, w1;
    double s = 0;
    for (double v : xv) w0.push_back(v + 1), w1.push_back(v * v), s += v;
    check_close(host(t0), w0, 1e-6, 1e-6, "tuple 0");
    check_close(host(t1), w1, 1e-6, 1e-6, "tuple 1");
    check_close(host(t2), {s}, 1e-5, 1e-5, "tuple 2");

    auto [p0, p1] = fp(x, y);
    std::vector<double> d, m;
    for (size_t i = 0; i < xv.size(); ++i)
      d.push_back(xv[i] - yv[i]), m.push_back(std::max(xv[i], yv[i]));
    check_close(host(p0), d, 1e-6, 1e-6, "pair 0");
    check_close(host(p1), m, 0, 0, "pair 1");

    const std::vector<Tensor> v = fv(x);
    REQUIRE(v.size() == 3);
    std::vector<double> r, mean(3, 0), n;
    for (size_t i = 0; i < xv.size(); ++i) {
      r.push_back(std::max(0.0, xv[i]));
      n.push_back(-xv[i]);
      mean[i % 3] += xv[i] / 4;
    }
    check_close(host(v[0]), r, 0, 0, "vector 0");
    check_close(host(v[1]), mean, 1e-6, 1e-6, "vector 1");
    check_close(host(v[2]), n, 0, 0, "vector 2");
  }
  CHECK(ft.stats().replays >= 3);
  CHECK(fp.stats().replays >= 3);
  CHECK(fv.stats().replays >= 3);
}

TEST_CASE("jit: a void function updating state in place replays its effect", "[jit]") {
  Tensor state = zeros({3, 4});
  Tensor counter = zeros({});
  auto body = [&](const Tensor& x) {
    state.mul_(0.5);
    state.add_(x * 2.0);
    counter.add_(1.0);
  };
  auto f = jit::compile(body);
  // The eager reference: the same body on its own state.
  Tensor ref_state = zeros({3, 4}), ref_counter = zeros({});
  manual_seed(11);
  for (int call = 0; call < 7; ++call) {
    INFO("call " << call + 1);
    const Tensor x = randn({3, 4});
    f(x);
    ref_state.mul_(0.5);
    ref_state.add_(x * 2.0);
    ref_counter.add_(1.0);
    check_close(state, ref_state, 0, 0, "state");
    check_close(counter, ref_counter, 0, 0, "counter");
  }
  CHECK(counter.item<float>() == 7.0f);
  CHECK(f.stats().replays >= 4);
  CHECK(f.stats().graph_breaks == 0);
}
