#pragma once
// How layer_norm and layer_norm_backward see their input, shared by the CPU and CUDA kernels:
// rows of the trailing dims from attrs.dim of contiguous memory (meta has checked the rest).
#include <cstdint>

#include "core/dispatch.h"

namespace ember::kernels {

struct NormRows {
  int64_t rows = 0, cols = 0;  // rows is 0 for an empty input: nothing to launch
};

inline NormRows norm_rows(const KernelCall& call) {
  const char* name = op_name(call.op).data();
  for (const Tensor& t : call.inputs)
    EMBER_CHECK(t.is_contiguous(), name, ": input of shape ", t.sizes(), " (strides ",
                t.strides(), ") must be contiguous");
  const Tensor& x = call.inputs.back();
  NormRows r;
  r.cols = 1;
  for (int d = static_cast<int>(call.attrs.dim); d < x.dim(); ++d) r.cols *= x.size(d);
  r.rows = x.numel() == 0 ? 0 : x.numel() / r.cols;
  return r;
}

}  // namespace ember::kernels
