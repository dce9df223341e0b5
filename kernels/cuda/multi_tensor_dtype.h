#pragma once
// The storage type of each tensor in a multi-tensor launch's table (multi_tensor.cuh's updates,
// multi_norm.cu), and the code of a tensor's dtype. Host and device code; no kernels, so any
// number of .cu files can include it.
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"

namespace ember::kernels::cuda {
namespace dev {

enum MultiTensorDType : unsigned char { kMtFloat32, kMtFloat64, kMtFloat16, kMtBFloat16 };

}  // namespace dev

// The table's code of tensor `i`'s dtype; another dtype is an ember::Error naming `op` and what
// the tensor is to it ("sgd_update: parameter 3 has dtype int64; expected a floating dtype").
inline dev::MultiTensorDType multi_tensor_dtype(DType t, const char* op, const char* what,
                                                int64_t i) {
  switch (t) {
    case DType::Float32:
      return dev::kMtFloat32;
    case DType::Float64:
      return dev::kMtFloat64;
    case DType::Float16:
      return dev::kMtFloat16;
    case DType::BFloat16:
      return dev::kMtBFloat16;
    default:
      EMBER_FAIL(op, ": ", what, " ", i, " has dtype ", dtype_name(t),
                 "; expected a floating dtype");
  }
}

}  // namespace ember::kernels::cuda
