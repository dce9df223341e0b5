#pragma once
// Which pointwise ops a GEMM library epilogue computes exactly as the eager kernels do, so a
// contraction's lowering can fold them into the GEMM call instead of a kernel of its own. Host
// code in every build (the JIT's fusion analysis asks it without a GPU).
#include "core/op.h"

namespace ember::kernels {

enum class EpilogueOp : uint8_t {
  None,     // not an epilogue op: the tail's generated kernel computes it
  BiasAdd,  // add of the product and a bias broadcast over its rows
  Relu,     // relu of the biased product (NaN passes through, as eager's)
};

inline EpilogueOp epilogue_op_of(OpId op) {
  switch (op) {
    case OpId::add:
      return EpilogueOp::BiasAdd;
    case OpId::relu:
      return EpilogueOp::Relu;
    default:
      return EpilogueOp::None;
  }
}

}  // namespace ember::kernels
