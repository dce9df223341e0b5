// Peak memory of a compiled training step against the same steps run eagerly (the target:
// compiled <= 1.0x eager), measured over everything a user's loop does: the traced calls,
// building the executable, and the replays, on the seed MLP: on a CUDA device with its caching
// allocator's figures, and on the CPU with the host cache's (the same allocator design).
//
// No mode may exceed eager at any batch: the graph modes' CUDA graph reads the arguments where
// the loop made them (jit/executor.h), with no static copy of the batch.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/allocator.h"
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
cuda::AllocatorStats stats_of(Device dev) {
  return dev.is_cuda() ? cuda::memory_stats(dev.index) : cpu::memory_stats();
}

int64_t peak_of_training(Device dev, const std::vector<int64_t>& batches, bool compiled,
                         jit::Mode mode, std::vector<float>* losses,
                         std::optional<bool> dynamic = std::nullopt) {
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
  if (dev.is_cuda()) {
    cuda::synchronize(dev.index);
    cuda::reset_peak_memory_stats(dev.index);
  } else {
    cpu::reset_peak_memory_stats();
  }
  manual_seed(6);
  for (int i = 0; i < 8 * static_cast<int>(batches.size()); ++i) {
    const int64_t batch = batches[static_cast<size_t>(i) % batches.size()];
    const Tensor x = randn({batch, 784}, dev), y = randint(0, 10, {batch}, dev);
    losses->push_back((compiled ? step(x, y) : body(x, y)).item<float>());
    if (std::getenv("EMBER_TEST_PEAK_TRACE")) {
      const cuda::AllocatorStats m = stats_of(dev);
      std::printf("%s batch %lld step %d: allocated %lld peak %lld\n",
                  compiled ? "compiled" : "eager", static_cast<long long>(batch), i,
                  static_cast<long long>(m.allocated), static_cast<long long>(m.peak_allocated));
    }
  }
  if (dev.is_cuda()) cuda::synchronize(dev.index);
  if (compiled) REQUIRE(step.stats().replays >= 4);
  if (compiled && dev.is_cuda() && mode == jit::Mode::ReduceOverhead)
    REQUIRE(step.stats().graph_replays >= 3);
  return stats_of(dev).peak_allocated;
}

// Every mode, one batch size at a time.
void check_fixed_batches(Device dev, std::initializer_list<int64_t> batches) {
  for (int64_t batch : batches) {
    INFO("batch " << batch);
    std::vector<float> eager_losses, compiled_losses, graph_losses;
    const int64_t eager = peak_of_training(dev, {batch}, false, jit::Mode::Default, &eager_losses);
    const int64_t compiled =
        peak_of_training(dev, {batch}, true, jit::Mode::Default, &compiled_losses);
    const int64_t graph =
        peak_of_training(dev, {batch}, true, jit::Mode::ReduceOverhead, &graph_losses);
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

// ember_bench's dynamic schedule. Every batch size gets an executable of its own; they share
// one set of arenas (jit/executor.h, ArenaPool), so the peak is that of the largest batch.
void check_changing_batches(Device dev, std::initializer_list<int64_t> firsts) {
  for (int64_t b : firsts) {
    const std::vector<int64_t> batches = {b, 3 * b / 4, b / 2, 3 * b / 4 + 1};
    INFO("batches from " << b);
    for (std::optional<bool> dynamic : {std::optional<bool>(true), std::optional<bool>()}) {
      INFO((dynamic ? "dynamic=true" : "dynamic auto"));
      std::vector<float> eager_losses, compiled_losses;
      const int64_t eager =
          peak_of_training(dev, batches, false, jit::Mode::Default, &eager_losses);
      const int64_t compiled =
          peak_of_training(dev, batches, true, jit::Mode::Default, &compiled_losses, dynamic);
      INFO("peak bytes: eager " << eager << ", compiled " << compiled);
      CHECK(compiled <= eager);
      REQUIRE(compiled_losses.size() == eager_losses.size());
      for (size_t i = 0; i < eager_losses.size(); ++i)
        CHECK(std::abs(compiled_losses[i] - eager_losses[i]) <= 1e-5 * std::abs(eager_losses[i]));
    }
  }
}

}  // namespace

TEST_CASE("jit: a compiled training step peaks at eager's, in Default and ReduceOverhead mode",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_fixed_batches(Device::cuda(0), {64, 1024, 4096, 8192});
}

TEST_CASE("jit: a step compiled for changing batch sizes peaks at eager's over the same batches",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_changing_batches(Device::cuda(0), {1024, 8192});
}

TEST_CASE("jit: on the CPU a compiled training step peaks at eager's (the host cache's figures)",
          "[jit]") {
  if (!cpu::caches_memory()) {
    std::cout << "EMBER_SKIP: host tensors bypass the caching allocator in this build" << std::endl;
    return;
  }
  check_fixed_batches(Device::cpu(), {64, 1024});
}

TEST_CASE("jit: on the CPU a step compiled for changing batch sizes peaks at eager's", "[jit]") {
  if (!cpu::caches_memory()) {
    std::cout << "EMBER_SKIP: host tensors bypass the caching allocator in this build" << std::endl;
    return;
  }
  check_changing_batches(Device::cpu(), {256});
}
