// Launchers of cross_entropy.cuh (cross_entropy and cross_entropy_backward).
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"

namespace ember::kernels::cuda {

void cross_entropy(const KernelCall& call) {
  const bool backward = call.op == OpId::cross_entropy_backward;
  const char* name = backward ? "cross_entropy_backward" : "cross_entropy";
  const Tensor& logits = call.inputs[backward ? 1 : 0];
  const Tensor& target = call.inputs[backward ? 2 : 1];
  const Tensor& out = call.out;
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  EMBER_CHECK(logits.is_contiguous() && target.is_contiguous() && out.is_contiguous(), name,
              ": CUDA kernel needs contiguous logits, target and output");
  const int device = out.device().index;
  cudaStream_t s = stream(device);
  DeviceErrorFlag* flag = device_error_flag(device);
  // A warp per row up to 1024 classes (8 rows per block), then wider groups.
  const int64_t per_row = C <= 1024 ? 32 : C <= 8192 ? 256 : 1024;
  const dim3 block(static_cast<unsigned>(per_row),
                   static_cast<unsigned>(std::max<int64_t>(1, 256 / per_row)));
  const dim3 grid(static_cast<unsigned>(ceil_div(N, block.y)));
  visit_float_dtype(logits.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const Acc e = static_cast<Acc>(call.attrs.label_smoothing);
    const T* x = static_cast<const T*>(logits.raw_data());
    const int64_t* t = static_cast<const int64_t*>(target.raw_data());
    T* y = static_cast<T*>(out.raw_data());
    if (backward) {
      const Tensor& grad = call.inputs[0];
      const int64_t gs = grad.dim() == 0 ? 0 : grad.stride(0);
      dev::cross_entropy_backward_kernel<T, Acc>
          <<<grid, block, 0, s>>>(static_cast<const T*>(grad.raw_data()), gs, x, t, y, N, C,
                                  call.attrs.ignore_index, e, flag);
    } else {
      dev::cross_entropy_kernel<T, Acc>
          <<<grid, block, 0, s>>>(x, t, y, N, C, call.attrs.ignore_index, e, flag);
    }
    check_launch(name);
  });
}

}  // namespace ember::kernels::cuda
