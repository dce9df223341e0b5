// CPU elementwise kernels: one loop template per arity over kernels::Iter, with the functors of
// kernels/pointwise_functors.h. Contiguous runs get a plain indexed loop the compiler vectorises.
// Large loops are cut into element ranges run on the intra-op pool (core/parallel.h); each
// element is computed the same way whichever thread gets it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/iter.h"
#include "kernels/pointwise_ops.h"

namespace ember::kernels::cpu {
namespace {

template <class T>
constexpr bool is_16bit_float = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
// The type a functor computes in: float for 16-bit storage, else the storage type.
template <class T>
using acc_t = std::conditional_t<is_16bit_float<T>, float, T>;

// Converts a computed value to the storage type. Float to int saturates and maps NaN to 0,
// which is what the GPU's conversion instructions do, so both devices agree.
template <class Out, class V>
Out convert(V v) {
  if constexpr (std::is_floating_point_v<V> && std::is_integral_v<Out> &&
                !std::is_same_v<Out, bool>) {
    if (std::isnan(v)) return 0;
    if (v <= static_cast<V>(std::numeric_limits<Out>::min()))
      return std::numeric_limits<Out>::min();
    if (v >= static_cast<V>(std::numeric_limits<Out>::max()))
      return std::numeric_limits<Out>::max();
    return static_cast<Out>(v);
  } else if constexpr (is_16bit_float<Out>) {
    return Out(static_cast<float>(v));
  } else if constexpr (is_16bit_float<V>) {
    return convert<Out>(static_cast<float>(v));
  } else {
    return static_cast<Out>(v);
  }
}

template <class T>
acc_t<T> load(const char* p) {
  return static_cast<acc_t<T>>(*reinterpret_cast<const T*>(p));
}

template <class F>
void for_each_run_parallel(const Iter& it, const F& inner) {
  parallel_for(it.numel, kParallelGrainElements,
               [&](int64_t b, int64_t e) { for_each_run_range(it, b, e, inner); });
}

// A 2-D unary loop whose output is dense along the inner dim and whose input is dense along the
// outer one (a copy or cast of a transposed matrix, such as a weight's gradient computed as
// (x^T g)^T): square tiles, so each cache line read is used for a whole tile row instead of one
// element. Same per-element computation as the plain loop.
template <class Out, class In, class F>
bool unary_transpose_tiles(const Iter& it, const F& f) {
  if (it.ndim != 2 || it.strides[0][0] != static_cast<int64_t>(sizeof(Out)) ||
      it.strides[1][1] != static_cast<int64_t>(sizeof(In)) ||
      it.strides[1][0] == static_cast<int64_t>(sizeof(In)) || it.numel < kParallelGrainElements / 8)
    return false;
  constexpr int64_t kTile = 16;  // 16 strided lines a side: fewer L1 set conflicts than 32
  const int64_t inner = it.sizes[0], outer = it.sizes[1];
  const int64_t os = it.strides[0][1], is = it.strides[1][0];  // bytes
  const int64_t row_blocks = (outer + kTile - 1) / kTile;
  const int64_t grain =
      std::max<int64_t>(1, kParallelGrainElements / (kTile * std::max<int64_t>(inner, 1)));
  parallel_for(row_blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t i0 = b0 * kTile; i0 < std::min(outer, b1 * kTile); i0 += kTile) {
      const int64_t i1 = std::min(outer, i0 + kTile);
      for (int64_t j0 = 0; j0 < inner; j0 += kTile) {
        const int64_t j1 = std::min(inner, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i) {
          Out* o = reinterpret_cast<Out*>(it.data[0] + i * os);
          const char* a = it.data[1] + i * static_cast<int64_t>(sizeof(In));
          for (int64_t j = j0; j < j1; ++j)
            o[j] =
                convert<Out>(f(static_cast<acc_t<In>>(*reinterpret_cast<const In*>(a + j * is))));
        }
      }
    }
  });
  return true;
}

template <class Out, class In, class F>
void unary_loop(const Iter& it, const F& f) {
  if (unary_transpose_tiles<Out, In>(it, f)) return;
  for_each_run_parallel(it, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      const In* a = reinterpret_cast<const In*>(p[1]);
      for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(static_cast<acc_t<In>>(a[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) = convert<Out>(f(load<In>(p[1] + i * s[1])));
    }
  });
}

template <class Out, class In, class F>
void binary_loop(const Iter& it, const F& f) {
  for_each_run_parallel(it, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == sizeof(In)) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      const In* a = reinterpret_cast<const In*>(p[1]);
      const In* b = reinterpret_cast<const In*>(p[2]);
      for (int64_t i = 0; i < n; ++i)
        o[i] = convert<Out>(f(static_cast<acc_t<In>>(a[i]), static_cast<acc_t<In>>(b[i])));
    } else if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == 0) {
      Out* o = reinterpret_cast<Out*>(p[0]);
      const In* a = reinterpret_cast<const In*>(p[1]);
      const acc_t<In> b = load<In>(p[2]);
      for (int64_t i = 0; i < n; ++i) o[i] = convert<Out>(f(static_cast<acc_t<In>>(a[i]), b));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * s[0]) =
            convert<Out>(f(load<In>(p[1] + i * s[1]), load<In>(p[2] + i * s[2])));
    }
  });
}

template <class T, class F>
void where_loop(const Iter& it, const F& f) {
  for_each_run_parallel(it, [&](char** p, const int64_t* s, int64_t n) {
    // Dense condition and output, each value dense or one broadcast element (a gradient masked
    // against a scalar zero): plain indexed loops.
    constexpr int64_t e = sizeof(T);
    if (s[0] == e && s[1] == 1 && (s[2] == e || s[2] == 0) && (s[3] == e || s[3] == 0)) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const T* a = reinterpret_cast<const T*>(p[2]);
      const T* b = reinterpret_cast<const T*>(p[3]);
      if (s[2] == e && s[3] == e) {
        for (int64_t i = 0; i < n; ++i)
          o[i] = convert<T>(f(c[i], static_cast<acc_t<T>>(a[i]), static_cast<acc_t<T>>(b[i])));
      } else if (s[2] == e) {
        const acc_t<T> bv = static_cast<acc_t<T>>(*b);
        for (int64_t i = 0; i < n; ++i) o[i] = convert<T>(f(c[i], static_cast<acc_t<T>>(a[i]), bv));
      } else if (s[3] == e) {
        const acc_t<T> av = static_cast<acc_t<T>>(*a);
        for (int64_t i = 0; i < n; ++i) o[i] = convert<T>(f(c[i], av, static_cast<acc_t<T>>(b[i])));
      } else {
        const acc_t<T> av = static_cast<acc_t<T>>(*a), bv = static_cast<acc_t<T>>(*b);
        for (int64_t i = 0; i < n; ++i) o[i] = convert<T>(f(c[i], av, bv));
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(p[0] + i * s[0]) =
          convert<T>(f(*reinterpret_cast<const bool*>(p[1] + i * s[1]), load<T>(p[2] + i * s[2]),
                       load<T>(p[3] + i * s[3])));
  });
}

// Calls f(TypeTag<T>) for the dtype `t` when it is in the compile-time set S.
template <DTypeSet S, class F>
void visit(DType t, const char* op, F&& f) {
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (in_set(S, DTypeOf<T>::value)) {
      f(tag);
    } else {
      EMBER_FAIL(op, ": dtype ", dtype_name(t), " is not supported on the CPU");
    }
  });
}

template <DTypeSet S, OutRule R, class F>
void run_unary(const KernelCall& c, const F& f) {
  const Iter it = make_iter(c.out, c.inputs);
  visit<S>(c.inputs[0].dtype(), op_name(c.op).data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_loop<T, T>(it, f);
  });
}

template <DTypeSet S, OutRule R, class F>
void run_binary(const KernelCall& c, const F& f) {
  const Iter it = make_iter(c.out, c.inputs);
  visit<S>(c.inputs[0].dtype(), op_name(c.op).data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (R == OutRule::ToBool)
      binary_loop<bool, T>(it, f);
    else
      binary_loop<T, T>(it, f);
  });
}

template <DTypeSet S, OutRule R, class F>
void run_ternary(const KernelCall& c, const F& f) {
  const Iter it = make_iter(c.out, c.inputs);
  visit<S>(c.inputs[1].dtype(), op_name(c.op).data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    where_loop<T>(it, f);
  });
}

void run_cast(const KernelCall& c) {
  const Iter it = make_iter(c.out, c.inputs);
  visit<kAllTypes>(c.inputs[0].dtype(), "cast", [&](auto in_tag) {
    using In = typename decltype(in_tag)::type;
    visit<kAllTypes>(c.out.dtype(), "cast", [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      unary_loop<Out, In>(it, pw::cast{});
    });
  });
}

void run_fill(const KernelCall& c) {
  const Iter it = make_iter(c.out, {});
  const Scalar v = c.attrs.value;
  visit<kAllTypes>(c.out.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T value = v.is_floating() ? convert<T>(v.to_double()) : convert<T>(v.to_int());
    for_each_run_parallel(it, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = value;
    });
  });
}

}  // namespace

void pointwise(const KernelCall& c) {
  if (c.op == OpId::fill) return run_fill(c);
  if (c.op == OpId::cast) return run_cast(c);
  const bool handled = visit_elementwise(c.op, c.attrs, [&](auto op_c, const auto& f) {
    constexpr OpId op = decltype(op_c)::value;
    constexpr OpInfo info = op_info(op);
    if constexpr (op == OpId::cast) {
      // handled above
    } else if constexpr (info.kind == OpKind::Unary) {
      run_unary<info.dtypes, info.rule>(c, f);
    } else if constexpr (info.kind == OpKind::Binary) {
      run_binary<info.dtypes, info.rule>(c, f);
    } else {
      run_ternary<info.dtypes, info.rule>(c, f);
    }
  });
  EMBER_CHECK(handled, op_name(c.op), ": not an elementwise op");
}

}  // namespace ember::kernels::cpu
