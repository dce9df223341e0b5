// max_pool2d and its backward row on CUDA: one thread per output (forward) or input element
// (backward), the window arithmetic of kernels/max_pool.h, so results equal the CPU kernel's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/max_pool.h"

namespace ember::kernels::cuda {
namespace {

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__global__ void max_pool_forward(const T* __restrict__ x, T* __restrict__ y, PoolGeometry g,
                                 int64_t total) {
  const int64_t out = g.oh * g.ow;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / out, r = i - p * out, oy = r / g.ow, ox = r - oy * g.ow;
    const T* plane = x + p * g.h * g.w;
    const int64_t at = window_argmax<Acc<T>>(plane, g, oy, ox);
    y[i] = at < 0 ? T(0) : plane[at];
  }
}

template <class T>
__global__ void max_pool_backward(const T* __restrict__ grad, const T* __restrict__ x,
                                  T* __restrict__ dx, PoolGeometry g, int64_t total) {
  const int64_t in = g.h * g.w, out = g.oh * g.ow;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / in, r = i - p * in, yy = r / g.w, xx = r - yy * g.w;
    dx[i] = static_cast<T>(pool_input_grad<Acc<T>>(x + p * in, grad + p * out, g, yy, xx));
  }
}

template <class T>
void launch(const KernelCall& call, int dev) {
  const bool fwd = call.op == OpId::max_pool2d;
  const Tensor& x = fwd ? call.inputs[0] : call.inputs[1];
  const Shape ys = fwd ? call.out.sizes() : call.inputs[0].sizes();
  const Attrs& a = call.attrs;
  const PoolGeometry g{x.size(2),        x.size(3),        ys[2],
                       ys[3],            a.window[0],      a.window[1],
                       a.conv_stride[0], a.conv_stride[1], a.conv_padding[0],
                       a.conv_padding[1], a.conv_dilation[0], a.conv_dilation[1]};
  const int64_t total = call.out.numel();
  constexpr int kThreads = 256;
  const auto blocks = grid_stride_blocks(total, kThreads, dev);
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(call.out.raw_data());
  if (fwd) {
    max_pool_forward<T><<<blocks, kThreads, 0, stream(dev)>>>(px, po, g, total);
  } else {
    max_pool_backward<T><<<blocks, kThreads, 0, stream(dev)>>>(
        static_cast<const T*>(call.inputs[0].raw_data()), px, po, g, total);
  }
  check_launch(op_name(call.op).data());
}

}  // namespace

void pool(const KernelCall& call) {
  for (const Tensor& t : call.inputs)
    EMBER_CHECK(t.is_contiguous(), op_name(call.op), ": the CUDA kernel takes contiguous tensors");
  if (call.out.numel() == 0) return;
  const int dev = call.out.device().index;
  switch (call.out.dtype()) {
    case kFloat32:
      return launch<float>(call, dev);
    case kFloat64:
      return launch<double>(call, dev);
    case kFloat16:
      return launch<__half>(call, dev);
    case kBFloat16:
      return launch<__nv_bfloat16>(call, dev);
    default:
      EMBER_FAIL(op_name(call.op), ": unsupported dtype ", dtype_name(call.out.dtype()));
  }
}

}  // namespace ember::kernels::cuda
