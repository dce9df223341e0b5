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

// ---- the mean- and sum-reduced loss ---------------------------------------------------------
//
// cross_entropy with reduction mean or sum: the row losses, their sum and the count of targets
// that are not ignore_index, finished inside the launch, so the loss is one kernel instead of
// the per-row kernel plus four reductions and divisions. One kernel again serves the eager
// forward (kLoss), the eager backward (kGrad) and the JIT's fused pair (both), so the pair equals
// the eager kernels bit for bit:
//  - rows: row group ty of block b takes rows b * R + ty, then + gridDim.x * R, ... (R =
//    blockDim.y), the same rows in every variant, each computed exactly as the per-row kernel does;
//  - the loss: each group's leader adds its rows' losses in that order (Acc), the block adds its
//    groups' sums in ty order; with one block that is the total, else each block stores its sum
//    as a partial and the block taking the last ticket folds the partials (thread t: t, t + nt,
//    ..., then a halving tree), so the order depends on the launch shape only;
//  - the count is exact (integers), however it is added;
//  - the gradient: every row gets grad * (softmax - target distribution) with grad the loss's
//    gradient divided by the count (mean) or as it is (sum). A one-block launch counts the targets
//    as it goes and writes the gradient rows afterwards; in a wider one each block counts all the
//    targets first (count_in null), or, for very long batches, reads the count that
//    count_targets_kernel stored before it.
// A target outside [0, C) raises the device error flag and its row adds 0 (and is counted).
// The loss's gradient is grad[0], or grad_value when grad is null (a 0-dim host tensor, read on
// the host like the pointwise kernels' inline scalars, so a compiled step keeps no device memory
// for its constant seed).

// Sum over the block's threads in a fixed order (a halving tree over blockDim.x * blockDim.y
// threads, a power of two); every thread gets the total. `cell` holds one T per thread.
template <class T>
__device__ __forceinline__ T block_tree_sum(T v, T* cell, int tid, int nt) {
  cell[tid] = v;
  __syncthreads();
  for (int h = nt / 2; h > 0; h >>= 1) {
    if (tid < h) cell[tid] += cell[tid + h];
    __syncthreads();
  }
  const T total = cell[0];
  __syncthreads();
  return total;
}

// The number of targets that are not ignore_index, counted by one block over all N targets:
// each block of a wide launch counts for itself instead of reading a count a kernel of its own
// stored first (one launch fewer; N int64 loads per block from L2, coalesced). Integers: exact
// in any order. `cell` holds one long long per thread.
__device__ __forceinline__ long long count_not_ignored(const int64_t* __restrict__ target,
                                                       int64_t N, int64_t ignore_index, int tid,
                                                       int nt) {
  // kBatch loads issued before any is used: a loop of single loads (a bounds check between
  // them) waits one memory round trip per load, which made counting in every block of a wide
  // launch cost about as much as the row kernel itself; batched, the count adds little to it.
  constexpr int kBatch = 16;
  long long c = 0;
  for (int64_t base = tid; base < N; base += int64_t{kBatch} * nt) {
    int64_t v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = base + int64_t{u} * nt;
      v[u] = i < N ? target[i] : ignore_index;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) c += v[u] != ignore_index;
  }
  return c;
}

__device__ __forceinline__ long long block_count_targets(const int64_t* __restrict__ target,
                                                         int64_t N, int64_t ignore_index,
                                                         long long* cell, int tid, int nt) {
  return block_tree_sum(count_not_ignored(target, N, ignore_index, tid, nt), cell, tid, nt);
}

// The number of targets that are not ignore_index, into *count: one block.
__global__ void count_targets_kernel(const int64_t* __restrict__ target, int64_t N,
                                     int64_t ignore_index, long long* __restrict__ count) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const long long c = count_not_ignored(target, N, ignore_index, tid, nt);
  __shared__ long long cell[1024];
  cell[tid] = c;
  __syncthreads();
  for (int h = nt / 2; h > 0; h >>= 1) {
    if (tid < h) cell[tid] += cell[tid + h];
    __syncthreads();
  }
  if (tid == 0) *count = cell[0];
}

// Bounded for 1024 threads (the one-block shape): float64 would otherwise ask for more
// registers than a 1024-thread block has.
template <class T, class Acc, bool kLoss, bool kGrad>
__global__ void __launch_bounds__(1024)
    cross_entropy_reduced_kernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                                 const T* __restrict__ grad, Acc grad_value, T* __restrict__ loss,
                                 T* __restrict__ dx, int64_t N, int64_t C, int64_t ignore_index,
                                 Acc smoothing, bool mean, const long long* __restrict__ count_in,
                                 double* partial_sum, long long* partial_count, unsigned* ticket,
                                 DeviceErrorFlag* flag) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
  const int rows = blockDim.y;
  // A one-block mean with its gradient counts the targets as it goes: each row group keeps its
  // (at most kHeld) rows' logsumexp and target, the block adds the counts, and only then are the
  // gradient rows written (the logits read again, from cache). That saves a round trip to memory
  // and a block-wide tree before the rows, which doubled the kernel's time at 64 rows.
  constexpr int kHeld = 4;  // rows per row group of a one-block launch (reduced_shape's rule)
  const bool defer = kGrad && mean && gridDim.x == 1;
  Acc scale = Acc(0);
  if (kGrad) {
    scale = grad != nullptr ? to_acc<Acc>(grad[0]) : grad_value;
    if (mean && !defer) {
      __shared__ long long count_scratch[1024];
      const long long n_counted = count_in != nullptr ? *count_in
                                                      : block_count_targets(target, N, ignore_index,
                                                                            count_scratch, tid, nt);
      scale = scale / static_cast<Acc>(n_counted);
    }
  }
  const Acc off = smoothing / static_cast<Acc>(C), on = Acc(1) - smoothing;
  // Row `row`'s gradient from its logsumexp (the row group's threads together).
  auto write_row = [&](int64_t row, int64_t t, Acc lse, Acc g) {
    const T* x = logits + row * C;
    T* o = dx + row * C;
    if (t == ignore_index || t < 0 || t >= C) {
      for (int64_t j = threadIdx.x; j < C; j += blockDim.x) o[j] = from_acc<T>(Acc(0));
      return;
    }
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const Acc p = exp_acc(to_acc<Acc>(x[j]) - lse);
      o[j] = from_acc<T>(g * (p - (j == t ? on : Acc(0)) - off));
    }
  };

  const LseOp<Acc> op;
  Acc my_loss = Acc(0);
  long long my_count = 0;
  Acc held_lse[kHeld];
  int64_t held_t[kHeld];
  const int64_t step = static_cast<int64_t>(gridDim.x) * rows;
  int64_t base = static_cast<int64_t>(blockIdx.x) * rows;
  // The first kHeld passes unrolled (the held values stay in registers), then any others.
#pragma unroll
  for (int it = 0; it < kHeld + 1; ++it) {
    for (; base < N; base += step) {
      const int64_t row = base + threadIdx.y;
      const bool live = row < N;
      const T* x = logits + row * C;
      const int64_t t = live ? target[row] : 0;  // loaded early: its latency overlaps the fold
      LseState<Acc> st = op.identity();
      if (live) fold_contiguous<LseOp<Acc>, Acc>(op, st, x, 0, C, threadIdx.x, blockDim.x);
      st = row_allreduce(op, st);
      Acc sum = Acc(0);
      if (kLoss && smoothing != Acc(0)) {
        const SumOp<Acc> sum_op;
        if (live) fold_contiguous<SumOp<Acc>, Acc>(sum_op, sum, x, 0, C, threadIdx.x, blockDim.x);
        sum = row_allreduce(sum_op, sum);
      }
      if (it < kHeld) {
        held_lse[it < kHeld ? it : 0] = op.value(st);
        held_t[it < kHeld ? it : 0] = t;
      }
      if (live) {
        const bool ignored = t == ignore_index;
        const bool bad = !ignored && (t < 0 || t >= C);
        if (threadIdx.x == 0) {
          if (bad) raise_device_error(flag, kCrossEntropyTarget, t, C);
          my_count += !ignored;
          if (kLoss && !ignored && !bad) {
            Acc l = op.value(st) - (Acc(1) - smoothing) * to_acc<Acc>(x[t]);
            if (smoothing != Acc(0)) l -= smoothing / static_cast<Acc>(C) * sum;
            my_loss += l;
          }
        }
        if (kGrad && !defer) write_row(row, t, op.value(st), scale);
      }
      if (it < kHeld) {  // one pass per unrolled step; the last step takes the rest
        base += step;
        break;
      }
    }
  }

  // The block's sums: group leaders' in ty order.
  __shared__ Acc group_loss[32];
  __shared__ long long group_count[32];
  if (!kLoss && !defer) return;
  if (threadIdx.x == 0) {
    group_loss[threadIdx.y] = my_loss;
    group_count[threadIdx.y] = my_count;
  }
  __syncthreads();
  Acc block_loss = Acc(0);
  long long block_count = 0;
  if (tid == 0)
    for (int r = 0; r < rows; ++r) {
      block_loss += group_loss[r];
      block_count += group_count[r];
    }
  if (defer) {
    __shared__ long long total;
    if (tid == 0) total = block_count;
    __syncthreads();
    const Acc g = scale / static_cast<Acc>(total);
    base = threadIdx.y;
#pragma unroll
    for (int it = 0; it < kHeld; ++it, base += rows)
      if (base < N) write_row(base, held_t[it], held_lse[it], g);
  }
  if (!kLoss) return;
  if (gridDim.x == 1) {
    if (tid == 0)
      loss[0] = from_acc<T>(mean ? block_loss / static_cast<Acc>(block_count) : block_loss);
    return;
  }
  __shared__ bool last;
  if (tid == 0) {
    partial_sum[blockIdx.x] = static_cast<double>(block_loss);
    partial_count[blockIdx.x] = block_count;
    __threadfence();  // the partials are visible before the ticket is taken
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  Acc total = Acc(0);
  long long count = 0;
  for (unsigned k = tid; k < gridDim.x; k += nt) {
    // Written by other blocks of this launch: bypass the (incoherent) L1.
    total += static_cast<Acc>(*static_cast<const volatile double*>(&partial_sum[k]));
    count += *static_cast<const volatile long long*>(&partial_count[k]);
  }
  __shared__ Acc total_cell[1024];
  __shared__ long long count_cell[1024];
  total = block_tree_sum(total, total_cell, tid, nt);
  count = block_tree_sum(count, count_cell, tid, nt);
  if (tid == 0) {
    loss[0] = from_acc<T>(mean ? total / static_cast<Acc>(count) : total);
    *ticket = 0;  // for the next launch (CUDA-graph replays included: no memset needed)
  }
}

// The same loss for rows of at most kThreadRowMaxC classes, one thread per row: a warp per row
// leaves 22 of 32 lanes idle at 10 classes and spends its time in shuffles. 1-D blocks of 256
// threads; thread t of block b takes rows b * 256 + t, then + gridDim.x * 256, ... and folds its
// row's classes in order. The loss: each thread adds its rows' losses in that order, the block
// adds its threads' sums by a halving tree, and several blocks finish through the ticket as in
// cross_entropy_reduced_kernel. A one-block launch (at most kHeld rows per thread) counts the
// targets as it goes and writes the gradient rows afterwards; a wider one counts in every block
// (count_in null) or reads count_in.
inline constexpr int kThreadRowMaxC = 32;

template <class T, class Acc, bool kLoss, bool kGrad>
__global__ void __launch_bounds__(256)
    cross_entropy_rowthread_kernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                                   const T* __restrict__ grad, Acc grad_value, T* __restrict__ loss,
                                   T* __restrict__ dx, int64_t N, int64_t C, int64_t ignore_index,
                                   Acc smoothing, bool mean, const long long* __restrict__ count_in,
                                   double* partial_sum, long long* partial_count, unsigned* ticket,
                                   DeviceErrorFlag* flag) {
  constexpr int kHeld = 4;
  const int tid = threadIdx.x, nt = blockDim.x;
  const bool defer = kGrad && mean && gridDim.x == 1;
  __shared__ Acc loss_cell[256];
  __shared__ long long count_cell[256];
  Acc scale = Acc(0);
  if (kGrad) {
    scale = grad != nullptr ? to_acc<Acc>(grad[0]) : grad_value;
    if (mean && !defer)
      scale = scale / static_cast<Acc>(
                          count_in != nullptr
                              ? *count_in
                              : block_count_targets(target, N, ignore_index, count_cell, tid, nt));
  }
  const Acc off = smoothing / static_cast<Acc>(C), on = Acc(1) - smoothing;
  // The loops over C read the row where it is used: loading the row into registers first
  // (32 predicated loads) costs registers and predication and made the kernel slower.
  auto write_row = [&](int64_t row, int64_t t, Acc lse, Acc g) {
    const T* x = logits + row * C;
    T* o = dx + row * C;
    const bool zero = t == ignore_index || t < 0 || t >= C;
    for (int64_t j = 0; j < C; ++j) {
      const Acc p = exp_acc(to_acc<Acc>(x[j]) - lse);
      o[j] = from_acc<T>(zero ? Acc(0) : g * (p - (j == t ? on : Acc(0)) - off));
    }
  };
  const LseOp<Acc> op;
  Acc my_loss = Acc(0);
  long long my_count = 0;
  Acc held_lse[kHeld];
  int64_t held_t[kHeld];
  const int64_t step = static_cast<int64_t>(gridDim.x) * nt;
  int64_t row = static_cast<int64_t>(blockIdx.x) * nt + tid;
#pragma unroll
  for (int it = 0; it < kHeld + 1; ++it) {
    for (; row < N; row += step) {
      const T* x = logits + row * C;
      const int64_t t = target[row];
      LseState<Acc> st = op.identity();
      Acc sum = Acc(0);
      for (int64_t j = 0; j < C; ++j) {
        const Acc v = to_acc<Acc>(x[j]);
        op.step(st, v, j);
        sum += v;
      }
      const Acc lse = op.value(st);
      const bool ignored = t == ignore_index;
      const bool bad = !ignored && (t < 0 || t >= C);
      if (bad) raise_device_error(flag, kCrossEntropyTarget, t, C);
      my_count += !ignored;
      if (kLoss && !ignored && !bad) {
        Acc l = lse - (Acc(1) - smoothing) * to_acc<Acc>(x[t]);
        if (smoothing != Acc(0)) l -= smoothing / static_cast<Acc>(C) * sum;
        my_loss += l;
      }
      if (it < kHeld) {
        held_lse[it < kHeld ? it : 0] = lse;
        held_t[it < kHeld ? it : 0] = t;
      }
      if (kGrad && !defer) write_row(row, t, lse, scale);
      if (it < kHeld) {
        row += step;
        break;
      }
    }
  }
  if (!kLoss && !defer) return;
  const Acc block_loss = block_tree_sum(my_loss, loss_cell, tid, nt);
  const long long block_count = block_tree_sum(my_count, count_cell, tid, nt);
  if (defer) {
    const Acc g = scale / static_cast<Acc>(block_count);
    row = tid;
#pragma unroll
    for (int it = 0; it < kHeld; ++it, row += nt)
      if (row < N) write_row(row, held_t[it], held_lse[it], g);
  }
  if (!kLoss) return;
  if (gridDim.x == 1) {
    if (tid == 0)
      loss[0] = from_acc<T>(mean ? block_loss / static_cast<Acc>(block_count) : block_loss);
    return;
  }
  __shared__ bool last;
  if (tid == 0) {
    partial_sum[blockIdx.x] = static_cast<double>(block_loss);
    partial_count[blockIdx.x] = block_count;
    __threadfence();  // the partials are visible before the ticket is taken
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  Acc total = Acc(0);
  long long count = 0;
  for (unsigned k = tid; k < gridDim.x; k += nt) {
    total += static_cast<Acc>(*static_cast<const volatile double*>(&partial_sum[k]));
    count += *static_cast<const volatile long long*>(&partial_count[k]);
  }
  total = block_tree_sum(total, loss_cell, tid, nt);
  count = block_tree_sum(count, count_cell, tid, nt);
  if (tid == 0) {
    loss[0] = from_acc<T>(mean ? total / static_cast<Acc>(count) : total);
    *ticket = 0;
  }
}

}  // namespace ember::kernels::cuda::dev
