// bench/mlp_step: the seed training step timed eagerly and under jit::compile, over batch sizes.
// The step is the example's (examples/mlp.cpp): MLP 784 -> 512 -> ReLU -> 10, CrossEntropyLoss,
// SGD lr 0.01, a fresh randn/randint batch drawn on the device, zero_grad, forward, backward,
// step, and loss.item(). item() copies the loss to the host, so it waits for the step's work:
// each step is timed with the host clock around the whole step, item() included.
// Per batch size: a warm-up, then `repeats` samples of `steps` steps; a sample's figure is its
// mean step time and the reported figure the median of the samples. Peak device memory is the
// caching allocator's high-water mark over the run at that batch size (reset before the model is
// built). Each (mode, batch) run starts from the same seed, so the models see the same batches
// and the final losses of the modes can be compared: the relative difference from eager is a
// consistency check printed with the timings. For a compiled mode, "first step" is the wall time
// until the step replays from its executable (its traced calls included).
// Goal from issue 3 on the H200: batch 64 <= 150 us/step eager (PyTorch eager: 1187 us).
//   mlp_step [--device auto|cpu|cuda] [--batches 64,1024,8192] [--modes eager,default]
//            [--json out.json] ...
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
  std::vector<std::string> modes{"eager", "default"};
};

struct Result {
  std::string mode;
  int64_t batch = 0;
  double first_ms = 0;            // eager: the first step; compiled: until the first replay
  double us_per_step = 0;         // median over samples of the sample's mean
  double us_min = 0, us_max = 0;  // fastest and slowest sample
  double us_step_median = 0;      // median single step over all samples
  int64_t peak_bytes = -1;        // -1: not tracked (CPU)
  float last_loss = 0;
  jit::CompileStats jit;
};

jit::Mode mode_of(const std::string& m) {
  if (m == "reduce-overhead") return jit::Mode::ReduceOverhead;
  if (m == "max-autotune") return jit::Mode::MaxAutotune;
  return jit::Mode::Default;
}

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

Result bench_batch(Device dev, int64_t batch, const Config& cfg, const std::string& mode) {
  if (dev.is_cuda()) {
    cuda::synchronize(dev.index);
    cuda::reset_peak_memory_stats(dev.index);
  }
  manual_seed(cfg.seed);
  Net model;
  model->to(dev);
  optim::SGD opt(model->parameters(), optim::SGDOptions(cfg.lr).momentum(cfg.momentum));
  nn::CrossEntropyLoss criterion;

  float loss_value = 0;
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = criterion(model(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  const bool eager = mode == "eager";
  auto compiled = jit::compile(train_step, {.mode = mode_of(mode), .fullgraph = true});
  const auto step = [&] {
    Tensor x = randn({batch, 784}, dev), y = randint(0, 10, {batch}, dev);
    Tensor loss = eager ? train_step(x, y) : compiled(x, y);
    loss_value = loss.item<float>();
  };

  using Clock = std::chrono::steady_clock;
  Result res;
  const auto start = Clock::now();
  // Warm up, the same number of steps in every mode so the final losses stay comparable; at
  // least 4, as a compiled step replays from its 4th call (3 traced calls, see jit/compile.cpp).
  // Its traced calls are the cost a user pays once, reported as "first step".
  const int warmup = std::max(cfg.warmup, 4);
  for (int i = 0; i < warmup; ++i) {
    step();
    const bool ready = eager ? i == 0 : compiled.stats().replays == 1;
    if (ready && res.first_ms == 0)
      res.first_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
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
  EMBER_CHECK(std::isfinite(loss_value), "mlp_step: the loss became ", loss_value, " at batch ",
              batch);
  EMBER_CHECK(eager || compiled.stats().replays > 0, "mlp_step: mode ", mode,
              " never replayed from an executable (", compiled.stats().graph_breaks,
              " graph breaks)");

  res.mode = mode;
  res.batch = batch;
  if (!eager) res.jit = compiled.stats();
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
  CLI::App app{"Ember MLP training step (784-512-10, SGD), eager and compiled, over batch sizes"};
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
  app.add_option("--modes", cfg.modes, "eager, default, reduce-overhead, max-autotune")
      ->delimiter(',')
      ->check(CLI::IsMember({"eager", "default", "reduce-overhead", "max-autotune"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    Device dev = Device::cpu();
    if (cfg.device == "auto") {
      dev = cuda::is_available() ? Device::cuda(0) : Device::cpu();
    } else {
      dev = Device::parse(cfg.device);
      EMBER_CHECK(dev.is_cpu() || cuda::is_available(), "mlp_step: --device ", cfg.device,
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
      EMBER_CHECK(b > 0, "mlp_step: batch sizes must be positive, got ", b);
    set_allow_tf32(cfg.tf32);

    const std::string name = device_name(dev);
    std::printf(
        "MLP step (784-512-ReLU-10, CrossEntropyLoss, SGD lr %g momentum %g) on %s"
        " (%s)\n%d warm-up steps, then %d samples of %d steps; median of the samples\n\n",
        cfg.lr, cfg.momentum, dev.str().c_str(), name.c_str(), cfg.warmup, cfg.repeats, cfg.steps);
    std::printf("%-16s %-7s %10s %10s %20s %13s %11s %10s %10s\n", "mode", "batch", "us/step",
                "steps/s", "samples min..max us", "first step ms", "peak memory", "loss",
                "vs eager");

    json rows = json::array();
    for (int64_t batch : cfg.batches) {
      float eager_loss = std::nanf("");
      for (const std::string& mode : cfg.modes) {
        const Result r = bench_batch(dev, batch, cfg, mode);
        if (mode == "eager") eager_loss = r.last_loss;
        const double rel = std::fabs(r.last_loss - eager_loss) /
                           std::max(1e-30, static_cast<double>(std::fabs(eager_loss)));
        const std::string peak =
            r.peak_bytes < 0 ? std::string("n/a") : fmt("%.1f MiB", r.peak_bytes / 1048576.0);
        std::printf("%-16s %-7lld %10.1f %10.1f %20s %13.2f %11s %10.4f %10s\n", mode.c_str(),
                    static_cast<long long>(batch), r.us_per_step, 1e6 / r.us_per_step,
                    (fmt("%.1f", r.us_min) + " .. " + fmt("%.1f", r.us_max)).c_str(), r.first_ms,
                    peak.c_str(), r.last_loss, std::isnan(rel) ? "n/a" : fmt("%.1e", rel).c_str());
        std::fflush(stdout);
        json row = {{"mode", mode},
                    {"batch", batch},
                    {"us_per_step", r.us_per_step},
                    {"steps_per_s", 1e6 / r.us_per_step},
                    {"us_per_step_min_sample", r.us_min},
                    {"us_per_step_max_sample", r.us_max},
                    {"us_single_step_median", r.us_step_median},
                    {"first_step_ms", r.first_ms},
                    {"peak_memory_bytes", r.peak_bytes < 0 ? json(nullptr) : json(r.peak_bytes)},
                    {"last_loss", r.last_loss},
                    {"loss_rel_diff_vs_eager", std::isnan(rel) ? json(nullptr) : json(rel)}};
        if (mode != "eager")
          row["jit"] = {{"traces", r.jit.traces},
                        {"executables", r.jit.executables},
                        {"replays", r.jit.replays},
                        {"graph_breaks", r.jit.graph_breaks}};
        rows.push_back(row);
      }
    }
    if (gpu)
      std::printf("\ngoal (issue 3, H200): batch 64 <= 150 us/step; PyTorch eager: 1187 us\n");

    if (!cfg.json_path.empty()) {
      const json out = {
          {"bench", "mlp_step"},
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
      EMBER_CHECK(f.good(), "mlp_step: cannot write ", cfg.json_path);
      std::printf("\nwrote %s\n", cfg.json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
