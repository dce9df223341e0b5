// How NVRTC's compile time scales on this machine: K distinct generated-style kernels (the fused
// pointwise header, a small body, a different element count each) compiled for sm_90 on one
// thread, on T threads of this process, and in T worker processes (ember-nvrtc-worker, as
// precompile() runs them), wall time each. Needs no GPU. bench/NOTES.md has what it showed.
//   nvrtc_scaling [--kernels K] [--workers T]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/nvrtc.h"
#include "kernels/cuda/nvrtc_workers.h"

namespace rtc = ember::kernels::cuda::nvrtc;

namespace {

std::string source(int i) {
  // The shape of a generated kernel: the embedded header, a body of a few functors, a grid-stride
  // loop over a constant element count (which makes each source distinct).
  return "#include \"kernels/cuda/fused_pointwise.cuh\"\n"
         "namespace ember_fused {\n"
         "namespace fp = ::ember::kernels::cuda::fused;\n"
         "namespace ew = ::ember::kernels::cuda::elementwise;\n"
         "namespace pw = ::ember::pw;\n"
         "typedef unsigned int Index;\n"
         "constexpr Index kNumel = " +
         std::to_string(4096 + i * 32) +
         "u;\n"
         "struct Args { char* p[3]; };\n"
         "__device__ __forceinline__ void body(float x0, float x1, float& y0) {\n"
         "  const float t0 = fp::keep(ew::ComputeOp<pw::mul, float, float>{pw::mul{}}(x0, x1));\n"
         "  y0 = ew::ComputeOp<pw::gelu, float, float>{pw::gelu{}}(t0);\n"
         "}\n"
         "struct Element {\n"
         "  Args a;\n"
         "  __device__ void operator()(Index i) const {\n"
         "    float y0;\n"
         "    body(fp::load<float>(a.p[1], i), fp::load<float>(a.p[2], i), y0);\n"
         "    fp::store<float>(a.p[0], i, y0);\n"
         "  }\n"
         "};\n"
         "}  // namespace ember_fused\n"
         "extern \"C\" __global__ void __launch_bounds__(ember_fused::fp::kThreads)\n"
         "ember_fused_elem(const ember_fused::Args a) {\n"
         "  ember_fused::fp::grid_stride(ember_fused::kNumel, ember_fused::Element{a});\n"
         "}\n";
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void compile_range(const std::vector<std::string>& src, std::atomic<size_t>& next) {
  for (size_t i; (i = next.fetch_add(1)) < src.size();) (void)rtc::compile(src[i], 90, "s.cu");
}

}  // namespace

int main(int argc, char** argv) {
  int kernels = 16;
  unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--kernels") kernels = std::atoi(argv[i + 1]);
    if (a == "--workers") workers = static_cast<unsigned>(std::atoi(argv[i + 1]));
  }
  std::vector<std::string> src;
  for (int i = 0; i < kernels; ++i) src.push_back(source(i));
  // Worker processes as precompile() starts them (kernels/cuda/nvrtc_workers.h).
  const std::string& worker = rtc::worker_path();
  if (worker.empty()) {
    std::printf("no ember-nvrtc-worker found\n");
    return 1;
  }
  std::vector<rtc::WorkerJob> jobs;
  for (const std::string& s : src) jobs.push_back({s, "s.cu"});
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::optional<rtc::Binary>> got =
      rtc::compile_in_workers(jobs, 90, workers, worker);
  const int bad = static_cast<int>(
      std::count_if(got.begin(), got.end(), [](const auto& b) { return !b.has_value(); }));
  const double procs = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  {
    std::atomic<size_t> next{0};
    compile_range(src, next);
  }
  const double one = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (unsigned w = 1; w < workers; ++w) pool.emplace_back([&] { compile_range(src, next); });
    compile_range(src, next);
    for (std::thread& t : pool) t.join();
  }
  const double threads = ms_since(t0);
  std::printf("nvrtc %d, %d kernels for sm_90: one thread %.1f ms, %u threads %.1f ms, %u processes "
              "%.1f ms%s\n",
              rtc::version(), kernels, one, workers, threads, workers, procs,
              bad ? " (a worker compiled not all)" : "");
  return bad ? 1 : 0;
}
