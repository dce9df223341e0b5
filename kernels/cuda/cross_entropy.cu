// Launcher of cross_entropy.cuh.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"

namespace ember::kernels::cuda {

void cross_entropy(const KernelCall& call) {
  const Tensor& logits = call.inputs[0];
  const Tensor& target = call.inputs[1];
  const Tensor& out = call.out;
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  const int device = out.device().index;
  cudaStream_t s = stream(device);
  DeviceErrorFlag* flag = device_error_flag(device);
  // A warp per row up to 1024 classes (8 rows per block), then wider groups.
  const int64_t per_row = C <= 1024 ? 32 : C <= 8192 ? 256 : 1024;
  const dim3 block(static_cast<unsigned>(per_row),
                   static_cast<unsigned>(std::max<int64_t>(1, 256 / per_row)));
  const dim3 grid(static_cast<unsigned>(ceil_div(N, block.y)));
  visit_float_dtype(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    dev::cross_entropy_kernel<T, Acc><<<grid, block, 0, s>>>(
        static_cast<const T*>(logits.raw_data()), static_cast<const int64_t*>(target.raw_data()),
        static_cast<T*>(out.raw_data()), N, C, call.attrs.ignore_index, flag);
    check_launch("cross_entropy");
  });
}

}  // namespace ember::kernels::cuda
