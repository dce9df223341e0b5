// The eager launcher of elementwise ops (Nullary/Unary/Binary/Ternary kinds): plans the loop
// with kernels::Iter, picks the flat (vectorized) or the strided kernel of pointwise.cuh and
// instantiates it only for the dtypes the op table allows the op.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/pointwise.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/iter.h"
#include "kernels/pointwise_ops.h"

namespace ember::kernels::cuda {
namespace {

namespace ew = elementwise;
static_assert(ew::kMaxDims == ember::kMaxDims);
static_assert(ew::kMaxOperands == kernels::kMaxOperands);

// Host storage type -> device storage type.
template <class H>
struct DeviceStorage {
  using type = H;
};
template <>
struct DeviceStorage<Half> {
  using type = __half;
};
template <>
struct DeviceStorage<BFloat16> {
  using type = __nv_bfloat16;
};
static_assert(sizeof(__half) == sizeof(Half) && sizeof(__nv_bfloat16) == sizeof(BFloat16));

// Calls f(TypeTag<device storage type>) for `t`, instantiating f only for dtypes in Allowed.
template <DTypeSet Allowed, class F>
void visit_allowed(DType t, OpId op, F&& f) {
  visit_dtype(t, [&](auto tag) {
    using H = typename decltype(tag)::type;
    if constexpr (in_set(Allowed, DTypeOf<H>::value)) {
      f(TypeTag<typename DeviceStorage<H>::type>{});
    } else {
      EMBER_FAIL(op_name(op), ": dtype ", dtype_name(t), " is not supported");
    }
  });
}

// The loop every launch shares: the coalesced iteration space plus the inline scalars.
struct Plan {
  Iter it;
  unsigned scalar_mask = 0;
  uint64_t scalar_bits[kMaxOperands] = {};
  int device = 0;
  OpId op{};
};

uint64_t bits_of(const void* p, int64_t size) {
  uint64_t b = 0;
  std::memcpy(&b, p, static_cast<size_t>(size));  // little-endian: the value's low bytes
  return b;
}

Plan make_plan(const KernelCall& call) {
  Plan p;
  p.op = call.op;
  p.device = call.out.device().index;
  p.it = make_iter(call.out, call.inputs);
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    const int k = static_cast<int>(i) + 1;
    if (t.device() == call.out.device()) continue;
    EMBER_CHECK(t.device().is_cpu() && t.numel() == 1 && t.dim() == 0, op_name(call.op), ": input ",
                i, " is on ", t.device().str(), " with shape ", t.sizes(), " but the output is on ",
                call.out.device().str(), " (only 0-dim host tensors may mix with device tensors)");
    // A host number: read it now and pass it inside the kernel's arguments.
    p.scalar_mask |= 1u << k;
    p.scalar_bits[k] = bits_of(t.raw_data(), t.element_size());
    p.it.data[k] = nullptr;
  }
  return p;
}

// fill: one inline-scalar input holding the value converted to the output dtype on the host.
template <class H>
uint64_t scalar_as(const Scalar& v) {
  H x;
  if constexpr (std::is_same_v<H, bool>) {
    x = v.is_floating() ? v.to_double() != 0.0 : v.to_int() != 0;
  } else if constexpr (std::is_integral_v<H>) {
    x = static_cast<H>(v.to_int());
  } else if constexpr (std::is_same_v<H, double>) {
    x = v.to_double();
  } else {
    x = H(static_cast<float>(v.to_double()));  // float, Half, BFloat16: through float
  }
  return bits_of(&x, sizeof(H));
}

int64_t grid_for(int64_t work_items, int device) {
  // Enough blocks to fill every SM once at full occupancy; the grid-stride loops cover the rest.
  const int64_t cap = static_cast<int64_t>(sm_count(device)) * (2048 / ew::kThreads);
  const int64_t need = (work_items + ew::kThreads - 1) / ew::kThreads;
  return need < 1 ? 1 : need < cap ? need : cap;
}

template <class... T>
constexpr int64_t max_size() {
  int64_t m = 1;
  ((m = static_cast<int64_t>(sizeof(T)) > m ? static_cast<int64_t>(sizeof(T)) : m), ...);
  return m;
}

template <class Op, class Out, class... In>
void launch(const Plan& p, const Op& op) {
  constexpr int N = 1 + sizeof...(In);
  const Iter& it = p.it;
  EMBER_CHECK(it.nops == N, op_name(p.op), ": internal error: ", it.nops, " operands, expected ",
              N);
  if (it.numel == 0) return;
  cudaStream_t s = stream(p.device);
  constexpr int V = static_cast<int>(16 / max_size<Out, In...>());
  constexpr int64_t kSizes[N] = {static_cast<int64_t>(sizeof(Out)),
                                 static_cast<int64_t>(sizeof(In))...};

  // Flat and vectorizable: one dim, every memory operand dense and aligned to its vector.
  bool flat = it.ndim == 1;
  unsigned bcast = 0;
  for (int k = 0; k < N && flat; ++k) {
    if ((p.scalar_mask >> k) & 1u) continue;
    const int64_t st = it.strides[k][0];
    if (st == 0 && k > 0) {
      bcast |= 1u << k;
    } else {
      flat = st == kSizes[k] && reinterpret_cast<uintptr_t>(it.data[k]) % (V * kSizes[k]) == 0;
    }
  }
  if (flat) {
    ew::FlatArgs<N> a;
    for (int k = 0; k < N; ++k) {
      a.ops.data[k] = it.data[k];
      a.ops.scalar_bits[k] = p.scalar_bits[k];
    }
    a.ops.scalar_mask = p.scalar_mask;
    a.bcast_mask = bcast;
    a.numel = it.numel;
    const auto grid = static_cast<unsigned>(grid_for((it.numel + V - 1) / V, p.device));
    ew::flat_kernel<V, Op, Out, In...><<<grid, ew::kThreads, 0, s>>>(a, op);
    check_launch(op_name(p.op).data());
    return;
  }

  ew::StridedArgs<N> a;
  for (int k = 0; k < N; ++k) {
    a.ops.data[k] = it.data[k];
    a.ops.scalar_bits[k] = p.scalar_bits[k];
    for (int d = 0; d < kMaxDims; ++d) a.strides[k][d] = d < it.ndim ? it.strides[k][d] : 0;
  }
  a.ops.scalar_mask = p.scalar_mask;
  a.ndim = it.ndim;
  a.numel = it.numel;
  a.index32 = it.numel <= INT32_MAX;
  for (int d = 0; d < kMaxDims; ++d) {
    a.sizes[d] = d < it.ndim ? it.sizes[d] : 1;
    a.div[d] =
        ew::FastDivmod::make(a.index32 && d < it.ndim ? static_cast<uint32_t>(it.sizes[d]) : 1u);
  }
  const auto grid = static_cast<unsigned>(grid_for(it.numel, p.device));
  ew::strided_kernel<Op, Out, In...><<<grid, ew::kThreads, 0, s>>>(a, op);
  check_launch(op_name(p.op).data());
}

void check_same_dtype(const KernelCall& call, DType t, size_t first_input) {
  for (size_t i = first_input; i < call.inputs.size(); ++i)
    EMBER_CHECK(call.inputs[i].dtype() == t, op_name(call.op), ": internal error: input ", i,
                " is ", dtype_name(call.inputs[i].dtype()), ", expected ", dtype_name(t));
}

// Unary and binary ops: the inputs share the output's dtype, or the output is bool for the
// comparisons (rule ToBool).
template <OpId Op, class F>
void apply_elementwise(const KernelCall& call, const Plan& p, const F& f) {
  constexpr bool kUnary = op_info(Op).kind == OpKind::Unary;
  constexpr bool kToBool = op_info(Op).rule == OutRule::ToBool;
  static_assert(kUnary || op_info(Op).kind == OpKind::Binary);
  const size_t arity = kUnary ? 1 : 2;
  EMBER_CHECK(call.inputs.size() == arity, op_name(Op), ": internal error: ", call.inputs.size(),
              " inputs");
  const DType t = call.inputs[0].dtype();
  check_same_dtype(call, t, 1);
  const DType want = kToBool ? kBool : t;
  EMBER_CHECK(call.out.dtype() == want, op_name(Op), ": internal error: output is ",
              dtype_name(call.out.dtype()), ", expected ", dtype_name(want));
  visit_allowed<op_info(Op).dtypes>(t, Op, [&](auto tag) {
    using S = typename decltype(tag)::type;
    using C = ew::compute_t<S>;
    using Out = std::conditional_t<kToBool, bool, S>;
    if constexpr (kUnary)
      launch<ew::ComputeOp<F, C, Out>, Out, S>(p, {f});
    else
      launch<ew::ComputeOp<F, C, Out>, Out, S, S>(p, {f});
  });
}

void cast(const KernelCall& call, const Plan& p) {
  EMBER_CHECK(call.inputs.size() == 1, "cast: internal error: ", call.inputs.size(), " inputs");
  visit_allowed<kAllTypes>(call.inputs[0].dtype(), OpId::cast, [&](auto in_tag) {
    using In = typename decltype(in_tag)::type;
    visit_allowed<kAllTypes>(call.out.dtype(), OpId::cast, [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      launch<ew::CastOp<Out>, Out, In>(p, {});
    });
  });
}

void fill(const KernelCall& call, Plan p) {
  // The value becomes an inline-scalar input of the output's dtype: fill is a cast of it.
  p.it.nops = 2;
  p.it.elem_size[1] = call.out.element_size();
  for (int d = 0; d < kMaxDims; ++d) p.it.strides[1][d] = 0;
  p.it.data[1] = nullptr;
  p.scalar_mask |= 1u << 1;
  visit_allowed<op_info(OpId::fill).dtypes>(call.out.dtype(), OpId::fill, [&](auto tag) {
    using S = typename decltype(tag)::type;
    visit_dtype(call.out.dtype(), [&](auto host_tag) {
      using H = typename decltype(host_tag)::type;
      if constexpr (std::is_same_v<typename DeviceStorage<H>::type, S>)
        p.scalar_bits[1] = scalar_as<H>(call.attrs.value);
    });
    launch<ew::CastOp<S>, S, S>(p, {});
  });
}

void where(const KernelCall& call, const Plan& p) {
  EMBER_CHECK(call.inputs.size() == 3, "where: internal error: ", call.inputs.size(), " inputs");
  EMBER_CHECK(call.inputs[0].dtype() == kBool, "where: internal error: condition is ",
              dtype_name(call.inputs[0].dtype()));
  const DType t = call.inputs[1].dtype();
  check_same_dtype(call, t, 2);
  EMBER_CHECK(call.out.dtype() == t, "where: internal error: output is ",
              dtype_name(call.out.dtype()), ", expected ", dtype_name(t));
  visit_allowed<op_info(OpId::where).dtypes>(t, OpId::where, [&](auto tag) {
    using S = typename decltype(tag)::type;
    launch<ew::WhereOp<ew::compute_t<S>, S>, S, bool, S, S>(p, {});
  });
}

}  // namespace

void pointwise(const KernelCall& call) {
  const Plan p = make_plan(call);
  if (call.op == OpId::fill) return fill(call, p);
  if (call.op == OpId::cast) return cast(call, p);
  if (call.op == OpId::where) return where(call, p);
  const bool handled = visit_elementwise(call.op, call.attrs, [&](auto op_c, const auto& f) {
    constexpr OpId op = decltype(op_c)::value;
    if constexpr (op != OpId::cast && op != OpId::where) apply_elementwise<op>(call, p, f);
  });
  EMBER_CHECK(handled, op_name(call.op), ": internal error: not an elementwise op");
}

}  // namespace ember::kernels::cuda
