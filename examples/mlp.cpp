// The seed workload of DESIGN.md ("What a user writes"): an MLP 784 -> 512 -> ReLU -> 10 with
// cross entropy and SGD, a fresh synthetic batch drawn on the device every step and the loss read
// back every step, trained eagerly and then with the whole step under jit::compile, from the same
// seed, side by side. On the GPU when there is one, else the CPU.
//   mlp [--batch 64] [--steps 500] [--device auto|cpu|cuda|cuda:N] [--seed 0] [--momentum 0]
//       [--lr 0.01] [--warmup 20] [--log-every 100] [--mode both|eager|compiled]
//       [--plot losses.svg]
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "examples/support/loss_plot.h"

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
  std::string mode = "both";
  std::string plot;  // an SVG of the loss curves; empty: none
};

struct RunResult {
  double us_per_step = 0;
  double first_call_ms = 0;  // the first step (compiled: its trace)
  double compiled_ms = 0;    // compiled: wall time until the step replays from an executable
  float final_loss = 0;
  std::vector<double> losses;  // every step's
  bool ok = false;
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

RunResult train(const Config& cfg, bool compiled) {
  EMBER_CHECK(cfg.batch > 0, "mlp: --batch must be positive, got ", cfg.batch);
  EMBER_CHECK(cfg.steps > 0, "mlp: --steps must be positive, got ", cfg.steps);
  EMBER_CHECK(cfg.warmup >= 0, "mlp: --warmup must be non-negative, got ", cfg.warmup);
  EMBER_CHECK(cfg.steps > cfg.warmup, "mlp: --steps (", cfg.steps, ") must exceed --warmup (",
              cfg.warmup, "), or no step is timed");
  EMBER_CHECK(cfg.log_every > 0, "mlp: --log-every must be positive, got ", cfg.log_every);
  const Device dev = pick_device(cfg.device);
  manual_seed(cfg.seed);  // both modes start from the same weights and draw the same batches

  Net model;
  model->to(dev);
  optim::SGD opt(model->parameters(), optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
  nn::CrossEntropyLoss criterion;

  auto eager_step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = criterion(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  // The whole step (zero_grad, forward, loss, backward, update) as one graph.
  auto compiled_step = jit::compile(eager_step, {.mode = jit::Mode::Default, .fullgraph = true});

  std::cout << "\n== " << (compiled ? "compiled (jit::compile, Default mode)" : "eager") << " on "
            << dev.str() << ": batch " << cfg.batch << ", SGD lr " << cfg.lr << " momentum "
            << cfg.momentum << ", seed " << cfg.seed << ", " << cfg.steps << " steps\n";

  using Clock = std::chrono::steady_clock;
  RunResult r;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point start;
  for (int64_t i = 0; i < cfg.steps; ++i) {
    if (i == cfg.warmup) start = Clock::now();
    // A fresh batch every step, drawn on the device: nothing is copied from the host.
    Tensor x = randn({cfg.batch, 784}, dev), y = randint(0, 10, {cfg.batch}, dev);
    Tensor loss = compiled ? compiled_step(x, y) : eager_step(x, y);
    const float l = loss.item<float>();  // waits for the loss: one sync per step
    EMBER_CHECK(std::isfinite(l), "mlp: the loss became ", l, " at step ", i + 1);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (i == 0) r.first_call_ms = ms;
    if (compiled && r.compiled_ms == 0 && compiled_step.stats().replays > 0) r.compiled_ms = ms;
    if ((i + 1) % cfg.log_every == 0 || i + 1 == cfg.steps)
      std::printf("step %6lld  loss %.5f\n", static_cast<long long>(i + 1), l);
    r.final_loss = l;
    r.losses.push_back(l);
  }
  const int64_t timed = cfg.steps - cfg.warmup;
  // A compiled step's item() may return before the step's update has run on the device.
  if (dev.is_cuda()) cuda::synchronize(dev.index);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.us_per_step = 1e6 * seconds / static_cast<double>(timed);
  r.ok = true;
  std::printf("steady state: %lld steps in %.3f s: %.1f steps/s, %.1f us/step\n",
              static_cast<long long>(timed), seconds, timed / seconds, r.us_per_step);
  if (compiled) {
    const jit::CompileStats& st = compiled_step.stats();
    std::printf("jit: %d traced calls, %d executable(s), %d replays, %d graph breaks\n", st.traces,
                st.executables, st.replays, st.graph_breaks);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ember MLP: 784-512-10 trained eagerly on synthetic batches (GPU if present)"};
  Config cfg;
  app.add_option("--batch", cfg.batch, "samples per step")->capture_default_str();
  app.add_option("--steps", cfg.steps, "training steps, warm-up included")->capture_default_str();
  app.add_option("--device", cfg.device, "auto (GPU if present), cpu, cuda or cuda:N")
      ->capture_default_str();
  // A negative seed would wrap to a huge unsigned one: refused, not reinterpreted.
  const CLI::Validator non_negative(
      [](std::string& v) {
        return v.find('-') == std::string::npos ? std::string()
                                                : "a seed is a non-negative integer, got " + v;
      },
      "NONNEGATIVE");
  app.add_option("--seed", cfg.seed, "seed of the default generator (init and batches)")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--momentum", cfg.momentum, "SGD momentum (0: plain SGD)")->capture_default_str();
  app.add_option("--lr", cfg.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--warmup", cfg.warmup, "untimed steps before the steady-state timing")
      ->capture_default_str();
  app.add_option("--log-every", cfg.log_every, "print the loss every N steps")
      ->capture_default_str();
  app.add_option("--mode", cfg.mode, "both (eager then compiled, side by side), eager, compiled")
      ->check(CLI::IsMember({"both", "eager", "compiled"}))
      ->capture_default_str();
  app.add_option("--plot", cfg.plot,
                 "write the loss per step as an SVG: eager and compiled overlaid, and their "
                 "relative difference");
  CLI11_PARSE(app, argc, argv);

  try {
    RunResult eager, compiled;
    if (cfg.mode != "compiled") eager = train(cfg, false);
    if (cfg.mode != "eager") compiled = train(cfg, true);
    if (eager.ok && compiled.ok) {
      std::printf("\n%-10s %12s %12s %16s %14s\n", "mode", "us/step", "steps/s", "first step ms",
                  "final loss");
      std::printf("%-10s %12.1f %12.1f %16.2f %14.6f\n", "eager", eager.us_per_step,
                  1e6 / eager.us_per_step, eager.first_call_ms, eager.final_loss);
      std::printf("%-10s %12.1f %12.1f %16.2f %14.6f\n", "compiled", compiled.us_per_step,
                  1e6 / compiled.us_per_step, compiled.compiled_ms, compiled.final_loss);
      const double rel = std::fabs(compiled.final_loss - eager.final_loss) /
                         std::max(1e-30, static_cast<double>(std::fabs(eager.final_loss)));
      std::printf("compiled is %.2fx eager; final losses differ by %.2e relative\n",
                  eager.us_per_step / compiled.us_per_step, rel);
      std::printf(
          "(compiled \"first step\": wall time until the step replays from its "
          "executable, traced warm-up calls included)\n");
    }
    if (!cfg.plot.empty()) {
      examples::write_loss_svg(
          cfg.plot, {.title = "mlp 784-512-10, batch " + std::to_string(cfg.batch) + ", seed " +
                              std::to_string(cfg.seed),
                     .eager = eager.losses,
                     .compiled = compiled.losses});
      std::printf("loss curves written to %s\n", cfg.plot.c_str());
    }
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
