// CPU layer_norm and layer_norm_backward (validated by meta, core/meta.cpp): each row of C
// elements (the trailing dims from attrs.dim of a contiguous tensor) normalised on its own, in
// double: mean, then the biased variance of x - mean (two passes, no cancellation), then
//   forward:  y = (x - mean) * rstd,  rstd = 1 / sqrt(var + eps)
//   backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  xhat = (x - mean) * rstd
// with the statistics recomputed from x. Rows are split over the pool; each is computed the same
// on any thread.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/norm_rows.h"

namespace ember::kernels::cpu {
namespace {

struct RowStats {
  double mean, rstd;
};

template <class T>
RowStats stats_of(const T* x, int64_t C, double eps) {
  double s = 0;
  for (int64_t i = 0; i < C; ++i) s += static_cast<double>(x[i]);
  const double mean = s / static_cast<double>(C);
  double q = 0;
  for (int64_t i = 0; i < C; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    q += d * d;
  }
  return {mean, 1.0 / std::sqrt(q / static_cast<double>(C) + eps)};
}

template <class T>
void forward_rows(const T* x, T* y, int64_t rows, int64_t C, double eps) {
  parallel_for(rows, std::max<int64_t>(1, kParallelGrainElements / std::max<int64_t>(C, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const T* xr = x + r * C;
                   T* yr = y + r * C;
                   const RowStats st = stats_of(xr, C, eps);
                   for (int64_t i = 0; i < C; ++i)
                     yr[i] = from_double<T>((static_cast<double>(xr[i]) - st.mean) * st.rstd);
                 }
               });
}

template <class T>
void backward_rows(const T* g, const T* x, T* dx, int64_t rows, int64_t C, double eps) {
  parallel_for(rows, std::max<int64_t>(1, kParallelGrainElements / std::max<int64_t>(C, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t r = b; r < e; ++r) {
                   const T* xr = x + r * C;
                   const T* gr = g + r * C;
                   T* o = dx + r * C;
                   const RowStats st = stats_of(xr, C, eps);
                   double sg = 0, sgx = 0;
                   for (int64_t i = 0; i < C; ++i) {
                     const double gi = static_cast<double>(gr[i]);
                     sg += gi;
                     sgx += gi * (static_cast<double>(xr[i]) - st.mean) * st.rstd;
                   }
                   const double mg = sg / static_cast<double>(C), mgx = sgx / static_cast<double>(C);
                   for (int64_t i = 0; i < C; ++i) {
                     const double xh = (static_cast<double>(xr[i]) - st.mean) * st.rstd;
                     o[i] = from_double<T>(st.rstd * (static_cast<double>(gr[i]) - mg - xh * mgx));
                   }
                 }
               });
}

}  // namespace

void layer_norm(const KernelCall& call) {
  const bool bwd = call.op == OpId::layer_norm_backward;
  const Tensor& x = call.inputs.back();
  const char* name = op_name(call.op).data();
  const NormRows shape = norm_rows(call);
  const int64_t rows = shape.rows, C = shape.cols;
  if (rows == 0) return;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      EMBER_FAIL(name, ": expected a floating dtype, got ", dtype_name(x.dtype()));
    } else {
      T* out = static_cast<T*>(call.out.raw_data());
      const T* xp = static_cast<const T*>(x.raw_data());
      if (bwd)
        backward_rows(static_cast<const T*>(call.inputs[0].raw_data()), xp, out, rows, C,
                      call.attrs.eps);
      else
        forward_rows(xp, out, rows, C, call.attrs.eps);
    }
  });
}

}  // namespace ember::kernels::cpu
