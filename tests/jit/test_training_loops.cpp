// The loops people write around a compiled training step: batches sliced from a data set held in
// one tensor, an epoch whose last batch is shorter, shuffled batches gathered by index_select,
// dynamic=true at a fixed and at varying sizes. Each loop runs twice from the same weights, once
// eagerly and once compiled, and must give the same losses and weights bit for bit, while the
// compiled function's counters show what served each call (replays, executables, no eager calls).
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

using namespace ember;

namespace {

// Three model shapes. The GELU/Dropout one trains with momentum and a StepLR schedule.
enum class Model { ReluMlp, GeluDropout, TanhSigmoid };

nn::Sequential make_model(Model m, int64_t in, int64_t classes) {
  switch (m) {
    case Model::ReluMlp:
      return nn::Sequential(nn::Linear(in, 32), nn::ReLU(), nn::Linear(32, classes));
    case Model::GeluDropout:
      return nn::Sequential(nn::Linear(in, 64), nn::GELU(), nn::Dropout(0.2), nn::Linear(64, 64),
                            nn::GELU(), nn::Linear(64, classes));
    case Model::TanhSigmoid:
      return nn::Sequential(nn::Linear(in, 48), nn::Tanh(), nn::Linear(48, 24), nn::Sigmoid(),
                            nn::Linear(24, classes));
  }
  return {};
}

const char* model_name(Model m) {
  switch (m) {
    case Model::ReluMlp:
      return "relu mlp";
    case Model::GeluDropout:
      return "gelu/dropout mlp, momentum, StepLR";
    case Model::TanhSigmoid:
      return "tanh/sigmoid mlp";
  }
  return "?";
}

// The batches of one loop, made before either run so both see the same tensors.
using BatchFn = std::function<std::pair<Tensor, Tensor>(int step)>;

struct Run {
  std::vector<float> losses;
  std::vector<Tensor> params;
  jit::CompileStats stats;
};

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  const Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.nbytes())) == 0;
}

Run train(Model model, Device dev, int steps, const BatchFn& batch, const jit::Options* opts,
          uint64_t seed) {
  manual_seed(seed);
  nn::Sequential net = make_model(model, 20, 3);
  net->to(dev);
  const bool schedule = model == Model::GeluDropout;
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(schedule ? 0.9 : 0.0));
  optim::StepLR sched(opt, 5, 0.5);
  nn::CrossEntropyLoss crit;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto compiled = jit::compile(body, opts ? *opts : jit::Options{});
  manual_seed(seed + 1);  // the dropout masks: one stream for both runs
  Run r;
  for (int i = 0; i < steps; ++i) {
    const auto [x, y] = batch(i);
    const Tensor loss = opts ? compiled(x, y) : body(x, y);
    r.losses.push_back(loss.item<float>());
    if (schedule) sched.step();
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().clone());
  r.stats = compiled.stats();
  return r;
}

std::string describe(const jit::CompileStats& s) {
  return "traces " + std::to_string(s.traces) + ", executables " + std::to_string(s.executables) +
         ", recompiles " + std::to_string(s.recompiles) + ", replays " + std::to_string(s.replays) +
         ", eager calls " + std::to_string(s.eager_calls) + ", graph breaks " +
         std::to_string(s.graph_breaks);
}

// Runs the loop eagerly and compiled; every loss and every final weight must be equal bit for
// bit. Returns the compiled run's counters.
jit::CompileStats compiled_equals_eager(Model model, Device dev, int steps, const BatchFn& batch,
                                        jit::Options opts, uint64_t seed = 7) {
  const Run eager = train(model, dev, steps, batch, nullptr, seed);
  const Run comp = train(model, dev, steps, batch, &opts, seed);
  INFO(model_name(model) << " on " << dev.str() << ": " << describe(comp.stats));
  REQUIRE(comp.losses.size() == eager.losses.size());
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step " << i << ": compiled " << comp.losses[i] << ", eager " << eager.losses[i]);
    REQUIRE(std::memcmp(&comp.losses[i], &eager.losses[i], sizeof(float)) == 0);
  }
  for (size_t i = 0; i < eager.params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(bitwise_equal(comp.params[i], eager.params[i]));
  }
  CHECK(eager.losses.back() != eager.losses.front());  // it trained
  CHECK(comp.stats.eager_calls == 0);
  CHECK(comp.stats.graph_breaks == 0);
  return comp.stats;
}

struct DataSet {
  Tensor x, y;
  int64_t n = 0;
};

DataSet make_data(Device dev, int64_t n) {
  manual_seed(99);
  return {randn({n, 20}, dev), randint(0, 3, {n}, dev), n};
}

// Batch `step` of an epoch loop over `d` in batches of `b` (the last one shorter), sliced.
BatchFn epoch_slices(const DataSet& d, int64_t b) {
  const int64_t per_epoch = (d.n + b - 1) / b;
  return [d, b, per_epoch](int step) {
    const int64_t start = (step % per_epoch) * b, end = std::min(d.n, start + b);
    return std::pair{d.x.slice(0, start, end), d.y.slice(0, start, end)};
  };
}

int batches_per_epoch(int64_t n, int64_t b) { return static_cast<int>((n + b - 1) / b); }

const std::vector<Model> kModels = {Model::ReluMlp, Model::GeluDropout, Model::TanhSigmoid};

void sliced_fixed_batches(Device dev, jit::Options opts) {
  const DataSet d = make_data(dev, 64 * 12);
  for (Model m : kModels) {
    const jit::CompileStats s = compiled_equals_eager(m, dev, 24, epoch_slices(d, 64), opts);
    INFO(model_name(m) << ": " << describe(s));
    CHECK(s.executables == 1);
    CHECK(s.recompiles == 0);
    CHECK(s.traces <= 3);
    CHECK(s.replays == 24 - s.traces);
  }
}

void short_last_batch(Device dev, jit::Options opts) {
  // 3000 samples in batches of 128: 23 full batches and one of 56, over 6 epochs.
  const DataSet d = make_data(dev, 3000);
  const int per_epoch = batches_per_epoch(3000, 128);
  for (Model m : kModels) {
    const jit::CompileStats s =
        compiled_equals_eager(m, dev, 6 * per_epoch, epoch_slices(d, 128), opts);
    INFO(model_name(m) << ": " << describe(s));
    CHECK(s.executables <= 2);
    CHECK(s.recompiles <= 1);
    // At most three at 128 (state creation, then two that agree); at 56 one when the changed
    // dim becomes symbolic (generalized against the 128 trace), else two that agree.
    CHECK(s.traces <= (opts.dynamic == std::optional<bool>(false) ? 5 : 4));
    CHECK(s.replays == 6 * per_epoch - s.traces);
  }
}

void dynamic_fixed_size(Device dev, jit::Options opts) {
  manual_seed(5);
  for (Model m : kModels) {
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int i = 0; i < 20; ++i)
      batches.emplace_back(randn({64, 20}, dev), randint(0, 3, {64}, dev));
    const jit::CompileStats s = compiled_equals_eager(
        m, dev, 20, [&](int i) { return batches[i]; }, opts);
    INFO(model_name(m) << ": " << describe(s));
    // Two agreeing traces, after one that creates state (momentum buffers) if the model has any.
    CHECK(s.traces == (m == Model::GeluDropout ? 3 : 2));
    CHECK(s.executables == 1);
    CHECK(s.replays == 20 - s.traces);
  }
}

void dynamic_varying_sizes(Device dev, jit::Options opts) {
  const DataSet d = make_data(dev, 4000);
  const std::vector<int64_t> sizes = {64, 64, 64, 32, 100, 7, 64, 256, 1, 32, 100, 64};
  for (Model m : kModels) {
    const jit::CompileStats s = compiled_equals_eager(
        m, dev, static_cast<int>(sizes.size() * 2),
        [&](int i) {
          const int64_t b = sizes[i % sizes.size()], start = 13 * i;
          return std::pair{d.x.slice(0, start, start + b), d.y.slice(0, start, start + b)};
        },
        opts);
    INFO(model_name(m) << ": " << describe(s));
    // 64 until two traces agree (after one creating state, for momentum), then 32 generalizes
    // against them; every later call replays.
    CHECK(s.traces == (m == Model::GeluDropout ? 4 : 3));
    CHECK(s.executables == 2);  // the specialized 64 and the template
    CHECK(s.recompiles <= 1);
  }
}

void shuffled_batches(Device dev, jit::Options opts) {
  const DataSet d = make_data(dev, 640);
  std::vector<int64_t> perm(640);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
  const Tensor index = from_vector(perm, {640}).to(dev);
  for (Model m : kModels) {
    const jit::CompileStats s = compiled_equals_eager(
        m, dev, 20,
        [&](int i) {
          const Tensor idx = index.slice(0, (i % 10) * 64, (i % 10 + 1) * 64);
          return std::pair{index_select(d.x, 0, idx), index_select(d.y, 0, idx)};
        },
        opts);
    INFO(model_name(m) << ": " << describe(s));
    CHECK(s.executables == 1);
    CHECK(s.replays == 20 - s.traces);
    CHECK(s.traces <= 3);
  }
}

}  // namespace

TEST_CASE("jit loops: batches sliced from one tensor replay one executable", "[jit]") {
  sliced_fixed_batches(Device::cpu(), {});
  sliced_fixed_batches(Device::cpu(), {.dynamic = false});
}

TEST_CASE("jit loops: an epoch loop with a short last batch keeps two executables", "[jit]") {
  SECTION("dynamic auto") { short_last_batch(Device::cpu(), {}); }
  SECTION("dynamic=true") { short_last_batch(Device::cpu(), {.dynamic = true}); }
  SECTION("dynamic=false: one executable per batch size") {
    short_last_batch(Device::cpu(), {.dynamic = false});
  }
}

TEST_CASE("jit loops: dynamic=true at a fixed size replays from the fourth call", "[jit]") {
  dynamic_fixed_size(Device::cpu(), {.dynamic = true});
}

TEST_CASE("jit loops: dynamic=true over varying sliced sizes serves one template", "[jit]") {
  dynamic_varying_sizes(Device::cpu(), {.dynamic = true});
}

TEST_CASE("jit loops: a template serves a size whose own traces have not agreed yet", "[jit]") {
  // Batch sizes cycling b, 3b/4, b/2, 3b/4 + 1 (dynamic auto): once the template exists it
  // serves b too, instead of tracing b again eagerly (a trace beside the template's arenas
  // would peak above eager).
  manual_seed(6);
  const std::vector<int64_t> sizes = {16, 12, 8, 13};
  for (Model m : kModels) {
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int i = 0; i < 32; ++i) {
      const int64_t b = sizes[i % sizes.size()];
      batches.emplace_back(randn({b, 20}), randint(0, 3, {b}));
    }
    const jit::CompileStats s =
        compiled_equals_eager(m, Device::cpu(), 32, [&](int i) { return batches[i]; }, {});
    INFO(model_name(m) << ": " << describe(s));
    CHECK(s.traces <= 3);
    CHECK(s.replays == 32 - s.traces);
  }
}

TEST_CASE("jit loops: shuffled batches gathered with index_select replay", "[jit]") {
  shuffled_batches(Device::cpu(), {});
}

TEST_CASE("jit loops: a miss names the argument and property that changed", "[jit]") {
  test::LogCapture logs(jit::Log::recompiles);
  Tensor w = randn({6, 4});
  auto f = jit::compile([&](const Tensor& x) { return relu(mm(x, w)); }, {.dynamic = false});
  const Tensor big = randn({40, 6});
  f(big.slice(0, 0, 8));
  f(big.slice(0, 8, 16));  // another offset: the same signature
  f(big.slice(0, 16, 24));
  CHECK(f.stats().recompiles == 0);
  f(randn({6, 8}).transpose(0, 1));  // same sizes, other strides
  CHECK(logs.count("input 0 strides: [6, 1] -> [1, 8]") == 1);
  CHECK(logs.count("plain") == 0);  // the function has no plain arguments
  auto g = jit::compile([&](const Tensor& x, double k) { return x * k; }, {.dynamic = false});
  g(randn({3}), 2.0);
  g(randn({3}), 3.0);
  CHECK(logs.count("argument 1 (a plain value) changed") == 1);
}

TEST_CASE("jit loops: every loop on CUDA in every mode", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (jit::Mode mode : {jit::Mode::Default, jit::Mode::ReduceOverhead, jit::Mode::MaxAutotune}) {
    INFO("mode " << static_cast<int>(mode));
    const Device dev = Device::cuda(0);
    sliced_fixed_batches(dev, {.mode = mode});
    short_last_batch(dev, {.mode = mode});
    short_last_batch(dev, {.mode = mode, .dynamic = true});
    dynamic_fixed_size(dev, {.mode = mode, .dynamic = true});
    dynamic_varying_sizes(dev, {.mode = mode, .dynamic = true});
    shuffled_batches(dev, {.mode = mode});
  }
}
