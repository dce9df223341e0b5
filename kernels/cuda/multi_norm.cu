// multi_norm on CUDA: the p-norm of each tensor of a list (validated by meta, core/meta.cpp),
// stacked into out [n], in one launch per kNormMax tensors, whatever their dtypes.
//
// Each tensor is cut into chunks of one launch-wide length; block b sums chunk b of the flat
// list of chunks (|x|^p in double, or the largest |x| for p = inf, a NaN winning) and stores it
// in the device's finish scratch (runtime.h); the block drawing the last ticket folds each
// tensor's partials in chunk order and writes the norms. The cut and the orders depend on the
// sizes and the device's SM count alone, so the result repeats bit for bit, and nothing is
// allocated, so the launch can be captured in a CUDA graph. What it replaces, one reduction
// kernel per tensor, costs a launch each: clip_grad_norm_ over a model's gradients.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/multi_tensor_dtype.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {
namespace dev {

inline constexpr int kNormMax = 64;
inline constexpr int kNormThreads = 256;

// ~1.4 KB of kernel parameters.
struct NormTensors {
  int count;
  const void* data[kNormMax];
  int64_t numel[kNormMax];
  int first_block[kNormMax + 1];  // tensor k's chunks: blocks [first_block[k], first_block[k+1])
  unsigned char dtype[kNormMax];  // MultiTensorDType
  int64_t chunk;  // elements per block, a multiple of 8
};

struct NormTerm {
  double p;
  bool inf;
  __device__ __forceinline__ double of(double v) const {
    const double a = fabs(v);
    return inf || p == 1.0 ? a : p == 2.0 ? a * a : pow(a, p);
  }
  __device__ __forceinline__ double fold(double acc, double t) const {
    if (!inf) return acc + t;
    return isnan(acc) || !(t <= acc) ? (isnan(acc) ? acc : t) : acc;
  }
  __device__ __forceinline__ double finish(double acc) const {
    if (inf) return acc;
    return p == 2.0 ? sqrt(acc) : p == 1.0 ? acc : pow(acc, 1.0 / p);
  }
};

// 16-bit floats widen through float (exactly).
template <class T>
__device__ __forceinline__ double widen(T v) {
  if constexpr (sizeof(T) == 2)
    return static_cast<double>(to_acc<float>(v));
  else
    return static_cast<double>(v);
}

// Elements [b, e) of x, this thread's share: runs of 8 elements (threadIdx.x, + blockDim.x,
// ...), each folded in order; a whole run at a 16-byte aligned address moves as 16-byte loads.
// The order is the same either way, so where a tensor lies never changes its norm.
template <class T>
__device__ __forceinline__ double thread_share(const T* __restrict__ x, int64_t b, int64_t e,
                                               const NormTerm& term) {
  constexpr int kRun = 8, kLoads = kRun * static_cast<int>(sizeof(T)) / 16;
  const bool aligned = reinterpret_cast<unsigned long long>(x) % 16 == 0;
  double acc = 0;
  for (int64_t r = b + static_cast<int64_t>(threadIdx.x) * kRun; r < e;
       r += static_cast<int64_t>(blockDim.x) * kRun) {
    if (aligned && r + kRun <= e) {
      uint4 w[kLoads];
#pragma unroll
      for (int l = 0; l < kLoads; ++l) w[l] = reinterpret_cast<const uint4*>(x + r)[l];
      const T* el = reinterpret_cast<const T*>(w);
#pragma unroll
      for (int q = 0; q < kRun; ++q) acc = term.fold(acc, term.of(widen(el[q])));
    } else {
      const int64_t hi = r + kRun < e ? r + kRun : e;
      for (int64_t i = r; i < hi; ++i) acc = term.fold(acc, term.of(widen(x[i])));
    }
  }
  return acc;
}

// A fixed halving tree over the block's threads (a power of two).
__device__ __forceinline__ double block_fold(double v, double* cell, const NormTerm& term) {
  const int tid = threadIdx.x;
  cell[tid] = v;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h >>= 1) {
    if (tid < h) cell[tid] = term.fold(cell[tid], cell[tid + h]);
    __syncthreads();
  }
  const double total = cell[0];
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kNormThreads)
    multi_norm_kernel(NormTensors ts, NormTerm term, double* partial, unsigned* ticket,
                      void* out, bool out64) {
  __shared__ double cell[kNormThreads];
  __shared__ bool last;
  const int blk = static_cast<int>(blockIdx.x);
  int k = 0;
  while (blk >= ts.first_block[k + 1]) ++k;
  const int64_t b = static_cast<int64_t>(blk - ts.first_block[k]) * ts.chunk;
  const int64_t e = b + ts.chunk < ts.numel[k] ? b + ts.chunk : ts.numel[k];
  double acc = 0;
  if (b < e) {
    switch (ts.dtype[k]) {  // the same branch for the whole block
      case kMtFloat32:
        acc = thread_share(static_cast<const float*>(ts.data[k]), b, e, term);
        break;
      case kMtFloat64:
        acc = thread_share(static_cast<const double*>(ts.data[k]), b, e, term);
        break;
      case kMtFloat16:
        acc = thread_share(static_cast<const __half*>(ts.data[k]), b, e, term);
        break;
      default:
        acc = thread_share(static_cast<const __nv_bfloat16*>(ts.data[k]), b, e, term);
        break;
    }
  }
  acc = block_fold(acc, cell, term);
  if (threadIdx.x == 0) {
    partial[blk] = acc;
    __threadfence();  // the partial is visible before the ticket is taken
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int t = static_cast<int>(threadIdx.x); t < ts.count; t += blockDim.x) {
    double s = 0;
    for (int c = ts.first_block[t]; c < ts.first_block[t + 1]; ++c)
      s = term.fold(s, *static_cast<const volatile double*>(&partial[c]));  // past the L1
    const double v = term.finish(s);
    if (out64)
      static_cast<double*>(out)[t] = v;
    else
      static_cast<float*>(out)[t] = static_cast<float>(v);
  }
  if (threadIdx.x == 0) *ticket = 0;  // for the next launch (graph replays too: no memset)
}

}  // namespace dev

void multi_norm(const KernelCall& call) {
  const auto& in = call.inputs;
  const Tensor& out = call.out;
  const int device = out.device().index;
  const FinishScratch fs = finish_scratch(device);
  const dev::NormTerm term{call.attrs.norm_type, std::isinf(call.attrs.norm_type)};
  for (size_t base = 0; base < in.size(); base += dev::kNormMax) {
    const size_t count = std::min<size_t>(dev::kNormMax, in.size() - base);
    dev::NormTensors ts{};
    ts.count = static_cast<int>(count);
    int64_t total = 0;
    for (size_t k = 0; k < count; ++k) {
      const Tensor& t = in[base + k];
      EMBER_CHECK(t.is_contiguous() && t.device() == out.device(), "multi_norm: tensor ",
                  base + k, " (", t.sizes(), " on ", t.device().str(),
                  ") must be contiguous on ", out.device().str());
      ts.data[k] = t.raw_data();
      ts.numel[k] = t.numel();
      ts.dtype[k] = multi_tensor_dtype(t.dtype(), "multi_norm", "tensor",
                                       static_cast<int64_t>(base + k));
      total += t.numel();
    }
    // Chunks long enough that every tensor's (at least one each, so an empty tensor's norm is
    // written too) fit the finish scratch's partials; at least 2048 elements, so a block does
    // more than start up.
    const int64_t room = fs.slots - static_cast<int64_t>(count);
    EMBER_CHECK(room > 0, "multi_norm: the device's finish scratch holds ", fs.slots,
                " partials, too few for ", count, " tensors");
    ts.chunk = std::max<int64_t>(2048, ceil_div(ceil_div(total, room), 8) * 8);
    for (size_t k = 0; k < count; ++k)
      ts.first_block[k + 1] =
          ts.first_block[k] +
          static_cast<int>(std::max<int64_t>(1, ceil_div(ts.numel[k], ts.chunk)));
    const int blocks = ts.first_block[count];
    void* o = static_cast<char*>(out.raw_data()) + base * element_size(out.dtype());
    dev::multi_norm_kernel<<<blocks, dev::kNormThreads, 0, stream(device)>>>(
        ts, term, fs.partial_sum, fs.ticket, o, out.dtype() == kFloat64);
    check_launch("multi_norm");
  }
}

}  // namespace ember::kernels::cuda
