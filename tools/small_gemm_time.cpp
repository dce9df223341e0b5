// Times the handwritten small GEMMs (kernels/cuda/small_gemm.h) against cuBLASLt on the same
// problems: the seed MLP's layer-2 forward [B,512]x[512,10], input gradient [B,10]x[10,512] and
// weight gradient [10,B]x[B,512]; then the lstm workload's recurrent products at batch 64,
// hidden 256 (forward [64,256]x[256,1024] against W_hh^T, the hidden state's gradient
// [64,1024]x[1024,256], the weight gradient's per-step [256,64]x[64,1024]).
// Per call: the mean of 200 back-to-back calls between two synchronizes (so launch gaps count),
// and one call alone after a synchronize.
//   small_gemm_time
#include <ember/ember.h>

#include <chrono>
#include <cstdio>
#include <functional>

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

int main() {
  if (!cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  const Device dev = Device::cuda(0);
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
