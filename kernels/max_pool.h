#pragma once
// max_pool2d's arithmetic, shared by the CPU and CUDA kernels so both pick the same element: the
// first maximum of a window in row-major order, a NaN winning (PyTorch's rule), the padding never.
// The backward pass gives each input element the gradients of the windows it won, found by
// walking the windows that contain it (at most ceil(k / s) per dim) and recomputing their winner:
// a gather, so no atomics and one summation order.
#include <cstdint>

#include "core/macros.h"

namespace ember::kernels {

// I: the index type (the CUDA kernels use 32-bit indices where the sizes allow).
template <class I>
struct PoolGeometry {
  I h, w, oh, ow;  // one plane's input and output sizes
  I kh, kw, sh, sw, ph, pw, dh, dw;
  // Whether no input element lies in two windows (each window's extent fits in its stride).
  EMBER_HD bool disjoint() const { return sh >= dh * (kh - 1) + 1 && sw >= dw * (kw - 1) + 1; }
  // Whether the windows cover every input element too.
  EMBER_HD bool tiles() const {
    return ph == 0 && pw == 0 && dh == 1 && dw == 1 && sh == kh && sw == kw && oh * sh == h &&
           ow * sw == w;
  }
};

// Windows of up to kHeldWindow x kHeldWindow elements load every element first and then compare:
// the loads are in flight together (a GPU thread waits for memory once per window, not once per
// element; the loop below cannot issue a load before the previous iteration's branch resolves).
inline constexpr int kHeldWindow = 3;

// The flat index (y * w + x) of output (oy, ox)'s winner in its plane, or -1 (an all-padding
// window, which the shape checks rule out).
template <class C, class T, class I>
EMBER_HD I window_argmax(const T* plane, const PoolGeometry<I>& g, I oy, I ox) {
  if (g.kh <= kHeldWindow && g.kw <= kHeldWindow) {
    constexpr int K = kHeldWindow;
    C v[K * K];
    I at[K * K];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i < K; ++i) {
      const I y = oy * g.sh - g.ph + i * g.dh;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int j = 0; j < K; ++j) {
        const I x = ox * g.sw - g.pw + j * g.dw;
        const bool inside = i < g.kh && j < g.kw && y >= 0 && y < g.h && x >= 0 && x < g.w;
        at[i * K + j] = inside ? y * g.w + x : I(-1);
        v[i * K + j] = inside ? static_cast<C>(plane[y * g.w + x]) : C(0);
      }
    }
    // The same order and rule as the loop below: row-major, first maximum, a NaN winning.
    I best = -1;
    C bv = C(0);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int e = 0; e < K * K; ++e) {
      if (at[e] < 0) continue;
      if (best < 0 || v[e] > bv || (v[e] != v[e] && bv == bv)) {
        best = at[e];
        bv = v[e];
      }
    }
    return best;
  }
  I best = -1;
  C bv = C(0);
  for (I i = 0; i < g.kh; ++i) {
    const I y = oy * g.sh - g.ph + i * g.dh;
    if (y < 0 || y >= g.h) continue;
    for (I j = 0; j < g.kw; ++j) {
      const I x = ox * g.sw - g.pw + j * g.dw;
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

// Disjoint windows (PoolGeometry::disjoint): window (oy, ox) writes its grad to its winner and 0
// to its other elements, so every element is written by at most one window (elements outside all
// windows are zeroed beforehand unless the windows tile the plane).
template <class C, class T, class I>
EMBER_HD void pool_window_grad(const T* plane, const T* grad, T* dplane, const PoolGeometry<I>& g,
                               I oy, I ox) {
  const I win = window_argmax<C>(plane, g, oy, ox);
  const T gv = grad[oy * g.ow + ox];
  for (I i = 0; i < g.kh; ++i) {
    const I y = oy * g.sh - g.ph + i * g.dh;
    if (y < 0 || y >= g.h) continue;
    for (I j = 0; j < g.kw; ++j) {
      const I x = ox * g.sw - g.pw + j * g.dw;
      if (x < 0 || x >= g.w) continue;
      dplane[y * g.w + x] = y * g.w + x == win ? gv : T(0);
    }
  }
}

// The outputs along one dim whose windows can contain input position `p`: [lo, hi].
template <class I>
EMBER_HD void windows_over(I p, I k, I s, I pad, I d, I out, I& lo, I& hi) {
  // o s - pad + i d == p for some 0 <= i < k  =>  (p + pad - (k - 1) d) / s <= o <= (p + pad) / s
  const I top = p + pad - (k - 1) * d;
  lo = top <= 0 ? 0 : (top + s - 1) / s;
  hi = (p + pad) / s;
  if (hi > out - 1) hi = out - 1;
}

// d input[y, x] of one plane: the sum of grad over the windows (in row-major order) that input
// element won.
template <class C, class T, class I>
EMBER_HD C pool_input_grad(const T* plane, const T* grad, const PoolGeometry<I>& g, I y, I x) {
  I ylo, yhi, xlo, xhi;
  windows_over(y, g.kh, g.sh, g.ph, g.dh, g.oh, ylo, yhi);
  windows_over(x, g.kw, g.sw, g.pw, g.dw, g.ow, xlo, xhi);
  const I me = y * g.w + x;
  C sum = C(0);
  for (I oy = ylo; oy <= yhi; ++oy) {
    if ((y + g.ph - oy * g.sh) % g.dh != 0) continue;
    for (I ox = xlo; ox <= xhi; ++ox) {
      if ((x + g.pw - ox * g.sw) % g.dw != 0) continue;
      if (window_argmax<C>(plane, g, oy, ox) == me) sum += static_cast<C>(grad[oy * g.ow + ox]);
    }
  }
  return sum;
}

}  // namespace ember::kernels
