// CPU reductions over attrs.dims with keepdim: sum, mean, amax, amin, argmax, logsumexp.
//
// The input may be any strided view. Its dims split into kept dims (which index the contiguous
// output in row-major order) and reduced dims (walked in row-major order, so argmax's index is
// the row-major position among them). Each group is coalesced, then one of two loop orders
// runs: "inner" (each output reduces its own run of elements; good when the reduced dims are
// innermost in memory) or "outer" (a vector of accumulators, one per innermost kept element,
// is swept across the reduced dims; good when the kept dims are innermost in memory, such as a
// column sum of a row-major matrix).
//
// Threads: the outputs are split over the intra-op pool (core/parallel.h); each output is still
// reduced by one thread in the order above, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
// The type elements are compared in: 16-bit floats widen to float (exactly).
template <class T>
using compute_t = std::conditional_t<kIsHalf<T>, float, T>;

template <class T>
bool is_nan(T v) {
  return v != v;
}

template <class O, class V>
O store_as(V v) {
  if constexpr (kIsHalf<O>) {
    return O(static_cast<float>(v));
  } else {
    return static_cast<O>(v);
  }
}

// One side (kept or reduced) of a reduction: sizes and input strides in elements, outermost
// first, with size-1 dims dropped and neighbours merged when they form one strided run.
struct DimGroup {
  int n = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  void push(int64_t size, int64_t stride) {
    if (size == 1) return;
    if (n > 0 && strides[n - 1] == stride * size) {
      sizes[n - 1] *= size;
      strides[n - 1] = stride;
      return;
    }
    sizes[n] = size;
    strides[n] = stride;
    ++n;
  }
  int64_t numel() const {
    int64_t p = 1;
    for (int d = 0; d < n; ++d) p *= sizes[d];
    return p;
  }
  DimGroup without_last() const {
    DimGroup g = *this;
    --g.n;
    return g;
  }
};

// Calls f(offset, stride, count) for each innermost run of `g`, in row-major order, with
// offsets in elements from `base`. A group with no dims is a single element.
template <class F>
void for_each_run(const DimGroup& g, int64_t base, F&& f) {
  if (g.n == 0) {
    f(base, int64_t{0}, int64_t{1});
    return;
  }
  for (int d = 0; d < g.n; ++d)
    if (g.sizes[d] == 0) return;
  const int last = g.n - 1;
  int64_t idx[kMaxDims] = {};
  int64_t off = base;
  for (;;) {
    f(off, g.strides[last], g.sizes[last]);
    int d = last - 1;
    for (; d >= 0; --d) {
      off += g.strides[d];
      if (++idx[d] < g.sizes[d]) break;
      off -= g.strides[d] * g.sizes[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// The offset (in elements) of the `linear`-th element of `g` in row-major order.
inline int64_t offset_of(const DimGroup& g, int64_t linear) {
  int64_t off = 0;
  for (int d = g.n - 1; d >= 0; --d) {
    off += (linear % g.sizes[d]) * g.strides[d];
    linear /= g.sizes[d];
  }
  return off;
}

// Sum of a strided run in double, pairwise so the rounding error grows with log(n), not n.
template <class T>
double pairwise_sum(const T* p, int64_t stride, int64_t n) {
  if (n <= 64) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      a0 += static_cast<double>(p[i * stride]);
      a1 += static_cast<double>(p[(i + 1) * stride]);
      a2 += static_cast<double>(p[(i + 2) * stride]);
      a3 += static_cast<double>(p[(i + 3) * stride]);
    }
    for (; i < n; ++i) a0 += static_cast<double>(p[i * stride]);
    return (a0 + a1) + (a2 + a3);
  }
  const int64_t h = n / 2;
  return pairwise_sum(p, stride, h) + pairwise_sum(p + h * stride, stride, n - h);
}

// Each reduction: Acc init(), update(acc, element, row-major index), finish(acc, count) -> Out,
// and optionally run(acc, ptr, stride, n) for a whole run when the index is not needed.
template <class T, bool kMean>
struct SumOp {
  static constexpr bool kFloat = !std::is_integral_v<T>;  // bool is integral
  static constexpr bool kNeedsElements = false;
  // Integers accumulate as uint64 so overflow wraps like int64 without undefined behaviour.
  using Acc = std::conditional_t<kFloat, double, uint64_t>;
  using Out = std::conditional_t<kFloat, T, int64_t>;
  Acc init() const { return 0; }
  void update(Acc& a, T x, int64_t) const { a += static_cast<Acc>(x); }
  void run(Acc& a, const T* p, int64_t stride, int64_t n) const {
    if constexpr (kFloat) {
      a += pairwise_sum(p, stride, n);
    } else {
      for (int64_t i = 0; i < n; ++i) a += static_cast<Acc>(p[i * stride]);
    }
  }
  Out finish(Acc a, int64_t count) const {
    if constexpr (kMean) {
      if (count == 0) return store_as<Out>(std::numeric_limits<double>::quiet_NaN());
      return store_as<Out>(a / static_cast<double>(count));
    } else {
      return store_as<Out>(a);
    }
  }
};

template <class T, bool kMax>
struct ExtremeOp {
  using C = compute_t<T>;
  static constexpr bool kNeedsElements = true;
  using Acc = C;
  using Out = T;
  Acc init() const {
    if constexpr (std::is_floating_point_v<C>) {
      return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    } else {
      return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
    }
  }
  // NaN sticks: once the accumulator is NaN no comparison replaces it.
  void update(Acc& a, T x, int64_t) const {
    const C v = static_cast<C>(x);
    if ((kMax ? v > a : v < a) || is_nan(v)) a = v;
  }
  // A whole run with NaN tracked apart from the extreme, so the loop is a plain select the
  // compiler can vectorise.
  void run(Acc& a, const T* p, int64_t stride, int64_t n) const {
    C m = a;
    bool nan = is_nan(a);
    if (stride == 1) {
      for (int64_t i = 0; i < n; ++i) {
        const C v = static_cast<C>(p[i]);
        nan |= is_nan(v);
        m = (kMax ? v > m : v < m) ? v : m;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const C v = static_cast<C>(p[i * stride]);
        nan |= is_nan(v);
        m = (kMax ? v > m : v < m) ? v : m;
      }
    }
    if constexpr (std::is_floating_point_v<C>) {
      a = nan ? std::numeric_limits<C>::quiet_NaN() : m;
    } else {
      a = m;
    }
  }
  Out finish(Acc a, int64_t) const { return store_as<Out>(a); }
};

template <class T>
struct ArgmaxOp {
  using C = compute_t<T>;
  static constexpr bool kNeedsElements = true;
  struct Acc {
    C best;
    int64_t index;
  };
  using Out = int64_t;
  // Starting from the lowest value with index 0 gives the first element when every element
  // equals that lowest value; otherwise the first strictly greater element replaces it.
  Acc init() const {
    if constexpr (std::is_floating_point_v<C>) {
      return {-std::numeric_limits<C>::infinity(), 0};
    } else {
      return {std::numeric_limits<C>::lowest(), 0};
    }
  }
  // NaN counts as the maximum; the first NaN wins.
  void update(Acc& a, T x, int64_t i) const {
    const C v = static_cast<C>(x);
    if (!is_nan(a.best) && (v > a.best || is_nan(v))) a = {v, i};
  }
  Out finish(const Acc& a, int64_t) const { return a.index; }
};

// Online log-sum-exp in double: m is the running max, s = sum(exp(x - m)).
template <class T>
struct LogSumExpOp {
  static constexpr bool kNeedsElements = false;
  struct Acc {
    double m, s;
    bool nan;
  };
  using Out = T;
  Acc init() const { return {-std::numeric_limits<double>::infinity(), 0.0, false}; }
  void update(Acc& a, T x, int64_t) const {
    const double v = static_cast<double>(x);
    if (is_nan(v)) {
      a.nan = true;
    } else if (v > a.m) {
      a.s = a.s * std::exp(a.m - v) + 1.0;  // exp(-inf) = 0 covers the first element
      a.m = v;
    } else if (v != -std::numeric_limits<double>::infinity() &&
               a.m != std::numeric_limits<double>::infinity()) {
      a.s += std::exp(v - a.m);
    }
  }
  Out finish(const Acc& a, int64_t) const {
    if (a.nan) return store_as<Out>(std::numeric_limits<double>::quiet_NaN());
    if (std::isinf(a.m)) return store_as<Out>(a.m);  // all -inf -> -inf; any +inf -> +inf
    return store_as<Out>(a.m + std::log(a.s));
  }
};

template <class Op>
concept HasRun = requires(const Op& op, typename Op::Acc& a) {
  op.run(a, nullptr, 0, 0);
};

template <class T, class Op>
void reduce_typed(const KernelCall& call, const Op& op) {
  using Out = typename Op::Out;
  using Acc = typename Op::Acc;
  const Tensor& in = call.inputs[0];
  const Tensor& out = call.out;
  const std::string_view name = op_name(call.op);
  EMBER_CHECK(out.dtype() == DTypeOf<Out>::value, name, ": output dtype ", dtype_name(out.dtype()),
              " does not match the ", dtype_name(DTypeOf<Out>::value), " result of a ",
              dtype_name(in.dtype()), " input");

  // Split dims into kept and reduced (attrs.dims is sorted and unique).
  const int nd = in.dim();
  bool reduced[kMaxDims] = {};
  for (int64_t d : call.attrs.dims) {
    EMBER_CHECK(d >= 0 && d < std::max(nd, 1), name, ": reduction dim ", d, " out of range for ",
                nd, "-d input of shape ", in.sizes());
    reduced[d] = true;
  }
  DimGroup keep, red;
  int64_t keep_numel = 1;
  for (int d = 0; d < nd; ++d) {
    (reduced[d] ? red : keep).push(in.size(d), in.stride(d));
    if (!reduced[d]) keep_numel *= in.size(d);
  }
  const int64_t count = red.numel();
  EMBER_CHECK(out.numel() == keep_numel, name, ": output has ", out.numel(), " elements, expected ",
              keep_numel, " for input ", in.sizes(), " reduced over ", call.attrs.dims);
  if (keep_numel == 0) return;
  if constexpr (Op::kNeedsElements) {
    EMBER_CHECK(count > 0, name, ": cannot reduce over an empty dimension (input shape ",
                in.sizes(), ", dims ", call.attrs.dims, ")");
  }

  const T* src = static_cast<const T*>(in.raw_data());
  Out* dst = static_cast<Out*>(out.raw_data());
  const bool outer = keep.n > 0 && red.n > 0 && keep.sizes[keep.n - 1] >= 4 &&
                     std::abs(keep.strides[keep.n - 1]) < std::abs(red.strides[red.n - 1]);
  if (!outer) {
    const int64_t grain =
        std::max<int64_t>(1, kParallelGrainElements / std::max<int64_t>(count, 1));
    parallel_for(keep_numel, grain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        Acc acc = op.init();
        int64_t i = 0;
        for_each_run(red, offset_of(keep, o), [&](int64_t rb, int64_t rs, int64_t rn) {
          if constexpr (HasRun<Op>) {
            op.run(acc, src + rb, rs, rn);
          } else {
            for (int64_t r = 0; r < rn; ++r) op.update(acc, src[rb + r * rs], i + r);
          }
          i += rn;
        });
        dst[o] = op.finish(acc, count);
      }
    });
    return;
  }

  // Outer order: the innermost kept dim's outputs are swept together across the reduced dims;
  // the pool splits that dim into column ranges, each with its own accumulators.
  const int64_t kn = keep.sizes[keep.n - 1], ks = keep.strides[keep.n - 1];
  const DimGroup rows = keep.without_last();
  const int64_t nrows = rows.numel();
  const int64_t grain = std::max<int64_t>(1, kParallelGrainElements / std::max<int64_t>(count, 1));
  parallel_for(kn, grain, [&](int64_t k0, int64_t k1) {
    std::unique_ptr<Acc[]> acc(new Acc[static_cast<size_t>(k1 - k0)]);
    for (int64_t j = 0; j < nrows; ++j) {
      const int64_t base = offset_of(rows, j) + k0 * ks;
      for (int64_t k = 0; k < k1 - k0; ++k) acc[k] = op.init();
      int64_t i = 0;
      for_each_run(red, base, [&](int64_t rb, int64_t rs, int64_t rn) {
        for (int64_t r = 0; r < rn; ++r, ++i) {
          const T* p = src + rb + r * rs;
          for (int64_t k = 0; k < k1 - k0; ++k) op.update(acc[k], p[k * ks], i);
        }
      });
      Out* d = dst + j * kn + k0;
      for (int64_t k = 0; k < k1 - k0; ++k) d[k] = op.finish(acc[k], count);
    }
  });
}

}  // namespace

void reduce(const KernelCall& call) {
  EMBER_CHECK(call.inputs.size() == 1, op_name(call.op), ": expected 1 input, got ",
              call.inputs.size());
  const DType dt = call.inputs[0].dtype();
  EMBER_CHECK(in_set(op_info(call.op).dtypes, dt), op_name(call.op), ": unsupported dtype ",
              dtype_name(dt));
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {  // bool only sums (the op table says so)
      if (call.op == OpId::sum) return reduce_typed<T>(call, SumOp<T, false>{});
    } else {
      switch (call.op) {
        case OpId::sum:
          return reduce_typed<T>(call, SumOp<T, false>{});
        case OpId::amax:
          return reduce_typed<T>(call, ExtremeOp<T, true>{});
        case OpId::amin:
          return reduce_typed<T>(call, ExtremeOp<T, false>{});
        case OpId::argmax:
          return reduce_typed<T>(call, ArgmaxOp<T>{});
        default:
          break;
      }
      if constexpr (!std::is_integral_v<T>) {  // mean and logsumexp take floats only
        switch (call.op) {
          case OpId::mean:
            return reduce_typed<T>(call, SumOp<T, true>{});
          case OpId::logsumexp:
            return reduce_typed<T>(call, LogSumExpOp<T>{});
          default:
            break;
        }
      }
    }
    EMBER_FAIL(op_name(call.op), ": no CPU reduction kernel for ", dtype_name(dt), " input");
  });
}

}  // namespace ember::kernels::cpu
