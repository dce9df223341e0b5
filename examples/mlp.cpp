// The seed workload of DESIGN.md ("What a user writes"), trained eagerly: an MLP
// 784 -> 512 -> ReLU -> 10 with cross entropy and SGD, a fresh synthetic batch drawn on the
// device every step and the loss read back every step. On the GPU when there is one, else the CPU.
//   mlp [--batch 64] [--steps 500] [--device auto|cpu|cuda|cuda:N] [--seed 0] [--momentum 0]
//       [--lr 0.01] [--warmup 20] [--log-every 100]
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

using namespace ember;

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(784, 512));
    fc2 = register_module("fc2", nn::Linear(512, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(Net);

namespace {

struct Config {
  int64_t batch = 64;
  int64_t steps = 500;
  int64_t warmup = 20;
  int64_t log_every = 100;
  std::string device = "auto";
  uint64_t seed = 0;
  double lr = 0.01;
  double momentum = 0;
};

Device pick_device(const std::string& name) {
  if (name == "auto") return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  const Device d = Device::parse(name);
  EMBER_CHECK(!d.is_cuda() || cuda::is_available(), "mlp: --device ", name,
              " asked for, but no CUDA device is available",
              " (Ember built without CUDA, or no GPU visible)");
  EMBER_CHECK(!d.is_cuda() || d.index < cuda::device_count(), "mlp: --device ", name, ": only ",
              cuda::device_count(), " CUDA device(s)");
  return d;
}

void train(const Config& cfg) {
  EMBER_CHECK(cfg.batch > 0, "mlp: --batch must be positive, got ", cfg.batch);
  EMBER_CHECK(cfg.steps > 0, "mlp: --steps must be positive, got ", cfg.steps);
  EMBER_CHECK(cfg.warmup >= 0, "mlp: --warmup must be non-negative, got ", cfg.warmup);
  EMBER_CHECK(cfg.log_every > 0, "mlp: --log-every must be positive, got ", cfg.log_every);
  const Device dev = pick_device(cfg.device);
  manual_seed(cfg.seed);

  Net model;
  model->to(dev);
  optim::SGD opt(model->parameters(), optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
  nn::CrossEntropyLoss criterion;

  std::cout << "Ember MLP on " << dev.str() << ": " << *model << "\n"
            << "batch " << cfg.batch << ", SGD lr " << cfg.lr << " momentum " << cfg.momentum
            << ", seed " << cfg.seed << ", " << cfg.steps << " steps\n";
  if (cfg.warmup > 0)
    std::cout << "warming up for " << cfg.warmup
              << " steps (first calls fill the allocator caches; not timed)\n";

  using Clock = std::chrono::steady_clock;
  Clock::time_point start;
  for (int64_t i = 0; i < cfg.steps; ++i) {
    if (i == cfg.warmup) start = Clock::now();
    // A fresh batch every step, drawn on the device: nothing is copied from the host.
    Tensor x = randn({cfg.batch, 784}, dev), y = randint(0, 10, {cfg.batch}, dev);
    opt.zero_grad();
    Tensor loss = criterion(model(x), y);
    loss.backward();
    opt.step();
    const float l = loss.item<float>();  // copies the loss to the host: one sync per step
    EMBER_CHECK(std::isfinite(l), "mlp: the loss became ", l, " at step ", i + 1);
    if (i + 1 == cfg.warmup) std::cout << "warm-up done\n";
    if ((i + 1) % cfg.log_every == 0 || i + 1 == cfg.steps)
      std::printf("step %6lld  loss %.5f\n", static_cast<long long>(i + 1), l);
  }
  const int64_t timed = cfg.steps - cfg.warmup;
  if (timed <= 0) {
    std::cout << "no steady-state figure: every step was warm-up (use --steps > --warmup)\n";
    return;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("steady state: %lld steps in %.3f s: %.1f steps/s, %.1f us/step (batch %lld, %s)\n",
              static_cast<long long>(timed), seconds, timed / seconds, 1e6 * seconds / timed,
              static_cast<long long>(cfg.batch), dev.str().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ember MLP: 784-512-10 trained eagerly on synthetic batches (GPU if present)"};
  Config cfg;
  app.add_option("--batch", cfg.batch, "samples per step")->capture_default_str();
  app.add_option("--steps", cfg.steps, "training steps, warm-up included")->capture_default_str();
  app.add_option("--device", cfg.device, "auto (GPU if present), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "seed of the default generator (init and batches)")
      ->capture_default_str();
  app.add_option("--momentum", cfg.momentum, "SGD momentum (0: plain SGD)")->capture_default_str();
  app.add_option("--lr", cfg.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--warmup", cfg.warmup, "untimed steps before the steady-state timing")
      ->capture_default_str();
  app.add_option("--log-every", cfg.log_every, "print the loss every N steps")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    train(cfg);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
