#pragma once
// Per-sample cross entropy of logits [N, C] (contiguous) against int64 class indices:
// loss_i = logsumexp(x_i) - x_i[t_i], 0 where t_i == ignore_index. One row per thread group
// along x (a warp for short rows, a block for long ones), the logsumexp folded in one pass
// (LseOp). A target outside [0, C) raises the device error flag and writes 0: no trap, so the
// context survives and the host reports the error at the next synchronize.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_error.cuh"

namespace ember::kernels::cuda::dev {

// blockDim = (threads per row: a multiple of 32, rows per block).
template <class T, class Acc>
__global__ void cross_entropy_kernel(const T* __restrict__ logits,
                                     const int64_t* __restrict__ target, T* __restrict__ out,
                                     int64_t N, int64_t C, int64_t ignore_index,
                                     DeviceErrorFlag* flag) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const LseOp<Acc> op;
  LseState<Acc> st = op.identity();
  const T* x = logits + row * C;
  if (row < N) fold_contiguous<LseOp<Acc>, Acc>(op, st, x, 0, C, threadIdx.x, blockDim.x);
  st = row_allreduce(op, st);
  if (row >= N || threadIdx.x != 0) return;
  const int64_t t = target[row];
  Acc loss = Acc(0);
  if (t != ignore_index) {
    if (t < 0 || t >= C) {
      raise_device_error(flag, kCrossEntropyTarget, t, C);
    } else {
      loss = op.value(st) - to_acc<Acc>(x[t]);
    }
  }
  out[row] = from_acc<T>(loss);
}

}  // namespace ember::kernels::cuda::dev
