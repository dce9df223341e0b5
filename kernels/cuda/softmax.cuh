#pragma once
// softmax and log_softmax over one dim of a contiguous tensor viewed as [outer, C, inner].
// `out` may be the very memory of `in` (each element is read and written by one thread).
// Both passes read the input: the first folds a running (max, sum of exp(x - max)) per row
// (LseOp, one exp per element), the second writes exp(x - max) / sum or x - max - log(sum).
//  - inner == 1: rows are contiguous; a warp (short rows) or a block (long rows) per row.
//  - inner == 1 with a few long rows: chunks of each row over many blocks, in two kernels.
//  - inner > 1:  threads along x take neighbouring columns (coalesced), threads along y split C.
#include "kernels/cuda/block_reduce.cuh"

namespace ember::kernels::cuda::dev {

template <class Acc>
__device__ __forceinline__ Acc softmax_value(Acc x, const LseState<Acc>& st, Acc log_sum,
                                             bool log_out) {
  return log_out ? x - st.m - log_sum : exp_acc(x - st.m) / st.s;
}

// blockDim = (threads per row: a multiple of 32, rows per block).
template <class T, class Acc>
__global__ void softmax_rows_kernel(const T* in, T* out, int64_t rows, int64_t C, bool log_out) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const LseOp<Acc> op;
  LseState<Acc> st = op.identity();
  const T* x = in + row * C;
  if (row < rows) fold_contiguous<LseOp<Acc>, Acc>(op, st, x, 0, C, threadIdx.x, blockDim.x);
  st = row_allreduce(op, st);
  if (row >= rows) return;
  const Acc log_sum = log_acc(st.s);
  T* y = out + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    y[c] = from_acc<T>(softmax_value(to_acc<Acc>(x[c]), st, log_sum, log_out));
}

// blockDim = (neighbouring columns, a power of two splitting C); a column is one (outer, inner).
template <class T, class Acc>
__global__ void softmax_columns_kernel(const T* in, T* out, int64_t columns, int64_t C,
                                       int64_t inner, bool log_out) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const LseOp<Acc> op;
  LseState<Acc> st = op.identity();
  int64_t base = 0;
  if (col < columns) {
    const int64_t o = col / inner;
    base = o * C * inner + (col - o * inner);
    for (int64_t c = threadIdx.y; c < C; c += blockDim.y)
      op.step(st, to_acc<Acc>(in[base + c * inner]), c);
  }
  st = column_allreduce(op, st);
  if (col >= columns) return;
  const Acc log_sum = log_acc(st.s);
  for (int64_t c = threadIdx.y; c < C; c += blockDim.y) {
    const int64_t i = base + c * inner;
    out[i] = from_acc<T>(softmax_value(to_acc<Acc>(in[i]), st, log_sum, log_out));
  }
}

// Few long rows (grid = (splits, rows)): each block folds one chunk of a row into a partial state.
template <class T, class Acc>
__global__ void softmax_partial_kernel(const T* in, LseState<Acc>* partial, int64_t C,
                                       int64_t chunk) {
  const LseOp<Acc> op;
  LseState<Acc> st = op.identity();
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t r1 = r0 + chunk < C ? r0 + chunk : C;
  fold_contiguous<LseOp<Acc>, Acc>(op, st, in + blockIdx.y * C, r0, r1, threadIdx.x, blockDim.x);
  st = row_allreduce(op, st);
  if (threadIdx.x == 0) partial[blockIdx.y * gridDim.x + blockIdx.x] = st;
}

// Second kernel of the split path (grid = (splits, rows)): every block combines its row's
// partials (a few hundred at most) and writes its chunk.
template <class T, class Acc>
__global__ void softmax_apply_kernel(const T* in, T* out, const LseState<Acc>* partial, int64_t C,
                                     int64_t chunk, bool log_out) {
  const LseOp<Acc> op;
  LseState<Acc> st = op.identity();
  const LseState<Acc>* p = partial + blockIdx.y * gridDim.x;
  for (unsigned k = threadIdx.x; k < gridDim.x; k += blockDim.x) st = op.combine(st, p[k]);
  st = row_allreduce(op, st);
  const Acc log_sum = log_acc(st.s);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t r1 = r0 + chunk < C ? r0 + chunk : C;
  const int64_t base = static_cast<int64_t>(blockIdx.y) * C;
  for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
    out[base + r] = from_acc<T>(softmax_value(to_acc<Acc>(in[base + r]), st, log_sum, log_out));
}

}  // namespace ember::kernels::cuda::dev
