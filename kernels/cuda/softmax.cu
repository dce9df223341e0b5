// Launchers of softmax.cuh: view the input as [outer, C, inner] around attrs.dim and pick the
// contiguous-rows kernel (inner == 1) or the strided-columns kernel.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/softmax.cuh"

namespace ember::kernels::cuda {

void softmax(const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.out;
  const char* name = op_name(call.op).data();
  const bool log_out = call.op == OpId::log_softmax;
  int64_t outer = 1, C = 1, inner = 1;
  for (int d = 0; d < x.dim(); ++d) {
    if (d < call.attrs.dim)
      outer *= x.size(d);
    else if (d == call.attrs.dim)
      C = x.size(d);
    else
      inner *= x.size(d);
  }
  if (x.numel() == 0) return;
  cudaStream_t s = stream(x.device().index);
  visit_float_dtype(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* in = static_cast<const T*>(x.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    const int device = x.device().index;
    if (inner == 1 && outer < sm_count(device) && C > 16384) {
      // Too few rows to fill the GPU: split each row over blocks (two kernels).
      const int64_t splits =
          std::min<int64_t>(ceil_div(2 * int64_t{sm_count(device)}, outer), ceil_div(C, 8192));
      const int64_t chunk = ceil_div(ceil_div(C, splits), 64) * 64;
      const dim3 grid(static_cast<unsigned>(ceil_div(C, chunk)), static_cast<unsigned>(outer));
      Scratch partial(sizeof(dev::LseState<Acc>) * grid.x * grid.y, device);
      auto* p = static_cast<dev::LseState<Acc>*>(partial.get());
      dev::softmax_partial_kernel<T, Acc><<<grid, 512, 0, s>>>(in, p, C, chunk);
      check_launch(name);
      dev::softmax_apply_kernel<T, Acc><<<grid, 512, 0, s>>>(in, o, p, C, chunk, log_out);
    } else if (inner == 1) {
      // Short rows: a warp each, 8 per block; long rows: several warps or a whole block.
      const int64_t per_row = C <= 1024 ? 32 : C <= 8192 ? 256 : 1024;
      const dim3 block(static_cast<unsigned>(per_row),
                       static_cast<unsigned>(std::max<int64_t>(1, 256 / per_row)));
      const dim3 grid(static_cast<unsigned>(ceil_div(outer, block.y)));
      dev::softmax_rows_kernel<T, Acc><<<grid, block, 0, s>>>(in, o, outer, C, log_out);
    } else {
      // 32 neighbouring columns per block for coalescing; up to 1024 threads split C.
      const int64_t columns = outer * inner;
      const int64_t bx = std::min<int64_t>(32, pow2_ceil(columns));
      const int64_t by = std::min<int64_t>(1024 / bx, pow2_ceil(C));
      const dim3 block(static_cast<unsigned>(bx), static_cast<unsigned>(by));
      const dim3 grid(static_cast<unsigned>(ceil_div(columns, bx)));
      dev::softmax_columns_kernel<T, Acc><<<grid, block, 0, s>>>(in, o, columns, C, inner, log_out);
    }
    check_launch(name);
  });
}

}  // namespace ember::kernels::cuda
