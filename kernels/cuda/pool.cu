// max_pool2d and its backward row on CUDA: one thread per output (forward) or input element
// (backward), the window arithmetic of kernels/max_pool.h, so results equal the CPU kernel's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/max_pool.h"

namespace ember::kernels::cuda {
namespace {

template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T, class I>
__global__ void max_pool_forward(const T* __restrict__ x, T* __restrict__ y, PoolGeometry<I> g,
                                 I total) {
  const I out = g.oh * g.ow;
  for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x * blockDim.x)) {
    const I p = i / out, r = i - p * out, oy = r / g.ow, ox = r - oy * g.ow;
    const T* plane = x + static_cast<int64_t>(p) * g.h * g.w;
    const I at = window_argmax<Acc<T>>(plane, g, oy, ox);
    y[i] = at < 0 ? T(0) : plane[at];
  }
}

// Overlapping windows: one thread per input element gathers the windows it won.
template <class T, class I>
__global__ void max_pool_backward_gather(const T* __restrict__ grad, const T* __restrict__ x,
                                         T* __restrict__ dx, PoolGeometry<I> g, I total) {
  const I in = g.h * g.w, out = g.oh * g.ow;
  for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x * blockDim.x)) {
    const I p = i / in, r = i - p * in, yy = r / g.w, xx = r - yy * g.w;
    dx[i] = static_cast<T>(pool_input_grad<Acc<T>>(x + static_cast<int64_t>(p) * in,
                                                    grad + static_cast<int64_t>(p) * out, g, yy,
                                                    xx));
  }
}

// Disjoint windows: one thread per window writes all of it (pool_window_grad).
template <class T, class I>
__global__ void max_pool_backward_windows(const T* __restrict__ grad, const T* __restrict__ x,
                                          T* __restrict__ dx, PoolGeometry<I> g, I total) {
  const I in = g.h * g.w, out = g.oh * g.ow;
  for (I i = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); i < total;
       i += static_cast<I>(gridDim.x * blockDim.x)) {
    const I p = i / out, r = i - p * out, oy = r / g.ow, ox = r - oy * g.ow;
    const int64_t base = static_cast<int64_t>(p) * in;
    pool_window_grad<Acc<T>>(x + base, grad + static_cast<int64_t>(p) * out, dx + base, g, oy, ox);
  }
}

template <class T, class I>
void launch(const KernelCall& call, int dev) {
  const bool fwd = call.op == OpId::max_pool2d;
  const Tensor& x = fwd ? call.inputs[0] : call.inputs[1];
  const Shape ys = fwd ? call.out.sizes() : call.inputs[0].sizes();
  const Attrs& a = call.attrs;
  auto c = [](int64_t v) { return static_cast<I>(v); };
  const PoolGeometry<I> g{c(x.size(2)),         c(x.size(3)),         c(ys[2]),
                          c(ys[3]),             c(a.window[0]),       c(a.window[1]),
                          c(a.conv_stride[0]),  c(a.conv_stride[1]),  c(a.conv_padding[0]),
                          c(a.conv_padding[1]), c(a.conv_dilation[0]), c(a.conv_dilation[1])};
  constexpr int kThreads = 256;
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(call.out.raw_data());
  const cudaStream_t st = stream(dev);
  if (fwd) {
    const I total = c(call.out.numel());
    max_pool_forward<T, I>
        <<<grid_stride_blocks(total, kThreads, dev), kThreads, 0, st>>>(px, po, g, total);
  } else if (g.disjoint()) {
    if (!g.tiles()) EMBER_CUDA_CHECK(cudaMemsetAsync(po, 0, call.out.nbytes(), st));
    const I total = c(call.inputs[0].numel());
    if (total > 0)
      max_pool_backward_windows<T, I><<<grid_stride_blocks(total, kThreads, dev), kThreads, 0, st>>>(
          static_cast<const T*>(call.inputs[0].raw_data()), px, po, g, total);
  } else {
    const I total = c(call.out.numel());
    max_pool_backward_gather<T, I><<<grid_stride_blocks(total, kThreads, dev), kThreads, 0, st>>>(
        static_cast<const T*>(call.inputs[0].raw_data()), px, po, g, total);
  }
  check_launch(op_name(call.op).data());
}

template <class T>
void launch_indexed(const KernelCall& call, int dev) {
  // 32-bit index arithmetic (far cheaper on the GPU) whenever every index fits.
  const int64_t biggest = std::max(call.out.numel(), call.inputs[0].numel());
  if (biggest < (int64_t{1} << 30))
    launch<T, int32_t>(call, dev);
  else
    launch<T, int64_t>(call, dev);
}

}  // namespace

void pool(const KernelCall& call) {
  for (const Tensor& t : call.inputs)
    EMBER_CHECK(t.is_contiguous(), op_name(call.op), ": the CUDA kernel takes contiguous tensors");
  if (call.out.numel() == 0) return;
  const int dev = call.out.device().index;
  switch (call.out.dtype()) {
    case kFloat32:
      return launch_indexed<float>(call, dev);
    case kFloat64:
      return launch_indexed<double>(call, dev);
    case kFloat16:
      return launch_indexed<__half>(call, dev);
    case kBFloat16:
      return launch_indexed<__nv_bfloat16>(call, dev);
    default:
      EMBER_FAIL(op_name(call.op), ": unsupported dtype ", dtype_name(call.out.dtype()));
  }
}

}  // namespace ember::kernels::cuda
