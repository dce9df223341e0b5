#pragma once
// max_pool2d's arithmetic, shared by the CPU and CUDA kernels so both pick the same element: the
// first maximum of a window in row-major order, a NaN winning (PyTorch's rule), the padding never.
// The backward pass gives each input element the gradients of the windows it won, found by
// walking the windows that contain it (at most ceil(k / s) per dim) and recomputing their winner:
// a gather, so no atomics and one summation order.
#include <cstdint>

#include "core/macros.h"

namespace ember::kernels {

struct PoolGeometry {
  int64_t h, w, oh, ow;  // one plane's input and output sizes
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
};

// The flat index (y * w + x) of output (oy, ox)'s winner in its plane, or -1 (an all-padding
// window, which the shape checks rule out).
template <class C, class T>
EMBER_HD int64_t window_argmax(const T* plane, const PoolGeometry& g, int64_t oy, int64_t ox) {
  int64_t best = -1;
  C bv = C(0);
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t y = oy * g.sh - g.ph + i * g.dh;
    if (y < 0 || y >= g.h) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t x = ox * g.sw - g.pw + j * g.dw;
      if (x < 0 || x >= g.w) continue;
      const C v = static_cast<C>(plane[y * g.w + x]);
      if (best < 0 || v > bv || (v != v && bv == bv)) {
        best = y * g.w + x;
        bv = v;
      }
    }
  }
  return best;
}

// The outputs along one dim whose windows can contain input position `p`: [lo, hi].
EMBER_HD void windows_over(int64_t p, int64_t k, int64_t s, int64_t pad, int64_t d, int64_t out,
                           int64_t& lo, int64_t& hi) {
  // o s - pad + i d == p for some 0 <= i < k  =>  (p + pad - (k - 1) d) / s <= o <= (p + pad) / s
  const int64_t top = p + pad - (k - 1) * d;
  lo = top <= 0 ? 0 : (top + s - 1) / s;
  hi = (p + pad) / s;
  if (hi > out - 1) hi = out - 1;
}

// d input[y, x] of one plane: the sum of grad over the windows (in row-major order) that input
// element won.
template <class C, class T>
EMBER_HD C pool_input_grad(const T* plane, const T* grad, const PoolGeometry& g, int64_t y,
                           int64_t x) {
  int64_t ylo, yhi, xlo, xhi;
  windows_over(y, g.kh, g.sh, g.ph, g.dh, g.oh, ylo, yhi);
  windows_over(x, g.kw, g.sw, g.pw, g.dw, g.ow, xlo, xhi);
  const int64_t me = y * g.w + x;
  C sum = C(0);
  for (int64_t oy = ylo; oy <= yhi; ++oy) {
    if ((y + g.ph - oy * g.sh) % g.dh != 0) continue;
    for (int64_t ox = xlo; ox <= xhi; ++ox) {
      if ((x + g.pw - ox * g.sw) % g.dw != 0) continue;
      if (window_argmax<C>(plane, g, oy, ox) == me) sum += static_cast<C>(grad[oy * g.ow + ox]);
    }
  }
  return sum;
}

}  // namespace ember::kernels
