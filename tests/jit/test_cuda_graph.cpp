// ReduceOverhead on CUDA: the replay captured as one CUDA graph (with concurrent branches where
// steps are independent). Checked against the eager path on an identical model: losses and
// weights over many steps (plain, momentum + nesterov, Dropout, set_lr between steps), returned
// tensors never overwritten by later replays, and the generator left exactly where eager leaves
// it.
#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "jit/log.h"
#include "kernels/cuda/early_read.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;

namespace {

// The perf log says whether (and why not) an executable uses a CUDA graph: shown on failure.
std::string g_perf_log;
void keep_log(std::string_view line) {
  g_perf_log += line;
  g_perf_log += '\n';
}

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::Dropout drop{nullptr};
  explicit NetImpl(double p) {
    fc1 = register_module("fc1", nn::Linear(40, 64));
    fc2 = register_module("fc2", nn::Linear(64, 7));
    drop = register_module("drop", nn::Dropout(p));
  }
  Tensor forward(const Tensor& x) { return fc2(drop(relu(fc1(x)))); }
};
EMBER_MODULE(Net);

struct Run {
  std::vector<Tensor> losses;  // as returned, kept across later steps
  std::vector<Tensor> params;
  uint64_t rng_offset = 0;
  jit::CompileStats stats;
};

Run train(bool compiled, jit::Mode mode, double momentum, double dropout, int steps) {
  const Device dev = Device::cuda(0);
  manual_seed(5);
  Net model(dropout);
  model->to(dev);
  optim::SGD opt(model->parameters(),
                 optim::SGDOptions(0.05).momentum(momentum).nesterov(momentum > 0));
  nn::CrossEntropyLoss crit;
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = jit::compile(step, {.mode = mode, .fullgraph = true});
  Run r;
  for (int i = 0; i < steps; ++i) {
    if (i == steps / 2) opt.set_lr(0.02);
    Tensor x = randn({32, 40}, dev), y = randint(0, 7, {32}, dev);
    r.losses.push_back(compiled ? fast(x, y) : step(x, y));
  }
  for (const Tensor& p : model->parameters()) r.params.push_back(p.cpu());
  r.rng_offset = default_generator().offset();
  r.stats = fast.stats();
  return r;
}

void compare(const Run& eager, const Run& graph, const char* what) {
  INFO(what);
  REQUIRE(eager.losses.size() == graph.losses.size());
  // Read the returned losses only now: a later replay must not have overwritten any of them.
  for (size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(graph.losses[i].item<float>() == eager.losses[i].item<float>());
  }
  for (size_t i = 0; i < eager.params.size(); ++i) {
    const auto a = eager.params[i].to_vector<float>(), b = graph.params[i].to_vector<float>();
    size_t bad = 0;
    for (size_t k = 0; k < a.size(); ++k) bad += a[k] != b[k];
    INFO("parameter " << i);
    CHECK(bad == 0);
  }
  CHECK(graph.rng_offset == eager.rng_offset);
}

}  // namespace

TEST_CASE("jit: ReduceOverhead replays a CUDA graph that matches eager exactly", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const int steps = 24;
  g_perf_log.clear();
  const unsigned prev_mask = jit::set_log_mask(static_cast<unsigned>(jit::Log::perf));
  jit::set_log_sink(&keep_log);
  for (double momentum : {0.0, 0.9}) {
    for (double dropout : {0.0, 0.25}) {
      const Run eager = train(false, jit::Mode::Default, momentum, dropout, steps);
      const Run graph = train(true, jit::Mode::ReduceOverhead, momentum, dropout, steps);
      compare(eager, graph,
              momentum > 0 ? (dropout > 0 ? "nesterov + dropout" : "nesterov")
                           : (dropout > 0 ? "dropout" : "plain"));
      CHECK(graph.stats.executables == 1);
      CHECK(graph.stats.graph_breaks == 0);
      // Calls 1-3 trace, call 4 replays plainly (warm-up), call 5 on launch the graph.
      INFO(g_perf_log);
      CHECK(graph.stats.graph_replays >= steps - 5);
      // The bias gradients' sums run beside the GEMMs (jit/executor.cpp, plan_branches).
      CHECK(g_perf_log.find("CUDA graph branches:") != std::string::npos);
      CHECK(g_perf_log.find("@1") != std::string::npos);
    }
  }
  jit::set_log_sink(nullptr);
  jit::set_log_mask(prev_mask);
}

TEST_CASE("jit: a ReduceOverhead function's outputs are fresh and its inputs rebound",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(9);
  Tensor w = randn({16, 8}, dev);
  auto f = jit::compile([&](const Tensor& x) { return relu(mm(x, w)) * 2.0 + 1.0; },
                        {.mode = jit::Mode::ReduceOverhead});
  std::vector<Tensor> xs, outs;
  for (int i = 0; i < 8; ++i) {
    xs.push_back(randn({12, 16}, dev));
    outs.push_back(f(xs.back()));
  }
  CHECK(f.stats().graph_replays >= 3);
  for (size_t i = 0; i < xs.size(); ++i) {
    const auto got = outs[i].to_vector<float>();
    const auto want = (relu(mm(xs[i], w)) * 2.0 + 1.0).to_vector<float>();
    INFO("call " << i + 1);
    CHECK(got == want);
  }
}

TEST_CASE("jit: a ReduceOverhead graph reads its arguments in place, one capture per address",
          "[jit][cuda]") {
  // A training loop makes each batch where the last one was freed, so a graph captured for
  // those addresses serves every later call without copying the batch. Here two batches
  // alternate, and each is overwritten in place before it is passed again: every output must be
  // that of the batch's contents at the call, and two captures must serve all graph calls.
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(21);
  Tensor w = randn({16, 8}, dev);
  auto f = jit::compile([&](const Tensor& x) { return relu(mm(x, w)) * 2.0 + 1.0; },
                        {.mode = jit::Mode::ReduceOverhead});
  Tensor xs[2] = {randn({12, 16}, dev), randn({12, 16}, dev)};
  for (int i = 0; i < 16; ++i) {
    Tensor& x = xs[i % 2];
    x.copy_(randn({12, 16}, dev));
    const Tensor out = f(x);
    const auto want = (relu(mm(x, w)) * 2.0 + 1.0).to_vector<float>();
    INFO("call " << i + 1);
    CHECK(out.to_vector<float>() == want);
  }
  CHECK(f.stats().graph_replays >= 10);
  CHECK(f.stats().graph_captures == 2);
}

TEST_CASE("jit: arguments at new addresses every call leave ReduceOverhead one copying graph",
          "[jit][cuda]") {
  // Past a few captures for moved arguments the executable stops capturing and copies each
  // call's arguments into one graph's static buffers: the results stay right, the captures stop.
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(22);
  Tensor w = randn({16, 8}, dev);
  auto f = jit::compile([&](const Tensor& x) { return relu(mm(x, w)) - 0.5; },
                        {.mode = jit::Mode::ReduceOverhead});
  std::vector<Tensor> xs;  // all alive: every call's argument is at a new address
  int captures_at_24 = 0;
  for (int i = 0; i < 32; ++i) {
    xs.push_back(randn({12, 16}, dev));
    const Tensor out = f(xs.back());
    INFO("call " << i + 1);
    CHECK(out.to_vector<float>() == (relu(mm(xs.back(), w)) - 0.5).to_vector<float>());
    if (i == 23) captures_at_24 = f.stats().graph_captures;
  }
  CHECK(captures_at_24 > 2);
  CHECK(f.stats().graph_captures == captures_at_24);
  CHECK(f.stats().graph_replays >= 28);
}

TEST_CASE("jit: item() on a ReduceOverhead loss reads the copy made right after the loss",
          "[jit][cuda]") {
  // The graph copies the loss to pinned host memory as soon as the cross entropy has run, so
  // item() returns while the backward and the update still run. Its value must be the loss's,
  // bit for bit eager's; a loss read after later replays, or changed in place, must still give
  // its own value (from device memory then).
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const int steps = 16;
  std::vector<float> eager_now, graph_now;
  std::vector<Tensor> graph_losses;
  int64_t served = 0;
  for (bool compiled : {false, true}) {
    manual_seed(31);
    Net model(0.0);
    model->to(dev);
    optim::SGD opt(model->parameters(), optim::SGDOptions(0.05));
    nn::CrossEntropyLoss crit;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = crit(model(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto fast = jit::compile(step, {.mode = jit::Mode::ReduceOverhead, .fullgraph = true});
    const int64_t before = cuda::early_reads_served();
    for (int i = 0; i < steps; ++i) {
      const Tensor x = randn({32, 40}, dev), y = randint(0, 7, {32}, dev);
      const Tensor loss = compiled ? fast(x, y) : step(x, y);
      (compiled ? graph_now : eager_now).push_back(loss.item<float>());
      if (compiled) graph_losses.push_back(loss);
    }
    if (compiled) {
      served = cuda::early_reads_served() - before;
      CHECK(fast.stats().graph_replays >= steps - 5);
    }
  }
  // Every graph replay's item() was served early (calls 1-4 trace or replay plainly).
  CHECK(served >= steps - 5);
  for (int i = 0; i < steps; ++i) {
    INFO("step " << i + 1);
    CHECK(graph_now[i] == eager_now[i]);
    // Read again now, after later replays overwrote the pinned slot: from device memory.
    CHECK(graph_losses[i].item<float>() == eager_now[i]);
    CHECK(graph_losses[i].to_vector<float>()[0] == eager_now[i]);
  }
  // Changed in place after the replay: item() sees the change, not the early copy.
  Tensor last = graph_losses.back();
  last.mul_(2.0);
  CHECK(last.item<float>() == 2.0f * eager_now.back());
}
