// Launcher of cross_entropy_fused.cuh, with the eager cross-entropy launcher's launch shape
// (kernels/cuda/cross_entropy.cu) so both fold each row identically.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cross_entropy_fused.cuh"
#include "kernels/cuda/cross_entropy_fused.h"
#include "kernels/cuda/launch_util.h"

namespace ember::kernels::cuda {

void cross_entropy_fused(const CrossEntropyFusedCall& call) {
  const char* name = "cross_entropy_fused";
  EMBER_CHECK(call.n >= 0 && call.c > 0, name, ": bad shape [", call.n, ",", call.c, "]");
  if (call.n == 0) return;
  EMBER_CHECK(call.logits && call.target && call.grad && call.dlogits, name,
              ": null logits, target, grad or dlogits");
  DeviceGuard guard(call.device);
  cudaStream_t s = stream(call.device);
  DeviceErrorFlag* flag = device_error_flag(call.device);
  const int64_t C = call.c;
  const int64_t per_row = C <= 1024 ? 32 : C <= 8192 ? 256 : 1024;
  const dim3 block(static_cast<unsigned>(per_row),
                   static_cast<unsigned>(std::max<int64_t>(1, 256 / per_row)));
  const dim3 grid(static_cast<unsigned>(ceil_div(call.n, block.y)));
  visit_float_dtype(call.dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    dev::cross_entropy_fused_kernel<T, Acc><<<grid, block, 0, s>>>(
        static_cast<const T*>(call.logits), call.target, static_cast<const T*>(call.grad),
        call.grad_stride, static_cast<T*>(call.loss), static_cast<T*>(call.dlogits), call.n, C,
        call.ignore_index, static_cast<Acc>(call.label_smoothing), flag);
    check_launch(name);
  });
}

}  // namespace ember::kernels::cuda
