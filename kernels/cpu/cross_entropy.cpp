// CPU per-sample cross entropy of logits [N, C] against int64 class indices [N]:
// loss[i] = logsumexp(logits[i, :]) - logits[i, target[i]], and 0 where target == ignore_index.
// Every target is validated before any output is written, so a bad batch leaves `out` alone.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// log(sum(exp(row))) in double, shifted by the row max; NaN in, NaN out.
template <class T>
double row_logsumexp(const T* x, int64_t stride, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const double v = static_cast<double>(x[j * stride]);
    if (v != v) return v;
    m = v > m ? v : m;
  }
  if (std::isinf(m)) return m;  // all -inf, or a +inf that dominates
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(x[j * stride]) - m);
  return m + std::log(s);
}

template <class T>
void cross_entropy_typed(const KernelCall& call) {
  const Tensor& logits = call.inputs[0];
  const Tensor& target = call.inputs[1];
  const Tensor& out = call.out;
  const int64_t n = logits.size(0), c = logits.size(1);
  const int64_t ignore = call.attrs.ignore_index;
  const T* x = static_cast<const T*>(logits.raw_data());
  const int64_t* t = static_cast<const int64_t*>(target.raw_data());
  T* y = static_cast<T*>(out.raw_data());
  const int64_t xs0 = logits.stride(0), xs1 = logits.stride(1), ts = target.stride(0),
                ys = out.stride(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = t[i * ts];
    EMBER_CHECK(k == ignore || (k >= 0 && k < c), "cross_entropy: target ", k, " (sample ", i,
                ") is out of range for ", c, " classes");
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = t[i * ts];
    if (k == ignore) {
      y[i * ys] = T(0.0f);
      continue;
    }
    const T* row = x + i * xs0;
    y[i * ys] = from_double<T>(row_logsumexp(row, xs1, c) - static_cast<double>(row[k * xs1]));
  }
}

}  // namespace

void cross_entropy(const KernelCall& call) {
  EMBER_CHECK(call.inputs.size() == 2, "cross_entropy: expected 2 inputs, got ",
              call.inputs.size());
  const Tensor& logits = call.inputs[0];
  const Tensor& target = call.inputs[1];
  const Tensor& out = call.out;
  EMBER_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
              "cross_entropy: expected logits [N, C] and target [N], got ", logits.sizes(), " and ",
              target.sizes());
  EMBER_CHECK(
      is_floating(logits.dtype()) && target.dtype() == kInt64 && out.dtype() == logits.dtype(),
      "cross_entropy: expected float logits and int64 target, got ", dtype_name(logits.dtype()),
      " and ", dtype_name(target.dtype()), " -> ", dtype_name(out.dtype()));
  EMBER_CHECK(out.dim() == 1 && out.size(0) == logits.size(0), "cross_entropy: output shape ",
              out.sizes(), " is not [", logits.size(0), "]");
  visit_dtype(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_integral_v<T>) cross_entropy_typed<T>(call);
  });
}

}  // namespace ember::kernels::cpu
