// layer_norm and layer_norm_backward on CUDA (validated by meta, core/meta.cpp): each row of C
// elements (the trailing dims from attrs.dim of a contiguous tensor) by one warp (C <= 1024),
// eight warps (C <= 8192) or a whole block, in one launch: the mean, then the biased variance of
// x - mean (two passes over the row, which stays in cache; no cancellation), then
//   forward:  y = (x - mean) * rstd,  rstd = 1 / sqrt(var + eps)
//   backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  xhat = (x - mean) * rstd
// with the statistics recomputed from x. Sums in float (double for double) by the fixed
// butterflies of row_allreduce, so a row's result repeats bit for bit. Replaces the composed
// normalisation's two reductions and pointwise kernels forward, and its backward's, with one.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/norm_rows.h"

namespace ember::kernels::cuda {
namespace dev {

__device__ __forceinline__ float sqrt_acc(float v) { return ::sqrtf(v); }
__device__ __forceinline__ double sqrt_acc(double v) { return ::sqrt(v); }

// blockDim = (threads per row: a multiple of 32, rows per block). Every thread reaches every
// row_allreduce (rows past the end fold nothing).
template <class T, class Acc, bool kBackward>
__global__ void layer_norm_rows_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                       T* __restrict__ y, int64_t rows, int64_t C, Acc eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool live = row < rows;
  const T* xr = x + (live ? row : 0) * C;
  const SumOp<Acc> op;
  const Acc n = static_cast<Acc>(C);
  Acc s = Acc(0);
  if (live)
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += to_acc<Acc>(xr[c]);
  const Acc mean = row_allreduce(op, s) / n;
  Acc q = Acc(0);
  if (live)
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const Acc d = to_acc<Acc>(xr[c]) - mean;
      q += d * d;
    }
  const Acc rstd = Acc(1) / sqrt_acc(row_allreduce(op, q) / n + eps);
  T* yr = y + (live ? row : 0) * C;
  if constexpr (!kBackward) {
    if (live)
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
        yr[c] = from_acc<T>((to_acc<Acc>(xr[c]) - mean) * rstd);
  } else {
    const T* gr = g + (live ? row : 0) * C;
    Acc sg = Acc(0), sgx = Acc(0);
    if (live)
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const Acc gi = to_acc<Acc>(gr[c]);
        sg += gi;
        sgx += gi * ((to_acc<Acc>(xr[c]) - mean) * rstd);
      }
    const Acc mg = row_allreduce(op, sg) / n, mgx = row_allreduce(op, sgx) / n;
    if (live)
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        const Acc xh = (to_acc<Acc>(xr[c]) - mean) * rstd;
        yr[c] = from_acc<T>(rstd * (to_acc<Acc>(gr[c]) - mg - xh * mgx));
      }
  }
}

}  // namespace dev

void layer_norm(const KernelCall& call) {
  const bool bwd = call.op == OpId::layer_norm_backward;
  const Tensor& x = call.inputs.back();
  const char* name = op_name(call.op).data();
  const NormRows shape = norm_rows(call);
  const int64_t rows = shape.rows, C = shape.cols;
  if (rows == 0) return;
  const int64_t per_row = C <= 1024 ? 32 : C <= 8192 ? 256 : 1024;
  const dim3 block(static_cast<unsigned>(per_row),
                   static_cast<unsigned>(std::max<int64_t>(1, 256 / per_row)));
  const dim3 grid(static_cast<unsigned>(ceil_div(rows, block.y)));
  cudaStream_t s = stream(x.device().index);
  visit_float_dtype(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* xp = static_cast<const T*>(x.raw_data());
    T* o = static_cast<T*>(call.out.raw_data());
    const Acc eps = static_cast<Acc>(call.attrs.eps);
    if (bwd)
      dev::layer_norm_rows_kernel<T, Acc, true><<<grid, block, 0, s>>>(
          static_cast<const T*>(call.inputs[0].raw_data()), xp, o, rows, C, eps);
    else
      dev::layer_norm_rows_kernel<T, Acc, false>
          <<<grid, block, 0, s>>>(nullptr, xp, o, rows, C, eps);
    check_launch(name);
  });
}

}  // namespace ember::kernels::cuda
