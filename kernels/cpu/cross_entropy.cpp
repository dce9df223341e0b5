// CPU softmax cross entropy of logits [N, C] against int64 class indices [N], forward and
// backward, with label smoothing e (PyTorch's definition: the target distribution is
// (1 - e) onehot(t) + e / C):
//   forward  loss[i]   = lse(x_i) - (1 - e) x_i[t_i] - e/C sum_c x_i[c]
//   backward dx[i, c]  = grad[i] (softmax(x_i)[c] - (1 - e) [c == t_i] - e/C)
// Rows whose target is ignore_index give 0. Reduced (mean or sum) the rows' losses add up in
// double and round once; a mean divides by the count of targets that are not ignored, and its
// gradient reaches each row as grad / count. Every target is validated before any output is
// written, so a bad batch leaves `out` alone. Rows are computed in double.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

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
double row_sum(const T* x, int64_t stride, int64_t n) {
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j * stride]);
  return s;
}

// The same check (and message) for forward and backward.
void check_targets(const int64_t* t, int64_t ts, int64_t n, int64_t c, int64_t ignore) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = t[i * ts];
    EMBER_CHECK(k == ignore || (k >= 0 && k < c), "cross_entropy: target ", k, " (sample ", i,
                ") is out of range for ", c, " classes");
  }
}

template <class T>
void forward_typed(const KernelCall& call) {
  const Tensor& logits = call.inputs[0];
  const Tensor& target = call.inputs[1];
  const Tensor& out = call.out;
  const int64_t n = logits.size(0), c = logits.size(1);
  const int64_t ignore = call.attrs.ignore_index;
  const double e = call.attrs.label_smoothing;
  const T* x = static_cast<const T*>(logits.raw_data());
  const int64_t* t = static_cast<const int64_t*>(target.raw_data());
  T* y = static_cast<T*>(out.raw_data());
  const LossReduction red = call.attrs.reduction;
  const int64_t xs0 = logits.stride(0), xs1 = logits.stride(1), ts = target.stride(0),
                ys = red == LossReduction::None ? out.stride(0) : 0;
  check_targets(t, ts, n, c, ignore);
  double total = 0;  // reduced: the rows' losses in double, rounded once
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = t[i * ts];
    if (k == ignore) {
      if (red == LossReduction::None) y[i * ys] = T(0.0f);
      continue;
    }
    const T* row = x + i * xs0;
    double loss = row_logsumexp(row, xs1, c) - (1 - e) * static_cast<double>(row[k * xs1]);
    if (e != 0) loss -= e / static_cast<double>(c) * row_sum(row, xs1, c);
    if (red == LossReduction::None) {
      y[i * ys] = from_double<T>(loss);
    } else {
      total += loss;
      ++count;
    }
  }
  // A mean over no targets is 0 / 0: NaN, as in PyTorch.
  if (red == LossReduction::Mean) y[0] = from_double<T>(total / static_cast<double>(count));
  if (red == LossReduction::Sum) y[0] = from_double<T>(total);
}

// inputs: grad [N] (any stride: a mean's backward hands an expanded scalar), logits, target.
template <class T>
void backward_typed(const KernelCall& call) {
  const Tensor& grad = call.inputs[0];
  const Tensor& logits = call.inputs[1];
  const Tensor& target = call.inputs[2];
  const Tensor& out = call.out;
  const int64_t n = logits.size(0), c = logits.size(1);
  const int64_t ignore = call.attrs.ignore_index;
  const double e = call.attrs.label_smoothing;
  const double off = e / static_cast<double>(c), on = 1 - e;
  const T* g = static_cast<const T*>(grad.raw_data());
  const T* x = static_cast<const T*>(logits.raw_data());
  const int64_t* t = static_cast<const int64_t*>(target.raw_data());
  T* dx = static_cast<T*>(out.raw_data());
  const LossReduction red = call.attrs.reduction;
  const int64_t gs = red == LossReduction::None ? grad.stride(0) : 0, xs0 = logits.stride(0),
                xs1 = logits.stride(1), ts = target.stride(0), os0 = out.stride(0),
                os1 = out.stride(1);
  check_targets(t, ts, n, c, ignore);
  // A mean's gradient reaches each counted row divided by the count.
  double scale = 1;
  if (red == LossReduction::Mean) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += t[i * ts] != ignore;
    scale = 1.0 / static_cast<double>(count);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = t[i * ts];
    T* orow = dx + i * os0;
    if (k == ignore) {
      for (int64_t j = 0; j < c; ++j) orow[j * os1] = T(0.0f);
      continue;
    }
    const T* row = x + i * xs0;
    const double lse = row_logsumexp(row, xs1, c);
    const double gi = static_cast<double>(g[i * gs]) * scale;
    for (int64_t j = 0; j < c; ++j) {
      const double p = std::exp(static_cast<double>(row[j * xs1]) - lse);
      orow[j * os1] = from_double<T>(gi * (p - (j == k ? on : 0.0) - off));
    }
  }
}

}  // namespace

void cross_entropy(const KernelCall& call) {
  const bool backward = call.op == OpId::cross_entropy_backward;
  const char* name = backward ? "cross_entropy_backward" : "cross_entropy";
  const size_t arity = backward ? 3 : 2;
  EMBER_CHECK(call.inputs.size() == arity, name, ": expected ", arity, " inputs, got ",
              call.inputs.size());
  const Tensor& logits = call.inputs[arity - 2];
  const Tensor& target = call.inputs[arity - 1];
  const Tensor& out = call.out;
  const int64_t n = logits.dim() == 2 ? logits.size(0) : -1;
  EMBER_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == n, name,
              ": expected logits [N, C] and target [N], got ", logits.sizes(), " and ",
              target.sizes());
  EMBER_CHECK(
      is_floating(logits.dtype()) && target.dtype() == kInt64 && out.dtype() == logits.dtype(),
      name, ": expected float logits and int64 target, got ", dtype_name(logits.dtype()), " and ",
      dtype_name(target.dtype()), " -> ", dtype_name(out.dtype()));
  if (backward) {
    const Tensor& grad = call.inputs[0];
    const bool reduced = call.attrs.reduction != LossReduction::None;
    EMBER_CHECK((reduced ? grad.dim() == 0 : grad.dim() == 1 && grad.size(0) == n) &&
                    grad.dtype() == logits.dtype(),
                name, ": grad ", dtype_name(grad.dtype()), " ", grad.sizes(),
                " does not fit logits ", dtype_name(logits.dtype()), " ", logits.sizes());
    EMBER_CHECK(out.sizes() == logits.sizes(), name, ": output shape ", out.sizes(),
                " is not the logits' ", logits.sizes());
  } else {
    const bool reduced = call.attrs.reduction != LossReduction::None;
    EMBER_CHECK(reduced ? out.dim() == 0 : out.dim() == 1 && out.size(0) == n, name,
                ": output shape ", out.sizes(), " does not fit ", n, " samples");
  }
  visit_dtype(logits.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_integral_v<T>) {
      if (backward) {
        backward_typed<T>(call);
      } else {
        forward_typed<T>(call);
      }
    }
  });
}

}  // namespace ember::kernels::cpu
