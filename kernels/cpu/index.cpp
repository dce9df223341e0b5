// CPU indexing kernels: gather, index_select (along attrs.dim), one_hot and scatter_add.
//
// gather and index_select are one loop: walk the output's positions, read the index at each
// (gather: the index tensor has the output's shape; index_select: a 1-D index read along `dim`
// only) and copy the input element at that position with `dim` replaced by the index. Elements
// move as raw words of their size, so one instantiation serves every dtype of that width.
// Every index is validated before anything is written.
//
// scatter_add is gather's adjoint: walk the source's positions and add each element into the
// output at that position with `dim` replaced by the index. It adds in the output's dtype
// (16-bit floats in float, rounded once at the end, and integers with two's complement
// wrap-around rather than signed overflow).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

// A loop over `sizes` (outermost first) carrying an element offset for each of 3 operands.
struct Walk {
  int nd = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};
};

template <class F>
void for_each_point(const Walk& w, F&& f) {
  for (int d = 0; d < w.nd; ++d)
    if (w.sizes[d] == 0) return;
  int64_t idx[kMaxDims] = {};
  int64_t off[3] = {0, 0, 0};
  for (;;) {
    f(off[0], off[1], off[2]);
    int d = w.nd - 1;
    for (; d >= 0; --d) {
      for (int k = 0; k < 3; ++k) off[k] += w.strides[k][d];
      if (++idx[d] < w.sizes[d]) break;
      for (int k = 0; k < 3; ++k) off[k] -= w.strides[k][d] * w.sizes[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

template <int kBytes>
struct WordOf;
template <>
struct WordOf<1> {
  using type = uint8_t;
};
template <>
struct WordOf<2> {
  using type = uint16_t;
};
template <>
struct WordOf<4> {
  using type = uint32_t;
};
template <>
struct WordOf<8> {
  using type = uint64_t;
};

template <class F>
void visit_width(int64_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(WordOf<1>{});
    case 2:
      return f(WordOf<2>{});
    case 4:
      return f(WordOf<4>{});
    case 8:
      return f(WordOf<8>{});
    default:
      EMBER_FAIL("index: unsupported element size ", bytes);
  }
}

// Calls f(tag) with the C++ type of an index tensor (int64, or int32 where callers allow it).
template <class F>
void visit_index(const Tensor& index, std::string_view op, F&& f) {
  switch (index.dtype()) {
    case kInt64:
      return f(TypeTag<int64_t>{});
    case kInt32:
      return f(TypeTag<int32_t>{});
    default:
      EMBER_FAIL(op, ": index must be int64, got ", dtype_name(index.dtype()));
  }
}

// Operand 0: out, 1: input with dim's stride zeroed, 2: the index.
void gather_like(const KernelCall& call, const Walk& w, int64_t dim_size, int64_t dim_stride) {
  const std::string_view name = op_name(call.op);
  const Tensor& in = call.inputs[0];
  const Tensor& index = call.inputs[1];
  visit_index(index, name, [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I* ix = static_cast<const I*>(index.raw_data());
    for_each_point(w, [&](int64_t, int64_t, int64_t oi) {
      const int64_t v = ix[oi];
      EMBER_CHECK(v >= 0 && v < dim_size, name, ": index ", v, " is out of range for dim ",
                  call.attrs.dim, " of size ", dim_size, " (input shape ", in.sizes(), ")");
    });
    visit_width(in.element_size(), [&](auto wtag) {
      using W = typename decltype(wtag)::type;
      const W* src = static_cast<const W*>(in.raw_data());
      W* dst = static_cast<W*>(call.out.raw_data());
      for_each_point(w, [&](int64_t oo, int64_t oin, int64_t oi) {
        dst[oo] = src[oin + static_cast<int64_t>(ix[oi]) * dim_stride];
      });
    });
  });
}

// Size of `d` treating a 0-dim tensor as one element along dim 0.
int64_t size_or_1(const Tensor& t, int d) { return t.dim() == 0 ? 1 : t.size(d); }
int64_t stride_or_0(const Tensor& t, int d) { return t.dim() == 0 ? 0 : t.stride(d); }

void run_gather(const KernelCall& call) {
  const Tensor& in = call.inputs[0];
  const Tensor& index = call.inputs[1];
  const Tensor& out = call.out;
  const int64_t dim = call.attrs.dim;
  const int nd = std::max(in.dim(), 1);
  EMBER_CHECK(index.dim() == in.dim(), "gather: index has ", index.dim(), " dims but input has ",
              in.dim(), " (input ", in.sizes(), ", index ", index.sizes(), ")");
  EMBER_CHECK(dim >= 0 && dim < nd, "gather: dim ", dim, " out of range for input of shape ",
              in.sizes());
  EMBER_CHECK(out.sizes() == index.sizes() && out.dtype() == in.dtype(), "gather: output ",
              out.sizes(), " ", dtype_name(out.dtype()), " does not match index shape ",
              index.sizes(), " and input dtype ", dtype_name(in.dtype()));
  Walk w;
  w.nd = nd;
  for (int d = 0; d < nd; ++d) {
    const int64_t n = size_or_1(index, d);
    EMBER_CHECK(d == dim || n <= size_or_1(in, d), "gather: index shape ", index.sizes(),
                " exceeds input shape ", in.sizes(), " in dim ", d);
    w.sizes[d] = n;
    w.strides[0][d] = stride_or_0(out, d);
    w.strides[1][d] = d == dim ? 0 : stride_or_0(in, d);
    w.strides[2][d] = stride_or_0(index, d);
  }
  gather_like(call, w, size_or_1(in, dim), stride_or_0(in, dim));
}

void run_index_select(const KernelCall& call) {
  const Tensor& in = call.inputs[0];
  const Tensor& index = call.inputs[1];
  const Tensor& out = call.out;
  const int64_t dim = call.attrs.dim;
  const int nd = std::max(in.dim(), 1);
  EMBER_CHECK(index.dim() <= 1, "index_select: index must be 1-D, got shape ", index.sizes());
  EMBER_CHECK(dim >= 0 && dim < nd, "index_select: dim ", dim, " out of range for input of shape ",
              in.sizes());
  EMBER_CHECK(
      out.dim() == in.dim() && out.dtype() == in.dtype() && size_or_1(out, dim) == index.numel(),
      "index_select: output ", out.sizes(), " ", dtype_name(out.dtype()), " does not fit input ",
      in.sizes(), " with ", index.numel(), " indices");
  Walk w;
  w.nd = nd;
  for (int d = 0; d < nd; ++d) {
    EMBER_CHECK(d == dim || size_or_1(out, d) == size_or_1(in, d), "index_select: output ",
                out.sizes(), " does not fit input ", in.sizes());
    w.sizes[d] = size_or_1(out, d);
    w.strides[0][d] = stride_or_0(out, d);
    w.strides[1][d] = d == dim ? 0 : stride_or_0(in, d);
    w.strides[2][d] = d == dim ? stride_or_0(index, 0) : 0;
  }
  gather_like(call, w, size_or_1(in, dim), stride_or_0(in, dim));
}

void run_one_hot(const KernelCall& call) {
  const Tensor& in = call.inputs[0];
  const Tensor& out = call.out;
  const int64_t classes = call.attrs.num_classes;
  EMBER_CHECK(classes > 0, "one_hot: num_classes must be positive, got ", classes);
  EMBER_CHECK(
      out.dtype() == kInt64 && out.dim() == in.dim() + 1 && out.size(out.dim() - 1) == classes,
      "one_hot: output ", out.sizes(), " ", dtype_name(out.dtype()), " does not fit input ",
      in.sizes(), " with ", classes, " classes");
  Walk w;
  w.nd = in.dim();
  for (int d = 0; d < in.dim(); ++d) {
    EMBER_CHECK(out.size(d) == in.size(d), "one_hot: output ", out.sizes(), " does not fit input ",
                in.sizes());
    w.sizes[d] = in.size(d);
    w.strides[0][d] = out.stride(d);
    w.strides[1][d] = in.stride(d);
  }
  const int64_t cs = out.stride(out.dim() - 1);
  int64_t* dst = static_cast<int64_t*>(out.raw_data());
  visit_index(in, "one_hot", [&](auto itag) {
    using I = typename decltype(itag)::type;
    const I* src = static_cast<const I*>(in.raw_data());
    for_each_point(w, [&](int64_t, int64_t oi, int64_t) {
      const int64_t v = src[oi];
      EMBER_CHECK(v >= 0 && v < classes, "one_hot: class index ", v,
                  " is out of range for num_classes ", classes);
    });
    for_each_point(w, [&](int64_t oo, int64_t oi, int64_t) {
      const int64_t v = src[oi];
      for (int64_t j = 0; j < classes; ++j) dst[oo + j * cs] = j == v;
    });
  });
}

// out = zeros(attrs.shape); out[p with dim := index[p]] += src[p] for every source position p.
void run_scatter_add(const KernelCall& call) {
  const Tensor& src = call.inputs[0];
  const Tensor& index = call.inputs[1];
  const Tensor& out = call.out;
  const int64_t dim = call.attrs.dim;
  const int nd = std::max(src.dim(), 1);
  EMBER_CHECK(index.sizes() == src.sizes() && index.dtype() == kInt64, "scatter_add: index ",
              dtype_name(index.dtype()), " ", index.sizes(),
              " must be int64 of the source's shape ", src.sizes());
  EMBER_CHECK(out.dim() == src.dim() && out.dtype() == src.dtype() && dim >= 0 && dim < nd,
              "scatter_add: output ", dtype_name(out.dtype()), " ", out.sizes(), " and dim ", dim,
              " do not fit a ", dtype_name(src.dtype()), " source of shape ", src.sizes());
  const int64_t dim_size = size_or_1(out, static_cast<int>(dim));
  // Operand 0: the accumulator with dim's stride zeroed, 1: src, 2: index.
  Walk w;
  w.nd = nd;
  for (int d = 0; d < nd; ++d) {
    EMBER_CHECK(d == dim || size_or_1(src, d) <= size_or_1(out, d), "scatter_add: source shape ",
                src.sizes(), " exceeds output shape ", out.sizes(), " in dim ", d);
    w.sizes[d] = size_or_1(src, d);
    w.strides[1][d] = stride_or_0(src, d);
    w.strides[2][d] = stride_or_0(index, d);
  }
  const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
  for_each_point(w, [&](int64_t, int64_t, int64_t oi) {
    const int64_t v = ix[oi];
    EMBER_CHECK(v >= 0 && v < dim_size, "scatter_add: index ", v, " is out of range for dim ", dim,
                " of size ", dim_size, " (output shape ", out.sizes(), ")");
  });
  // A walk over every output element: operand 0 the output, 1 a contiguous accumulator.
  Walk all;
  all.nd = nd;
  int64_t cs = 1;
  for (int d = nd - 1; d >= 0; --d) {
    all.sizes[d] = size_or_1(out, d);
    all.strides[0][d] = stride_or_0(out, d);
    all.strides[1][d] = cs;
    cs *= all.sizes[d];
  }
  visit_dtype(src.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      constexpr bool kWide = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
      using Acc = std::conditional_t<kWide, float, T>;
      const T* s = static_cast<const T*>(src.raw_data());
      std::vector<Acc> buffer;
      Acc* acc = static_cast<Acc*>(out.raw_data());
      int64_t acc_dim_stride = stride_or_0(out, static_cast<int>(dim));
      if constexpr (kWide) {
        buffer.assign(static_cast<size_t>(out.numel()), Acc(0));
        acc = buffer.data();
        acc_dim_stride = all.strides[1][dim];
        for (int d = 0; d < nd; ++d) w.strides[0][d] = d == dim ? 0 : all.strides[1][d];
      } else {
        for_each_point(all, [&](int64_t oo, int64_t, int64_t) { acc[oo] = Acc(0); });
        for (int d = 0; d < nd; ++d) w.strides[0][d] = d == dim ? 0 : stride_or_0(out, d);
      }
      for_each_point(w, [&](int64_t oa, int64_t os, int64_t oi) {
        Acc& a = acc[oa + ix[oi] * acc_dim_stride];
        if constexpr (std::is_integral_v<Acc>) {
          using U = std::make_unsigned_t<Acc>;
          a = static_cast<Acc>(static_cast<U>(a) + static_cast<U>(s[os]));
        } else {
          a += static_cast<Acc>(s[os]);
        }
      });
      if constexpr (kWide) {
        T* o = static_cast<T*>(out.raw_data());
        for_each_point(all, [&](int64_t oo, int64_t ob, int64_t) { o[oo] = T(acc[ob]); });
      }
    }
  });
}

}  // namespace

void index(const KernelCall& call) {
  const std::string_view name = op_name(call.op);
  const size_t arity = call.op == OpId::one_hot ? 1 : 2;
  EMBER_CHECK(call.inputs.size() == arity, name, ": expected ", arity, " inputs, got ",
              call.inputs.size());
  switch (call.op) {
    case OpId::gather:
      return run_gather(call);
    case OpId::index_select:
      return run_index_select(call);
    case OpId::one_hot:
      return run_one_hot(call);
    case OpId::scatter_add:
      return run_scatter_add(call);
    default:
      EMBER_FAIL(name, ": not an indexing op");
  }
}

}  // namespace ember::kernels::cpu
