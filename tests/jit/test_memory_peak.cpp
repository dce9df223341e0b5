// Peak device memory of a compiled training step against the same steps run eagerly (the
// target: compiled <= 1.0x eager), measured over everything a user's loop does: the traced
// calls, building the executable, and the replays, on the seed MLP.
//
// No mode may exceed eager at any batch: the graph modes' CUDA graph reads the arguments where
// the loop made them (jit/executor.h), with no static copy of the batch.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;

namespace {

struct PeakNetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  PeakNetImpl() {
    fc1 = register_module("fc1", nn::Linear(784, 512));
    fc2 = register_module("fc2", nn::Linear(512, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(PeakNet);

// The high-water mark of allocated device memory over `steps` training steps from a fresh model
// (created before the mark is reset, as a user's model exists before training), and the losses.
int64_t peak_of_training(const std::vector<int64_t>& batches, bool compiled, jit::Mode mode,
                         std::vector<float>* losses, std::optional<bool> dynamic = std::nullopt) {
  const Device dev = Device::cuda(0);
  manual_seed(5);
  PeakNet net;
  net->to(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01));
  nn::CrossEntropyLoss crit;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = jit::compile(body, {.mode = mode, .fullgraph = true, .dynamic = dynamic});
  cuda::synchronize(0);
  cuda::reset_peak_memory_stats(0);
  manual_seed(6);
  for (int i = 0; i < 8 * static_cast<int>(batches.size()); ++i) {
    const int64_t batch = batches[static_cast<size_t>(i) % batches.size()];
    const Tensor x = randn({batch, 784}, dev), y = randint(0, 10, {batch}, dev);
    losses->push_back((compiled ? step(x, y) : body(x, y)).item<float>());
  }
  cuda::synchronize(0);
  if (compiled) REQUIRE(step.stats().replays >= 4);
  if (compiled && mode == jit::Mode::ReduceOverhead) REQUIRE(step.stats().graph_replays >= 3);
  return cuda::memory_stats(0).peak_allocated;
}

}  // namespace

TEST_CASE("jit: a compiled training step peaks at eager's, in Default and ReduceOverhead mode",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (int64_t batch : {64, 1024, 4096, 8192}) {
    INFO("batch " << batch);
    std::vector<float> eager_losses, compiled_losses, graph_losses;
    const int64_t eager = peak_of_training({batch}, false, jit::Mode::Default, &eager_losses);
    const int64_t compiled = peak_of_training({batch}, true, jit::Mode::Default, &compiled_losses);
    const int64_t graph = peak_of_training({batch}, true, jit::Mode::ReduceOverhead, &graph_losses);
    INFO("peak bytes: eager " << eager << ", compiled " << compiled << ", reduce-overhead "
                              << graph);
    CHECK(compiled <= eager);
    CHECK(graph <= eager);
    REQUIRE(compiled_losses.size() == eager_losses.size());
    REQUIRE(graph_losses.size() == eager_losses.size());
    for (size_t i = 0; i < eager_losses.size(); ++i) {
      CHECK(std::abs(compiled_losses[i] - eager_losses[i]) <= 1e-5 * std::abs(eager_losses[i]));
      CHECK(std::abs(graph_losses[i] - eager_losses[i]) <= 1e-5 * std::abs(eager_losses[i]));
    }
  }
}

TEST_CASE("jit: a step compiled for changing batch sizes peaks at eager's over the same batches",
          "[jit][cuda]") {
  // ember_bench's dynamic schedule. Every batch size gets an executable of its own; they share
  // one set of arenas (jit/executor.h, ArenaPool), so the peak is that of the largest batch.
  EMBER_REQUIRE_CUDA();
  for (int64_t b : {1024, 8192}) {
    const std::vector<int64_t> batches = {b, 3 * b / 4, b / 2, 3 * b / 4 + 1};
    INFO("batches from " << b);
    for (std::optional<bool> dynamic : {std::optional<bool>(true), std::optional<bool>()}) {
      INFO((dynamic ? "dynamic=true" : "dynamic auto"));
      std::vector<float> eager_losses, compiled_losses;
      const int64_t eager = peak_of_training(batches, false, jit::Mode::Default, &eager_losses);
      const int64_t compiled =
          peak_of_training(batches, true, jit::Mode::Default, &compiled_losses, dynamic);
      INFO("peak bytes: eager " << eager << ", compiled " << compiled);
      CHECK(compiled <= eager);
      REQUIRE(compiled_losses.size() == eager_losses.size());
      for (size_t i = 0; i < eager_losses.size(); ++i)
        CHECK(std::abs(compiled_losses[i] - eager_losses[i]) <= 1e-5 * std::abs(eager_losses[i]));
    }
  }
}
