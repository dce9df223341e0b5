// CPU softmax and log_softmax over attrs.dim.
//
// Each row (the elements along `dim` at one position of the other dims) is normalised on its
// own: subtract the row max so exp never overflows, sum in double, then either divide
// (softmax) or subtract the log of the sum (log_softmax). Rows are addressed through strides,
// so any layout works; the contract gives contiguous tensors, where dim = last is the fast case.
// Rows (or tiles of rows) are split over the CPU pool; each is computed the same on any thread.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

// `e` is scratch for n doubles: softmax keeps each exp there so it is computed once and the
// division rounds to T only once.
template <class T, bool kLog>
void normalise_row(const T* x, int64_t xs, T* y, int64_t ys, int64_t n, double* e) {
  double m = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i * xs]);
    nan |= v != v;
    m = v > m ? v : m;
  }
  // A NaN anywhere makes the whole row NaN (as the unshifted formula would).
  if (nan) m = std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  if constexpr (kLog) {
    for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i * xs]) - m);
    const double shift = m + std::log(s);
    for (int64_t i = 0; i < n; ++i)
      y[i * ys] = from_double<T>(static_cast<double>(x[i * xs]) - shift);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      e[i] = std::exp(static_cast<double>(x[i * xs]) - m);
      s += e[i];
    }
    const double inv = 1.0 / s;
    for (int64_t i = 0; i < n; ++i) y[i * ys] = from_double<T>(e[i] * inv);
  }
}

// Contiguous tensors with `dim` not last: the rows are strided by `inner`, so a row at a time
// would touch one element per cache line. Instead a tile of neighbouring rows is normalised
// together, each pass reading memory in order (exp is evaluated twice instead of kept).
template <class T, bool kLog>
void softmax_tiled(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  constexpr int64_t kTile = 32;
  const int64_t tiles = (inner + kTile - 1) / kTile;
  // Tiles are independent: split them over the pool (each normalised the same on any thread).
  const int64_t grain = std::max<int64_t>(1, kParallelGrainElements / (n * kTile));
  parallel_for(outer * tiles, grain, [&](int64_t t0, int64_t t1) {
    double m[kTile], s[kTile];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / tiles, c0 = (t % tiles) * kTile;
      const int64_t w = std::min(kTile, inner - c0);
      const T* xb = x + o * n * inner + c0;
      T* yb = y + o * n * inner + c0;
      for (int64_t b = 0; b < w; ++b) {
        m[b] = -std::numeric_limits<double>::infinity();
        s[b] = 0;
      }
      for (int64_t j = 0; j < n; ++j)
        for (int64_t b = 0; b < w; ++b) {
          const double v = static_cast<double>(xb[j * inner + b]);
          if (v > m[b] || v != v) m[b] = v;  // NaN sticks and poisons the row
        }
      for (int64_t j = 0; j < n; ++j)
        for (int64_t b = 0; b < w; ++b)
          s[b] += std::exp(static_cast<double>(xb[j * inner + b]) - m[b]);
      if constexpr (kLog) {
        for (int64_t b = 0; b < w; ++b) s[b] = m[b] + std::log(s[b]);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t b = 0; b < w; ++b)
            yb[j * inner + b] = from_double<T>(static_cast<double>(xb[j * inner + b]) - s[b]);
      } else {
        for (int64_t b = 0; b < w; ++b) s[b] = 1.0 / s[b];
        for (int64_t j = 0; j < n; ++j)
          for (int64_t b = 0; b < w; ++b)
            yb[j * inner + b] =
                from_double<T>(std::exp(static_cast<double>(xb[j * inner + b]) - m[b]) * s[b]);
      }
    }
  });
}

template <class T, bool kLog>
void softmax_typed(const Tensor& in, const Tensor& out, int dim) {
  // The positions of every row: all dims but `dim`, outermost first.
  int nd = 0;
  int64_t sizes[kMaxDims], xs[kMaxDims], ys[kMaxDims];
  for (int d = 0; d < in.dim(); ++d) {
    if (d == dim || in.size(d) == 1) continue;
    if (in.size(d) == 0) return;
    sizes[nd] = in.size(d);
    xs[nd] = in.stride(d);
    ys[nd] = out.stride(d);
    ++nd;
  }
  const int64_t n = in.dim() == 0 ? 1 : in.size(dim);
  if (in.is_contiguous() && out.is_contiguous() && dim + 1 < in.dim()) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; ++d) outer *= in.size(d);
    for (int d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
    if (inner > 1) {
      softmax_tiled<T, kLog>(static_cast<const T*>(in.raw_data()), static_cast<T*>(out.raw_data()),
                             outer, n, inner);
      return;
    }
  }
  const int64_t rx = in.dim() == 0 ? 0 : in.stride(dim), ry = in.dim() == 0 ? 0 : out.stride(dim);
  const T* x = static_cast<const T*>(in.raw_data());
  T* y = static_cast<T*>(out.raw_data());
  int64_t rows = 1;
  for (int d = 0; d < nd; ++d) rows *= sizes[d];
  // Rows are independent: split them over the pool, each range walking its rows in order.
  const int64_t grain = std::max<int64_t>(1, kParallelGrainElements / std::max<int64_t>(n, 1));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    std::unique_ptr<double[]> scratch(kLog ? nullptr : new double[n]);
    int64_t idx[kMaxDims] = {};
    int64_t xo = 0, yo = 0;
    for (int64_t d = nd - 1, r = r0; d >= 0; --d) {  // the position of row r0
      idx[d] = r % sizes[d];
      r /= sizes[d];
      xo += idx[d] * xs[d];
      yo += idx[d] * ys[d];
    }
    for (int64_t row = r0; row < r1; ++row) {
      normalise_row<T, kLog>(x + xo, rx, y + yo, ry, n, scratch.get());
      for (int d = nd - 1; d >= 0; --d) {
        xo += xs[d];
        yo += ys[d];
        if (++idx[d] < sizes[d]) break;
        xo -= xs[d] * sizes[d];
        yo -= ys[d] * sizes[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace

void softmax(const KernelCall& call) {
  const std::string_view name = op_name(call.op);
  EMBER_CHECK(call.inputs.size() == 1, name, ": expected 1 input, got ", call.inputs.size());
  const Tensor& in = call.inputs[0];
  const Tensor& out = call.out;
  const DType dt = in.dtype();
  EMBER_CHECK(is_floating(dt) && out.dtype() == dt, name,
              ": expected a float input and output, got ", dtype_name(dt), " -> ",
              dtype_name(out.dtype()));
  EMBER_CHECK(out.sizes() == in.sizes(), name, ": output shape ", out.sizes(),
              " differs from input ", in.sizes());
  const int64_t dim = call.attrs.dim;
  EMBER_CHECK((in.dim() == 0 && dim == 0) || (dim >= 0 && dim < in.dim()), name, ": dim ", dim,
              " out of range for input of shape ", in.sizes());
  if (in.numel() == 0) return;
  const bool log = call.op == OpId::log_softmax;
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_integral_v<T>) {
      if (log) {
        softmax_typed<T, true>(in, out, static_cast<int>(dim));
      } else {
        softmax_typed<T, false>(in, out, static_cast<int>(dim));
      }
    }
  });
}

}  // namespace ember::kernels::cpu
