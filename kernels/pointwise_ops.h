#pragma once
// Host-side glue between the op table and the elementwise functors: builds each op's functor
// from its attrs (make_functor, generated from the rows' attribute lists) and visits the
// functor-backed ops of core/ops.yaml. The CPU loops and the CUDA launcher both switch through
// visit_elementwise, so a row in the table (with its functor or expression) is all it takes.
#include <type_traits>

#include "core/op.h"
#include "kernels/pointwise_functors.h"

namespace ember::kernels {

template <class F>
F make_functor(const Attrs&) {
  return F{};
}
}  // namespace ember::kernels

// make_functor for the rows with attributes, and EMBER_ELEMENTWISE_OPS.
#include "kernels/generated/make_functor.h"

namespace ember::kernels {

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
    EMBER_ELEMENTWISE_OPS(EMBER_EW_CASE)
#undef EMBER_EW_CASE
    default:
      return false;
  }
}

}  // namespace ember::kernels
