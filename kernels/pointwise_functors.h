#pragma once
// Elementwise op functors, one per pointwise row of core/ops.yaml: the hand-written ones here,
// the rows written as expressions in the generated header included at the end. The CPU loops,
// the eager CUDA kernels (nvcc) and the JIT's fused kernels (NVRTC) all compile this one text,
// so the three paths compute the same function. T is the compute type: float for 16-bit
// storage types.
#include "core/macros.h"
#if !defined(__CUDACC_RTC__)
#include <cmath>
#include <cstdint>
#endif

#if defined(EMBER_DEVICE_CODE)
#define EMBER_MATH(f) ::f
#else
#define EMBER_MATH(f) std::f
#endif

namespace ember::pw {

template <class T>
EMBER_HD bool is_nan(T a) {
  return a != a;
}

// Unary
struct neg {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return -a;
  }
};
struct abs {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return a < T(0) ? -a : a;
  }
};
// NaN passes through relu, as in PyTorch.
struct relu {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return (a > T(0) || is_nan(a)) ? a : T(0);
  }
};
struct exp {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return EMBER_MATH(exp)(a);
  }
};
struct log {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return EMBER_MATH(log)(a);
  }
};
struct sqrt {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return EMBER_MATH(sqrt)(a);
  }
};
struct rsqrt {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return T(1) / EMBER_MATH(sqrt)(a);
  }
};
struct sigmoid {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return T(1) / (T(1) + EMBER_MATH(exp)(-a));
  }
};
struct tanh {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return EMBER_MATH(tanh)(a);
  }
};
struct gelu {
  bool approximate_tanh = false;
  template <class T>
  EMBER_HD T operator()(T a) const {
    if (approximate_tanh) {
      const T k = T(0.7978845608028654);  // sqrt(2 / pi)
      return T(0.5) * a * (T(1) + EMBER_MATH(tanh)(k * (a + T(0.044715) * a * a * a)));
    }
    return T(0.5) * a * (T(1) + EMBER_MATH(erf)(a * T(0.7071067811865476)));
  }
};
// Bounds arrive as doubles and are converted to the compute type per call (cheap, and exact
// for the integer types in range). NaN inputs propagate.
struct clamp {
  double lo = 0, hi = 0;
  bool has_lo = false, has_hi = false;
  template <class T>
  EMBER_HD T operator()(T a) const {
    if (is_nan(a)) return a;
    if (has_lo && a < T(lo)) a = T(lo);
    if (has_hi && a > T(hi)) a = T(hi);
    return a;
  }
};
// Conversion happens in the load/store around the functor.
struct cast {
  template <class T>
  EMBER_HD T operator()(T a) const {
    return a;
  }
};
struct fill {
  double value = 0;
  template <class T>
  EMBER_HD T operator()() const {
    return T(value);
  }
};

// Binary
struct add {
  template <class T>
  EMBER_HD T operator()(T a, T b) const {
    return a + b;
  }
};
struct sub {
  template <class T>
  EMBER_HD T operator()(T a, T b) const {
    return a - b;
  }
};
struct mul {
  template <class T>
  EMBER_HD T operator()(T a, T b) const {
    return a * b;
  }
};
struct div {
  template <class T>
  EMBER_HD T operator()(T a, T b) const {
    return a / b;
  }
};
struct pow {
  template <class T>
  EMBER_HD T operator()(T a, T b) const {
    return EMBER_MATH(pow)(a, b);
  }
};
struct maximum {
  template <class T>
  EMBER_HD T operator()(T a, T b) const {
    return is_nan(a) ? a : is_nan(b) ? b : (a > b ? a : b);
  }
};
struct minimum {
  template <class T>
  EMBER_HD T operator()(T a, T b) const {
    return is_nan(a) ? a : is_nan(b) ? b : (a < b ? a : b);
  }
};
struct eq {
  template <class T>
  EMBER_HD bool operator()(T a, T b) const {
    return a == b;
  }
};
struct ne {
  template <class T>
  EMBER_HD bool operator()(T a, T b) const {
    return a != b;
  }
};
struct lt {
  template <class T>
  EMBER_HD bool operator()(T a, T b) const {
    return a < b;
  }
};
struct le {
  template <class T>
  EMBER_HD bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct gt {
  template <class T>
  EMBER_HD bool operator()(T a, T b) const {
    return a > b;
  }
};
struct ge {
  template <class T>
  EMBER_HD bool operator()(T a, T b) const {
    return a >= b;
  }
};

// d gelu(x) / dx times the incoming gradient g.
struct gelu_backward {
  bool approximate_tanh = false;
  template <class T>
  EMBER_HD T operator()(T g, T x) const {
    if (approximate_tanh) {
      const T k = T(0.7978845608028654), c = T(0.044715);
      const T t = EMBER_MATH(tanh)(k * (x + c * x * x * x));
      return g *
             (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
    }
    const T cdf = T(0.5) * (T(1) + EMBER_MATH(erf)(x * T(0.7071067811865476)));
    const T pdf = EMBER_MATH(exp)(T(-0.5) * x * x) * T(0.3989422804014327);  // 1 / sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};

// Ternary
struct where {
  template <class T>
  EMBER_HD T operator()(bool c, T a, T b) const {
    return c ? a : b;
  }
};

}  // namespace ember::pw

// The functors of the rows written as expressions (fwd, grad).
#include "kernels/generated/pointwise_functors.h"
