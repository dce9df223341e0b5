#pragma once
// Softmax cross entropy forward and backward over the same logits in one kernel: per row, the
// per-sample loss and the logits gradient, with one logsumexp pass instead of two (the JIT's
// CrossEntropy group; kernels/cuda/cross_entropy.cuh has the eager pair and the formulas).
//
// Each piece of arithmetic is the eager kernels', in the same order, with the same launch shape
// (so the same threads fold the same elements): the loss equals cross_entropy_kernel's and the
// gradient cross_entropy_backward_kernel's bit for bit. Targets equal to ignore_index give a
// zero loss and a zero row; a target outside [0, C) raises the device error flag once (as the
// eager forward does) and gives the same zeros.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_error.cuh"

namespace ember::kernels::cuda::dev {

// blockDim = (threads per row: a multiple of 32, rows per block). grad[row * grad_stride] is the
// incoming gradient of row's loss (stride 0: one scalar for all rows). `loss` may be null.
template <class T, class Acc>
__global__ void cross_entropy_fused_kernel(const T* __restrict__ logits,
                                           const int64_t* __restrict__ target,
                                           const T* __restrict__ grad, int64_t grad_stride,
                                           T* __restrict__ loss, T* __restrict__ dx, int64_t N,
                                           int64_t C, int64_t ignore_index, Acc smoothing,
                                           DeviceErrorFlag* flag) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const LseOp<Acc> op;
  LseState<Acc> st = op.identity();
  const T* x = logits + row * C;
  if (row < N) fold_contiguous<LseOp<Acc>, Acc>(op, st, x, 0, C, threadIdx.x, blockDim.x);
  st = row_allreduce(op, st);
  // The row sum only matters with smoothing; the branch is uniform over the grid, so every
  // thread still reaches row_allreduce's barriers.
  Acc sum = Acc(0);
  if (smoothing != Acc(0)) {
    const SumOp<Acc> sum_op;
    if (row < N) fold_contiguous<SumOp<Acc>, Acc>(sum_op, sum, x, 0, C, threadIdx.x, blockDim.x);
    sum = row_allreduce(sum_op, sum);
  }
  if (row >= N) return;
  const int64_t t = target[row];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= C);
  if (threadIdx.x == 0) {
    Acc l = Acc(0);
    if (bad) {
      raise_device_error(flag, kCrossEntropyTarget, t, C);
    } else if (!ignored) {
      l = op.value(st) - (Acc(1) - smoothing) * to_acc<Acc>(x[t]);
      if (smoothing != Acc(0)) l -= smoothing / static_cast<Acc>(C) * sum;
    }
    if (loss != nullptr) loss[row] = from_acc<T>(l);
  }
  T* o = dx + row * C;
  if (ignored || bad) {
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) o[j] = from_acc<T>(Acc(0));
    return;
  }
  const Acc lse = op.value(st), g = to_acc<Acc>(grad[row * grad_stride]);
  const Acc off = smoothing / static_cast<Acc>(C), on = Acc(1) - smoothing;
  for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
    const Acc p = exp_acc(to_acc<Acc>(x[j]) - lse);
    o[j] = from_acc<T>(g * (p - (j == t ? on : Acc(0)) - off));
  }
}

}  // namespace ember::kernels::cuda::dev
