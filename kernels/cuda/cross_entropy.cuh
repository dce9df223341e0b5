#pragma once
// Softmax cross entropy of logits [N, C] (contiguous) against int64 class indices, forward and
// backward, with label smoothing e (target distribution (1 - e) onehot(t) + e / C):
//   forward  loss_i   = lse(x_i) - (1 - e) x_i[t_i] - e/C sum_c x_i[c]
//   backward dx_i[c]  = grad_i (softmax(x_i)[c] - (1 - e) [c == t_i] - e/C)
// 0 where t_i == ignore_index. One row per thread group along x (a warp for short rows, a block
// for long ones), the logsumexp folded in one pass (LseOp). A target outside [0, C) raises the
// device error flag and writes 0: no trap, so the context survives and the host reports the
// error at the next synchronize.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_error.cuh"

namespace ember::kernels::cuda::dev {

// blockDim = (threads per row: a multiple of 32, rows per block). One kernel serves the eager
// forward (kLoss), the eager backward (kGrad) and the JIT's fused pair (both): the same threads
// fold the same elements in the same order in every variant, so the fused pair equals the eager
// kernels bit for bit by construction. grad[row * grad_stride] is the incoming gradient of row's
// loss (stride 0: a mean's expanded scalar); `smoothing` is e. A target equal to ignore_index
// gives a zero loss and a zero row; one outside [0, C) raises the device error flag (once per
// row) and gives the same zeros.
template <class T, class Acc, bool kLoss, bool kGrad>
__global__ void cross_entropy_rows_kernel(const T* __restrict__ logits,
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
  // The row sum only matters to the smoothed loss; the branch is uniform over the grid, so
  // every thread still reaches row_allreduce's barriers.
  Acc sum = Acc(0);
  if (kLoss && smoothing != Acc(0)) {
    const SumOp<Acc> sum_op;
    if (row < N) fold_contiguous<SumOp<Acc>, Acc>(sum_op, sum, x, 0, C, threadIdx.x, blockDim.x);
    sum = row_allreduce(sum_op, sum);
  }
  if (row >= N) return;
  const int64_t t = target[row];
  const bool ignored = t == ignore_index;
  const bool bad = !ignored && (t < 0 || t >= C);
  if (threadIdx.x == 0) {
    if (bad) raise_device_error(flag, kCrossEntropyTarget, t, C);
    if (kLoss && loss != nullptr) {
      Acc l = Acc(0);
      if (!ignored && !bad) {
        l = op.value(st) - (Acc(1) - smoothing) * to_acc<Acc>(x[t]);
        if (smoothing != Acc(0)) l -= smoothing / static_cast<Acc>(C) * sum;
      }
      loss[row] = from_acc<T>(l);
    }
  }
  if (!kGrad) return;
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
