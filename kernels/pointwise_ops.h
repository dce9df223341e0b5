#pragma once
// Host-side glue between the op table and the elementwise functors: builds each op's functor
// from its attrs and visits the functor-backed ops of core/ops.def. The CPU loops and the CUDA
// launcher both switch through visit_elementwise, so adding an elementwise op to the table and
// a functor to pointwise_functors.h is all it takes.
#include <type_traits>

#include "core/op.h"
#include "kernels/pointwise_functors.h"

namespace ember::kernels {

template <class F>
F make_functor(const Attrs&) {
  return F{};
}
template <>
inline pw::gelu make_functor<pw::gelu>(const Attrs& a) {
  return pw::gelu{a.approximate_tanh};
}
template <>
inline pw::gelu_backward make_functor<pw::gelu_backward>(const Attrs& a) {
  return pw::gelu_backward{a.approximate_tanh};
}
template <>
inline pw::clamp make_functor<pw::clamp>(const Attrs& a) {
  return pw::clamp{a.lo.to_double(), a.hi.to_double(), a.has_lo, a.has_hi};
}

template <OpId Op>
using OpConstant = std::integral_constant<OpId, Op>;

// Calls f(OpConstant<op>{}, functor) when `op` is a Unary, Binary or Ternary op of the table
// (cast and where included: callers that treat them specially branch on the constant first).
// Returns false for every other op.
template <class Fn>
bool visit_elementwise(OpId op, const Attrs& a, Fn&& f) {
  switch (op) {
#define EMBER_EW_CASE(name)                                 \
  case OpId::name:                                          \
    f(OpConstant<OpId::name>{}, make_functor<pw::name>(a)); \
    return true;
#define EMBER_EW_Unary(name) EMBER_EW_CASE(name)
#define EMBER_EW_Binary(name) EMBER_EW_CASE(name)
#define EMBER_EW_Ternary(name) EMBER_EW_CASE(name)
#define EMBER_EW_Nullary(name)
#define EMBER_EW_Reduce(name)
#define EMBER_EW_Matmul(name)
#define EMBER_EW_Softmax(name)
#define EMBER_EW_Loss(name)
#define EMBER_EW_Index(name)
#define EMBER_EW_Cat(name)
#define EMBER_EW_View(name)
#define EMBER_EW_Factory(name)
#define EMBER_EW_Random(name)
#define EMBER_EW_Transfer(name)
#define EMBER_EW_MultiTensor(name)
#define EMBER_OP(name, kind, dtypes, rule) EMBER_EW_##kind(name)
#include "core/ops.def"
#undef EMBER_OP
#undef EMBER_EW_CASE
    default:
      return false;
  }
}

}  // namespace ember::kernels
