// bench/ops: the eager op path measured three ways, each against a goal from issue 2.
//   overhead   host time per op on 8-element tensors (CPU; CUDA including the launch, timed as
//              N async calls then one sync, divided by N)               goal <= 1 us / <= 6 us
//   bandwidth  pointwise ops on 64M floats vs the measured copy rate of the same device
//              (cudaMemcpy device-to-device; memcpy on the CPU), bytes read + written
//                                                                        goal >= 80% on the GPU
//   gemm       ember::mm vs a direct cublasSgemm on the same inputs     goal >= 95%
// Every figure is the median of repeats after a warm-up, with fresh random inputs per sample.
// Prints a table per section; --json writes all figures. GPU parts are skipped without a GPU.
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef EMBER_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

using namespace ember;
using json = nlohmann::json;

namespace {

int g_failed_checks = 0;  // GEMM results that disagree with the float64 reference

struct Config {
  int repeats = 11;
  int64_t numel = int64_t{1} << 26;  // 64M floats = 256 MiB per tensor
  bool quick = false;
  bool tf32 = false;
};

// ---- timing --------------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#ifdef EMBER_WITH_CUDA
void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(s));
}
#endif

// Waits for all work queued on `d`: Ember's own stream and (for the cuBLAS reference) the rest.
void sync(Device d) {
  if (!d.is_cuda()) return;
  cuda::synchronize(d.index);
#ifdef EMBER_WITH_CUDA
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

// Seconds per call of `f`: wall time of `calls` back-to-back calls plus one sync, over `calls`.
// The work is only queued on the GPU, so this is throughput: launch cost and device time overlap.
template <class F>
double time_calls(Device d, int calls, F&& f) {
  sync(d);
  const double t0 = now_s();
  for (int i = 0; i < calls; ++i) f();
  sync(d);
  return (now_s() - t0) / calls;
}

// Enough calls that one sample lasts about `target_s`, estimated from a few timed calls after
// a warm-up (one call alone would be dominated by the sync on the GPU).
template <class F>
int calls_for(Device d, double target_s, int max_calls, F&& f) {
  f();
  const double one = time_calls(d, 3, f);
  return std::clamp(static_cast<int>(target_s / std::max(one, 1e-9)), 1, max_calls);
}

// ---- output --------------------------------------------------------------------------------

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void print_row(const std::vector<std::string>& cells, const std::vector<int>& widths) {
  for (size_t i = 0; i < cells.size(); ++i) std::printf("%-*s", widths[i], cells[i].c_str());
  std::printf("\n");
}

// ---- (a) eager host overhead ---------------------------------------------------------------

// A plain function pointer: the timed loop adds one indirect call per op and nothing else.
using BinaryRun = Tensor (*)(Tensor&, const Tensor&);

struct SmallOp {
  const char* name;
  BinaryRun run;
};

json bench_overhead(Device d, const Config& cfg) {
  const std::vector<SmallOp> ops = {
      {"add", [](Tensor& a, const Tensor& b) { return add(a, b); }},
      {"mul", [](Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"add scalar", [](Tensor& a, const Tensor&) { return a + 1.5; }},
      {"relu", [](Tensor& a, const Tensor&) { return relu(a); }},
      {"exp", [](Tensor& a, const Tensor&) { return exp(a); }},
      {"sum", [](Tensor& a, const Tensor&) { return sum(a); }},
      {"add_ (in place)", [](Tensor& a, const Tensor& b) { return a.add_(b); }},
      {"mm 8x1x8",
       [](Tensor& a, const Tensor& b) {
         return mm(a.view({8, 1}), b.view({1, 8}));
       }},
  };
  const double goal_us = d.is_cuda() ? 6.0 : 1.0;
  const double sample_s = cfg.quick ? 2e-4 : 3e-3;
  const TensorOptions opts = TensorOptions(kFloat32).device(d);
  json rows = json::array();
  std::printf("\n== eager overhead per op, 8-element float32 tensors, %s (goal <= %.0f us)\n",
              d.str().c_str(), goal_us);
  const std::vector<int> w = {18, 12, 10, 8};
  print_row({"op", "us/op", "calls", "goal"}, w);
  for (const SmallOp& op : ops) {
    Tensor a = randn({8}, opts), b = randn({8}, opts);
    const int calls = calls_for(d, sample_s, 100000, [&] { op.run(a, b); });
    std::vector<double> samples;
    for (int r = 0; r < cfg.repeats; ++r) {
      a = randn({8}, opts);
      b = randn({8}, opts);
      samples.push_back(time_calls(d, calls, [&] { op.run(a, b); }));
    }
    const double us = median(samples) * 1e6;
    print_row({op.name, fmt("%.3f", us), std::to_string(calls), us <= goal_us ? "met" : "MISSED"},
              w);
    rows.push_back({{"op", op.name},
                    {"device", d.str()},
                    {"us_per_op", us},
                    {"calls_per_sample", calls},
                    {"repeats", cfg.repeats},
                    {"goal_us", goal_us}});
  }
  return rows;
}

// ---- (b) pointwise bandwidth ---------------------------------------------------------------

// Seconds to copy `bytes` within the device's memory: the ceiling a pointwise op can reach.
double copy_seconds(Device d, const Config& cfg, int64_t bytes) {
  const TensorOptions opts = TensorOptions(kFloat32).device(d);
  Tensor src = rand({bytes / 4}, opts), dst = empty({bytes / 4}, opts);
  void* to = dst.raw_data();
  const void* from = src.raw_data();
  const auto measure = [&](auto&& copy) {
    const int calls = calls_for(d, cfg.quick ? 1e-3 : 2e-2, 1000, copy);
    std::vector<double> samples;
    for (int r = 0; r < cfg.repeats; ++r) samples.push_back(time_calls(d, calls, copy));
    return median(samples);
  };
#ifdef EMBER_WITH_CUDA
  if (d.is_cuda()) {
    return measure(
        [&] { cuda_check(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy"); });
  }
#endif
  return measure([&] { std::memcpy(to, from, bytes); });
}

struct StreamOp {
  const char* name;
  int tensors_moved;  // float tensors read + written per call
  BinaryRun run;
};

json bench_bandwidth(Device d, const Config& cfg) {
  const int64_t n = cfg.numel;
  const double copy_bytes = 2.0 * 4 * n;  // read + write
  const double copy_gbs = copy_bytes / copy_seconds(d, cfg, 4 * n) / 1e9;
  const std::vector<StreamOp> ops = {
      {"add", 3, [](Tensor& a, const Tensor& b) { return add(a, b); }},
      {"mul", 3, [](Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"add_ (in place)", 3, [](Tensor& a, const Tensor& b) { return a.add_(b); }},
      {"add scalar", 2, [](Tensor& a, const Tensor&) { return a + 1.5; }},
      {"relu", 2, [](Tensor& a, const Tensor&) { return relu(a); }},
      {"exp", 2, [](Tensor& a, const Tensor&) { return exp(a); }},
      {"sigmoid", 2, [](Tensor& a, const Tensor&) { return sigmoid(a); }},
      {"gelu", 2, [](Tensor& a, const Tensor&) { return gelu(a); }},
  };
  const char* copy_name = d.is_cuda() ? "cudaMemcpy D2D" : "memcpy";
  std::printf("\n== pointwise bandwidth, %lld float32 elements, %s (copy: %s %.1f GB/s%s)\n",
              static_cast<long long>(n), d.str().c_str(), copy_name, copy_gbs,
              d.is_cuda() ? ", goal >= 80%" : "");
  const std::vector<int> w = {18, 12, 12, 10, 8};
  print_row({"op", "us", "GB/s", "of copy", d.is_cuda() ? "goal" : ""}, w);
  json rows = json::array();
  const TensorOptions opts = TensorOptions(kFloat32).device(d);
  for (const StreamOp& op : ops) {
    Tensor a = randn({n}, opts), b = randn({n}, opts);
    const int calls = calls_for(d, cfg.quick ? 1e-3 : 2e-2, 200, [&] { op.run(a, b); });
    std::vector<double> samples;
    for (int r = 0; r < cfg.repeats; ++r) {
      // Fresh inputs every few samples keep the values honest without doubling the run time.
      if (r % 4 == 3) a = randn({n}, opts), b = randn({n}, opts);
      samples.push_back(time_calls(d, calls, [&] { op.run(a, b); }));
    }
    const double s = median(samples);
    const double gbs = 4.0 * n * op.tensors_moved / s / 1e9;
    const double frac = gbs / copy_gbs;
    print_row({op.name, fmt("%.1f", s * 1e6), fmt("%.1f", gbs), fmt("%.0f%%", 100 * frac),
               d.is_cuda() ? (frac >= 0.8 ? "met" : "MISSED") : ""},
              w);
    rows.push_back({{"op", op.name},
                    {"device", d.str()},
                    {"numel", n},
                    {"bytes_per_call", 4.0 * n * op.tensors_moved},
                    {"us_per_call", s * 1e6},
                    {"gb_per_s", gbs},
                    {"copy_gb_per_s", copy_gbs},
                    {"fraction_of_copy", frac}});
  }
  return {{"copy", {{"device", d.str()}, {"method", copy_name}, {"gb_per_s", copy_gbs}}},
          {"ops", rows}};
}

// ---- (c) GEMM ------------------------------------------------------------------------------

struct GemmShape {
  int64_t m, k, n;  // [m, k] @ [k, n]
};

#ifdef EMBER_WITH_CUDA
// Row-major C = A B through column-major cuBLAS: C^T = B^T A^T, i.e. swap the operands.
void cublas_mm(cublasHandle_t h, const Tensor& a, const Tensor& b, Tensor& c, GemmShape s) {
  const float one = 1.f, zero = 0.f;
  cublas_check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.n),
                           static_cast<int>(s.m), static_cast<int>(s.k), &one,
                           static_cast<const float*>(b.raw_data()), static_cast<int>(s.n),
                           static_cast<const float*>(a.raw_data()), static_cast<int>(s.k), &zero,
                           static_cast<float*>(c.raw_data()), static_cast<int>(s.n)),
               "cublasSgemm");
}
#endif

// Error of C = A B at 64 sampled entries against float64 dot products computed here, each
// scaled by sum_k |a_ik b_kj| (so it is ~k * 2^-24 at worst for a correct float32 GEMM).
double f64_error(const Tensor& a, const Tensor& b, const Tensor& c, GemmShape s) {
  const std::vector<float> ha = a.to_vector<float>(), hb = b.to_vector<float>(),
                           hc = c.to_vector<float>();
  double worst = 0;
  for (int64_t t = 0; t < 64; ++t) {
    const int64_t i = (t * 7919) % s.m, j = (t * 104729) % s.n;
    double dot = 0, scale = 0;
    for (int64_t k = 0; k < s.k; ++k) {
      const double p = static_cast<double>(ha[i * s.k + k]) * hb[k * s.n + j];
      dot += p;
      scale += std::abs(p);
    }
    worst = std::max(worst, std::abs(hc[i * s.n + j] - dot) / std::max(scale, 1e-30));
  }
  return worst;
}

// max |x - y| / max |y|, computed on the host in float64.
[[maybe_unused]] double rel_diff(const Tensor& x, const Tensor& y) {
  const std::vector<float> a = x.to_vector<float>(), b = y.to_vector<float>();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

json bench_gemm(Device d, const Config& cfg) {
  std::vector<GemmShape> shapes = {
      {64, 784, 512}, {64, 512, 10}, {1024, 1024, 1024}, {8192, 784, 512}, {4096, 4096, 4096}};
  if (cfg.quick) shapes = {{64, 784, 512}, {64, 512, 10}, {256, 256, 256}};
  // The CPU's GEMMs are only a reference point here; skip the ones that would take seconds.
  const double cpu_max_flop = 1e10;
  const bool ref = d.is_cuda();
#ifdef EMBER_WITH_CUDA
  cublasHandle_t handle = nullptr;
  if (ref) {
    cuda_check(cudaSetDevice(d.index), "cudaSetDevice");
    cublas_check(cublasCreate(&handle), "cublasCreate");
    // Same precision as Ember's default (TF32 off) unless --tf32 turns it on for both.
    cublas_check(
        cublasSetMathMode(handle, cfg.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
  }
#endif
  std::printf("\n== GEMM float32 [m,k]@[k,n], %s, TF32 %s%s\n", d.str().c_str(),
              cfg.tf32 ? "on" : "off", ref ? " (vs cublasSgemm, goal >= 95%)" : "");
  const std::vector<int> w = {18, 12, 10, 12, 12, 10, 10, 10};
  print_row(
      {"m x k x n", "ember us", "TFLOP/s", "err f64", "cuBLAS us", "TFLOP/s", "ratio", "vs cuBLAS"},
      w);
  json rows = json::array();
  const TensorOptions opts = TensorOptions(kFloat32).device(d);
  for (const GemmShape& s : shapes) {
    const double flop = 2.0 * s.m * s.k * s.n;
    if (!d.is_cuda() && flop > cpu_max_flop) continue;
    Tensor a = randn({s.m, s.k}, opts), b = randn({s.k, s.n}, opts);
    Tensor c_ref = empty({s.m, s.n}, opts);
    const double sample_s = cfg.quick ? 1e-3 : (d.is_cuda() ? 1e-2 : 0.2);
    const int calls = calls_for(d, sample_s, 1000, [&] { mm(a, b); });
    std::vector<double> mine, theirs;
    double diff = -1, err = -1;
    for (int r = 0; r < cfg.repeats; ++r) {
      a = randn({s.m, s.k}, opts);
      b = randn({s.k, s.n}, opts);
      mine.push_back(time_calls(d, calls, [&] { mm(a, b); }));
      if (r == 0) err = f64_error(a, b, mm(a, b), s);  // a fast wrong GEMM is no result
#ifdef EMBER_WITH_CUDA
      if (ref) {
        theirs.push_back(time_calls(d, calls, [&] { cublas_mm(handle, a, b, c_ref, s); }));
        if (r == 0) diff = rel_diff(mm(a, b), c_ref);
      }
#endif
    }
    const double t = median(mine);
    json row = {{"device", d.str()}, {"m", s.m},           {"k", s.k},
                {"n", s.n},          {"us", t * 1e6},      {"tflop_per_s", flop / t / 1e12},
                {"tf32", cfg.tf32},  {"error_vs_f64", err}};
    // TF32 keeps 10 mantissa bits: allow its rounding when it is on.
    const bool wrong = !(err <= (cfg.tf32 ? 1e-2 : 1e-4));
    if (wrong) ++g_failed_checks;
    std::vector<std::string> cells = {
        std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n),
        fmt("%.1f", t * 1e6), fmt("%.2f", flop / t / 1e12),
        wrong ? "WRONG " + fmt("%.0e", err) : fmt("%.0e", err)};
    if (!theirs.empty()) {
      const double tr = median(theirs);
      row["cublas_us"] = tr * 1e6;
      row["cublas_tflop_per_s"] = flop / tr / 1e12;
      row["ratio"] = tr / t;  // ember's rate over cuBLAS's
      row["rel_diff_vs_cublas"] = diff;
      cells.insert(cells.end(), {fmt("%.1f", tr * 1e6), fmt("%.2f", flop / tr / 1e12),
                                 fmt("%.0f%%", 100 * tr / t), fmt("%.1e", diff)});
    }
    print_row(cells, w);
    rows.push_back(row);
  }
#ifdef EMBER_WITH_CUDA
  if (handle) cublasDestroy(handle);
#endif
  return rows;
}

// ---- main ----------------------------------------------------------------------------------

std::string gpu_name(Device d) {
#ifdef EMBER_WITH_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, d.index) == cudaSuccess) return p.name;
#endif
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ember op benchmarks: eager overhead, pointwise bandwidth, GEMM rate"};
  Config cfg;
  std::string device = "all", json_path, sections = "overhead,bandwidth,gemm";
  uint64_t seed = 0;
  app.add_option("--device", device, "all (cpu, then cuda if present), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--sections", sections, "comma-separated: overhead, bandwidth, gemm")
      ->capture_default_str();
  app.add_option("--json", json_path, "write all figures to this JSON file");
  app.add_option("--repeats", cfg.repeats, "samples per figure (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--numel", cfg.numel, "elements per tensor in the bandwidth section")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--quick", cfg.quick, "small sizes and short samples (a smoke run)");
  app.add_flag("--tf32", cfg.tf32, "allow TF32 in float32 GEMMs, in Ember and cuBLAS alike");
  app.add_option("--seed", seed, "seed of the default generator")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (cfg.quick && app.count("--numel") == 0) cfg.numel = int64_t{1} << 20;
  if (cfg.quick && app.count("--repeats") == 0) cfg.repeats = 3;

  try {
    manual_seed(seed);
    set_allow_tf32(cfg.tf32);
    std::vector<Device> devices;
    if (device == "all") {
      devices.push_back(Device::cpu());
      if (cuda::is_available())
        devices.push_back(Device::cuda(0));
      else
        std::printf("cuda: skipped (%s)\n", "no CUDA device, or Ember built without CUDA");
    } else {
      devices.push_back(Device::parse(device));
      EMBER_CHECK(devices[0].is_cpu() || cuda::is_available(), "bench ops: --device ", device,
                  " asked for, but no CUDA device is available");
    }
    const auto wants = [&](const char* s) { return sections.find(s) != std::string::npos; };

    json out = {{"bench", "ops"},
                {"config",
                 {{"repeats", cfg.repeats},
                  {"numel", cfg.numel},
                  {"quick", cfg.quick},
                  {"tf32", cfg.tf32},
                  {"seed", seed}}},
                {"overhead", json::array()},
                {"bandwidth", json::array()},
                {"gemm", json::array()}};
    for (Device d : devices) {
      if (d.is_cuda()) {
        out["gpu"] = gpu_name(d);
        std::printf("\n%s: %s\n", d.str().c_str(), gpu_name(d).c_str());
      }
      if (wants("overhead"))
        for (json& row : bench_overhead(d, cfg)) out["overhead"].push_back(row);
      if (wants("bandwidth")) out["bandwidth"].push_back(bench_bandwidth(d, cfg));
      if (wants("gemm"))
        for (json& row : bench_gemm(d, cfg)) out["gemm"].push_back(row);
    }
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << out.dump(2) << "\n";
      EMBER_CHECK(f.good(), "bench ops: cannot write ", json_path);
      std::printf("\nwrote %s\n", json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (g_failed_checks) {
    std::fprintf(stderr, "error: %d GEMM result(s) disagree with the float64 reference\n",
                 g_failed_checks);
    return 2;
  }
  return 0;
}
