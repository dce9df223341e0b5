// arange on CUDA: element i = cast(range_start + i * range_step), computed in double like the
// CPU kernel. The explicit _rn operations keep nvcc from fusing the two into an FMA, whose
// single rounding would differ from the host's in the last bit.
#include <cstdint>

#include "core/dispatch.h"
#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/pointwise.cuh"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class S>
__global__ void __launch_bounds__(kThreads)
    arange_kernel(S* out, int64_t n, double start, double step) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = elementwise::convert<S>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
}

}  // namespace

void arange(const KernelCall& call) {
  const Tensor& out = call.out;
  EMBER_CHECK(out.is_contiguous(), "arange: internal error: output must be contiguous");
  const int64_t n = out.numel();
  if (n == 0) return;
  const int dev = out.device().index;
  visit_numeric_dtype(out.dtype(), "arange", [&](auto tag) {
    using S = typename decltype(tag)::type;
    arange_kernel<S><<<grid_stride_blocks(n, kThreads, dev), kThreads, 0, stream(dev)>>>(
        static_cast<S*>(out.raw_data()), n, call.attrs.range_start, call.attrs.range_step);
  });
  check_launch("arange");
}

}  // namespace ember::kernels::cuda
