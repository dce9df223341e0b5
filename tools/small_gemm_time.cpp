// Times the handwritten small GEMMs (kernels/cuda/small_gemm.h) against cuBLASLt on the same
// problems: the seed MLP's layer-2 forward [B,512]x[512,10], input gradient [B,10]x[10,512] and
// weight gradient [10,B]x[B,512]; then the lstm workload's recurrent products at batch 64,
// hidden 256 (forward [64,256]x[256,1024] against W_hh^T, the hidden state's gradient
// [64,1024]x[1024,256], the weight gradient's per-step [256,64]x[64,1024]).
// Per call: the mean of 200 back-to-back calls between two synchronizes (so launch gaps count),
// and one call alone after a synchronize.
//   small_gemm_time
//   small_gemm_time --sweep   every kernel that fits (small_gemm_fits) and cuBLASLt on a grid of
//                             shapes, layouts and dtypes, as CSV: the data a cost function for
//                             small_gemm_kind is fitted to (bench/NOTES.md)
//   small_gemm_time --one bf16 10 512 8192 tn   the same rows for one problem (f32, bf16, f16)
#include <ember/ember.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/cuda/small_gemm.h"

using namespace ember;
namespace kc = ember::kernels::cuda;

namespace {

kc::GemmMatrix matrix(const Tensor& t) {
  kc::GemmMatrix m;
  m.ptr = t.raw_data();
  m.rows = t.size(0);
  m.cols = t.size(1);
  m.row_stride = t.stride(0);
  m.col_stride = t.stride(1);
  return m;
}

double us_per_call(const std::function<void()>& f, int reps) {
  using Clock = std::chrono::steady_clock;
  f();
  cuda::synchronize(0);
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  cuda::synchronize(0);
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / reps;
}

}  // namespace

// One CSV row per kernel timed on D[m, n] = A B in layout "nn", "nt" (A B^T, as a Linear's
// forward reads its weight) or "tn" (A^T B, as its weight gradient reads): the back-to-back
// mean of 200 calls (10 for the large products), and which kernel small_gemm_kind picks today.
void time_shape(const Device& dev, DType t, int64_t m, int64_t n, int64_t k, const std::string& l) {
  const std::vector<kc::SmallGemmKind> kinds = {kc::SmallGemmKind::SmallK,
                                                kc::SmallGemmKind::SmallN, kc::SmallGemmKind::Tiled,
                                                kc::SmallGemmKind::Thin};
  const TensorOptions o = TensorOptions(t).device(dev);
  const Tensor a = l == "tn" ? randn({k, m}, o).t() : randn({m, k}, o);
  const Tensor b = l == "nt" ? randn({n, k}, o).t() : randn({k, n}, o);
  Tensor d = empty({m, n}, o);
  kc::GemmCall c;
  c.device = dev.index;
  c.dtype = t;
  c.a = matrix(a);
  c.b = matrix(b);
  c.d = d.raw_data();
  const kc::SmallGemmKind chosen = kc::small_gemm_kind(t, c.a, c.b);
  auto row = [&](const char* kernel, double us) {
    std::printf("%s,%lld,%lld,%lld,%s,%s,%.2f,%s\n", dtype_name(t).data(),
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                l.c_str(), kernel, us, kc::small_gemm_name(chosen));
  };
  // Fewer calls for the large products (which no small kernel wins), so a sweep stays within
  // minutes.
  const int64_t mnk = m * n * k;
  const int reps = mnk <= (int64_t{1} << 28) ? 200 : 10;
  row("cublaslt", us_per_call([&] { kc::gemm_epilogue(c); }, reps));
  if (mnk > (int64_t{1} << 31)) return;
  for (kc::SmallGemmKind kind : kinds)
    if (kc::small_gemm_fits(kind, t, c.a, c.b))
      row(kc::small_gemm_name(kind), us_per_call([&] { kc::small_gemm(c, kind); }, reps));
}

// The sweep: M x N x K over sizes the workloads have, three layouts, float32 and bfloat16: the
// data a cost function for small_gemm_kind is fitted to.
int sweep(const Device& dev) {
  std::printf("dtype,m,n,k,layout,kernel,us,chosen\n");
  for (DType t : {kFloat32, kBFloat16})
    for (int64_t m : {10, 64, 256, 1024, 4096, 8192})
      for (int64_t n : {10, 16, 64, 128, 512, 1024})
        for (int64_t k : {10, 16, 64, 256, 784, 4096, 8192})
          for (const char* layout : {"nn", "nt", "tn"}) time_shape(dev, t, m, n, k, layout);
  return 0;
}

int main(int argc, char** argv) {
  if (!cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  const Device dev = Device::cuda(0);
  if (argc > 1 && std::string(argv[1]) == "--sweep") return sweep(dev);
  if (argc == 7 && std::string(argv[1]) == "--one") {
    const std::string dt = argv[2];
    std::printf("dtype,m,n,k,layout,kernel,us,chosen\n");
    time_shape(dev,
               dt == "bf16"  ? kBFloat16
               : dt == "f16" ? kFloat16
                             : kFloat32,
               std::stoll(argv[3]), std::stoll(argv[4]), std::stoll(argv[5]), argv[6]);
    return 0;
  }
  auto time_problem = [&](const char* name, const Tensor& a, const Tensor& bm) {
    Tensor d = empty({a.size(0), bm.size(1)}, TensorOptions(dev));
    kc::GemmCall c;
    c.device = 0;
    c.a = matrix(a);
    c.b = matrix(bm);
    c.d = d.raw_data();
    const auto small = [&] { kc::small_gemm(c); };
    const auto lt = [&] { kc::gemm_epilogue(c); };
    const double ts = us_per_call(small, 200), ts1 = us_per_call(small, 1);
    const Tensor from_small = d.clone();
    const double tl = us_per_call(lt, 200), tl1 = us_per_call(lt, 1);
    // The two results against each other: the largest difference relative to the largest
    // magnitude (both sum in float32, in different orders).
    const double diff = max(abs(sub(from_small, d))).item<double>();
    const double scale = max(abs(d)).item<double>();
    std::printf("%-28s %12.2f %12.2f %12.2f %12.2f   (%s; differ by %.1e of max)\n", name, ts, ts1,
                tl, tl1, kc::small_gemm_name(kc::small_gemm_kind(kFloat32, c.a, c.b)),
                diff / scale);
  };
  std::printf("%-28s %12s %12s %12s %12s\n", "problem", "small x200", "small x1", "cuBLASLt x200",
              "cuBLASLt x1");
  for (int64_t b : {64, 1024, 8192}) {
    const Tensor h = randn({b, 512}, dev), w2 = randn({10, 512}, dev), d_o = randn({b, 10}, dev);
    const struct {
      const char* name;
      Tensor a, bm;
    } problems[] = {{"[B,512]x[512,10] (W^T)", h, w2.t()},
                    {"[B,10]x[10,512]", d_o, w2},
                    {"[10,B]x[B,512] (dW2)", d_o.t(), h}};
    for (const auto& p : problems) {
      char name[64];
      std::snprintf(name, sizeof name, "B=%-5lld %s", static_cast<long long>(b), p.name);
      time_problem(name, p.a, p.bm);
    }
  }
  {
    const Tensor h = randn({64, 256}, dev), w_hh = randn({1024, 256}, dev);
    const Tensor dg = randn({64, 1024}, dev);
    time_problem("lstm [64,256]x[256,1024] W^T", h, w_hh.t());
    time_problem("lstm [64,1024]x[1024,256] W", dg, w_hh);
    time_problem("lstm [256,64]x[64,1024] dW", h.t(), dg);
  }
  return 0;
}
