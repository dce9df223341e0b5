// bench/eager_mlp: the seed training step timed eagerly over batch sizes.
// The step is the example's (examples/mlp.cpp): MLP 784 -> 512 -> ReLU -> 10, CrossEntropyLoss,
// SGD lr 0.01, a fresh randn/randint batch drawn on the device, zero_grad, forward, backward,
// step, and loss.item(). item() copies the loss to the host, so it waits for the step's work:
// each step is timed with the host clock around the whole step, item() included.
// Per batch size: a warm-up, then `repeats` samples of `steps` steps; a sample's figure is its
// mean step time and the reported figure the median of the samples. Peak device memory is the
// caching allocator's high-water mark over the run at that batch size (reset before the model is
// built). Goal from issue 3 on the H200: batch 64 <= 150 us/step (PyTorch eager: 1187 us).
//   eager_mlp [--device auto|cpu|cuda] [--batches 64,1024,8192] [--json out.json] ...
#include <ember/ember.h>

#include "optim/sgd.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace ember;
using json = nlohmann::json;

namespace {

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(784, 512));
    fc2 = register_module("fc2", nn::Linear(512, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(Net);

struct Config {
  std::string device = "auto";
  std::vector<int64_t> batches;  // default: 64, 1024, 8192 on the GPU; 64, 1024 on the CPU
  int warmup = 0;                // defaults per device below
  int steps = 0;
  int repeats = 0;
  double lr = 0.01;
  double momentum = 0;
  uint64_t seed = 0;
  bool tf32 = false;
  std::string json_path;
};

struct Result {
  int64_t batch = 0;
  double us_per_step = 0;         // median over samples of the sample's mean
  double us_min = 0, us_max = 0;  // fastest and slowest sample
  double us_step_median = 0;      // median single step over all samples
  int64_t peak_bytes = -1;        // -1: not tracked (CPU)
  float last_loss = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string device_name(Device d) {
#ifdef EMBER_WITH_CUDA
  if (d.is_cuda()) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d.index) == cudaSuccess) return p.name;
  }
#endif
  if (d.is_cpu()) {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);) {
      if (line.rfind("model name", 0) != 0) continue;
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return d.str();
}

Result bench_batch(Device dev, int64_t batch, const Config& cfg) {
  if (dev.is_cuda()) {
    cuda::synchronize(dev.index);
    cuda::reset_peak_memory_stats(dev.index);
  }
  Net model;
  model->to(dev);
  optim::SGD opt(model->parameters(), optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
  nn::CrossEntropyLoss criterion;

  float loss_value = 0;
  const auto step = [&] {
    Tensor x = randn({batch, 784}, dev), y = randint(0, 10, {batch}, dev);
    opt.zero_grad();
    Tensor loss = criterion(model(x), y);
    loss.backward();
    opt.step();
    loss_value = loss.item<float>();
  };

  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < cfg.warmup; ++i) step();
  std::vector<double> sample_us, step_us;
  step_us.reserve(static_cast<size_t>(cfg.steps) * cfg.repeats);
  for (int r = 0; r < cfg.repeats; ++r) {
    double total = 0;
    for (int s = 0; s < cfg.steps; ++s) {
      const auto t0 = Clock::now();
      step();
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      step_us.push_back(us);
      total += us;
    }
    sample_us.push_back(total / cfg.steps);
  }
  EMBER_CHECK(std::isfinite(loss_value), "eager_mlp: the loss became ", loss_value, " at batch ",
              batch);

  Result res;
  res.batch = batch;
  res.us_per_step = median(sample_us);
  res.us_min = *std::min_element(sample_us.begin(), sample_us.end());
  res.us_max = *std::max_element(sample_us.begin(), sample_us.end());
  res.us_step_median = median(step_us);
  res.last_loss = loss_value;
  if (dev.is_cuda()) res.peak_bytes = cuda::memory_stats(dev.index).peak_allocated;
  return res;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ember eager MLP training step (784-512-10, SGD) over batch sizes"};
  Config cfg;
  app.add_option("--device", cfg.device, "auto (GPU if present), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--batches", cfg.batches, "batch sizes (default 64 1024 8192; CPU: 64 1024)")
      ->delimiter(',');
  app.add_option("--warmup", cfg.warmup, "untimed steps per batch size (default GPU 50, CPU 3)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--steps", cfg.steps, "steps per sample (default GPU 100, CPU 10)")
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", cfg.repeats,
                 "samples per batch size, median reported "
                 "(default GPU 11, CPU 5)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", cfg.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--momentum", cfg.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--seed", cfg.seed, "seed of the default generator")->capture_default_str();
  app.add_flag("--tf32", cfg.tf32, "allow TF32 in float32 GEMMs on the GPU");
  app.add_option("--json", cfg.json_path, "write the results to this JSON file");
  CLI11_PARSE(app, argc, argv);

  try {
    Device dev = Device::cpu();
    if (cfg.device == "auto") {
      dev = cuda::is_available() ? Device::cuda(0) : Device::cpu();
    } else {
      dev = Device::parse(cfg.device);
      EMBER_CHECK(dev.is_cpu() || cuda::is_available(), "eager_mlp: --device ", cfg.device,
                  " asked for, but no CUDA device is available");
    }
    // The CPU is ~100x slower per step: smaller sweeps keep a run under a minute there.
    const bool gpu = dev.is_cuda();
    if (cfg.batches.empty())
      cfg.batches = gpu ? std::vector<int64_t>{64, 1024, 8192} : std::vector<int64_t>{64, 1024};
    if (app.count("--warmup") == 0) cfg.warmup = gpu ? 50 : 3;
    if (app.count("--steps") == 0) cfg.steps = gpu ? 100 : 10;
    if (app.count("--repeats") == 0) cfg.repeats = gpu ? 11 : 5;
    for (int64_t b : cfg.batches)
      EMBER_CHECK(b > 0, "eager_mlp: batch sizes must be positive, got ", b);
    manual_seed(cfg.seed);
    set_allow_tf32(cfg.tf32);

    const std::string name = device_name(dev);
    std::printf(
        "eager MLP step (784-512-ReLU-10, CrossEntropyLoss, SGD lr %g momentum %g) on %s"
        " (%s)\n%d warm-up steps, then %d samples of %d steps; median of the samples\n\n",
        cfg.lr, cfg.momentum, dev.str().c_str(), name.c_str(), cfg.warmup, cfg.repeats, cfg.steps);
    std::printf("%-8s %12s %12s %22s %14s %10s\n", "batch", "us/step", "steps/s",
                "samples min..max us", "peak memory", "loss");

    json rows = json::array();
    for (int64_t batch : cfg.batches) {
      const Result r = bench_batch(dev, batch, cfg);
      const std::string peak =
          r.peak_bytes < 0 ? std::string("n/a") : fmt("%.1f MiB", r.peak_bytes / 1048576.0);
      std::printf("%-8lld %12.1f %12.1f %22s %14s %10.4f\n", static_cast<long long>(batch),
                  r.us_per_step, 1e6 / r.us_per_step,
                  (fmt("%.1f", r.us_min) + " .. " + fmt("%.1f", r.us_max)).c_str(), peak.c_str(),
                  r.last_loss);
      std::fflush(stdout);
      rows.push_back({{"batch", batch},
                      {"us_per_step", r.us_per_step},
                      {"steps_per_s", 1e6 / r.us_per_step},
                      {"us_per_step_min_sample", r.us_min},
                      {"us_per_step_max_sample", r.us_max},
                      {"us_single_step_median", r.us_step_median},
                      {"peak_memory_bytes", r.peak_bytes < 0 ? json(nullptr) : json(r.peak_bytes)},
                      {"last_loss", r.last_loss}});
    }
    if (gpu)
      std::printf("\ngoal (issue 3, H200): batch 64 <= 150 us/step; PyTorch eager: 1187 us\n");

    if (!cfg.json_path.empty()) {
      const json out = {
          {"bench", "eager_mlp"},
          {"device", dev.str()},
          {"device_name", name},
          {"model", "784-512-relu-10"},
          {"loss", "CrossEntropyLoss"},
          {"optimizer", {{"name", "SGD"}, {"lr", cfg.lr}, {"momentum", cfg.momentum}}},
          {"config",
           {{"warmup", cfg.warmup},
            {"steps", cfg.steps},
            {"repeats", cfg.repeats},
            {"seed", cfg.seed},
            {"tf32", cfg.tf32}}},
          {"timing",
           "host clock around each step, loss.item() included; "
           "median over samples of the sample mean"},
          {"results", rows}};
      std::ofstream f(cfg.json_path);
      f << out.dump(2) << "\n";
      EMBER_CHECK(f.good(), "eager_mlp: cannot write ", cfg.json_path);
      std::printf("\nwrote %s\n", cfg.json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
