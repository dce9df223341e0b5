#pragma once
// Multi-tensor optimizer updates: one launch updates every parameter of a group in place.
//
// sgd_update is PyTorch's SGD step. The tensors travel in the kernel's parameters (a table of
// pointers, sizes and dtypes, up to kMultiTensorMax per launch); the hyperparameters
// {lr, momentum, dampening, weight_decay} and the step count are read from device memory by
// every launch, never baked in on the host, so a captured CUDA graph replays with whatever
// values the optimizer stored last. The work is one flat list of items over all tensors (an
// item is one 16-byte vector of a tensor, or the elements of its last, partial vector) and the
// grid strides over that list, so one big weight matrix and many small biases both fill the GPU,
// and a thread waits on memory once per item it owns, not once per tensor (a grid-stride loop
// over each tensor in turn would pay one memory round trip per tensor, in sequence). 16-bit
// floats compute in float, float64 in double.
//
// Counting the step (attrs.increment_step) in the same launch saves the optimizer a kernel per
// step. Blocks run in any order, so no block may write the step while another has yet to read
// it: each block reads it once (thread 0), and after its work thread 0 takes a ticket; the block
// drawing the last ticket writes old + 1 and puts the ticket back to 0 for the next launch
// (CUDA-graph replays included, so no memset is ever needed).
//
// A raised device error flag (device_error.cuh: an earlier kernel of the step met bad input, e.g.
// an out-of-range class target) makes the launch change nothing: no parameter, buffer or step
// count moves, so a step that will raise at the next synchronize leaves the model as it was, as
// on the CPU, where the bad input throws before the update. The flag is read on the device by
// each block (no host synchronize), so this holds inside a captured CUDA graph too.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_error.cuh"
#include "kernels/cuda/multi_tensor_dtype.h"

namespace ember::kernels::cuda::dev {

inline constexpr int kMultiTensorMax = 64;


// ~2.6 KB: well inside the 4 KB of kernel parameters every architecture takes.
struct SgdTensors {
  int count;
  void* param[kMultiTensorMax];
  const void* grad[kMultiTensorMax];
  void* buf[kMultiTensorMax];  // unused without momentum buffers
  int64_t numel[kMultiTensorMax];
  int64_t first_item[kMultiTensorMax + 1];  // tensor k's items: [first_item[k], first_item[k+1])
  unsigned char dtype[kMultiTensorMax];
};

// Elements per item of a tensor of dtype d: one 16-byte vector.
__host__ __device__ constexpr int sgd_item_elems(unsigned char d) {
  return d == kMtFloat64 ? 2 : d == kMtFloat32 ? 4 : 8;
}

struct SgdFlags {
  bool nesterov, maximize, momentum_buffers;
};

template <class Acc>
struct SgdHyper {
  Acc lr, momentum, keep, weight_decay;  // keep = 1 - dampening
  bool first_step;
};

// PyTorch's order per element: d = maximize ? -g : g; d += wd p; buf = first ? d :
// momentum buf + (1 - dampening) d; d = nesterov ? d + momentum buf : buf; p -= lr d.
template <class T, class Acc>
__device__ __forceinline__ void sgd_element(T& p, T g, T& buf, const SgdHyper<Acc>& h, SgdFlags f) {
  const Acc pi = to_acc<Acc>(p);
  Acc d = to_acc<Acc>(g);
  if (f.maximize) d = -d;
  if (h.weight_decay != Acc(0)) d += h.weight_decay * pi;
  if (f.momentum_buffers) {
    // The buffer is used as stored (rounded to T), as PyTorch does.
    const T b = from_acc<T>(h.first_step ? d : h.momentum * to_acc<Acc>(buf) + h.keep * d);
    buf = b;
    d = f.nesterov ? d + h.momentum * to_acc<Acc>(b) : to_acc<Acc>(b);
  }
  p = from_acc<T>(pi - h.lr * d);
}

// Item j of one tensor: elements [j * kVec, min(n, (j + 1) * kVec)). A whole vector whose
// pointers are all 16-byte aligned moves as 16-byte loads and stores (the update is
// bandwidth-bound: scalar accesses left it at a fraction of the copy rate); anything else goes
// element by element. Each element is updated alone, so vectors change no value.
template <class T, class Acc>
__device__ __forceinline__ void sgd_item(void* param, const void* grad, void* buffer, int64_t n,
                                         int64_t j, const SgdHyper<Acc>& h, SgdFlags f) {
  constexpr int kVec = 16 / sizeof(T);
  T* p = static_cast<T*>(param);
  const T* g = static_cast<const T*>(grad);
  T* buf = static_cast<T*>(buffer);
  const auto aligned = [](const void* q) {
    return reinterpret_cast<unsigned long long>(q) % 16 == 0;
  };
  const int64_t lo = j * kVec;
  if ((j + 1) * kVec <= n && aligned(p) && aligned(g) && (!f.momentum_buffers || aligned(buf))) {
    uint4 pw = reinterpret_cast<const uint4*>(p)[j];
    const uint4 gw = reinterpret_cast<const uint4*>(g)[j];
    uint4 bw{};
    if (f.momentum_buffers) bw = reinterpret_cast<const uint4*>(buf)[j];
    T* pe = reinterpret_cast<T*>(&pw);
    const T* ge = reinterpret_cast<const T*>(&gw);
    T* be = reinterpret_cast<T*>(&bw);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sgd_element<T, Acc>(pe[e], ge[e], be[e], h, f);
    reinterpret_cast<uint4*>(p)[j] = pw;
    if (f.momentum_buffers) reinterpret_cast<uint4*>(buf)[j] = bw;
    return;
  }
  T unused{};
  const int64_t hi = lo + kVec < n ? lo + kVec : n;
  for (int64_t i = lo; i < hi; ++i)
    sgd_element<T, Acc>(p[i], g[i], f.momentum_buffers ? buf[i] : unused, h, f);
}

// hyper: float32 {lr, momentum, dampening, weight_decay}; step: float32 steps taken so far.
// step_ticket: null, or a counter that is 0 at launch: then the launch also sets step to its
// old value + 1 once every block has read the old one (not restrict or const: written here).
// error_raised: the device error flag's word in device memory (device_error.cuh); null skips
// the check. found_inf: null, or GradScaler's flag: set, the launch changes nothing either.
__global__ void sgd_update_kernel(SgdTensors ts, const float* __restrict__ hyper, float* step,
                                  unsigned* step_ticket, SgdFlags f,
                                  const unsigned* error_raised, const float* found_inf) {
  // One read per block, by the thread that later takes the block's ticket, so the read comes
  // before the ticket in that thread's own program order.
  __shared__ float step_seen;
  __shared__ bool failed;
  if (threadIdx.x == 0) {
    step_seen = *step;
    failed = (error_raised != nullptr &&
              *static_cast<const volatile unsigned*>(error_raised) != 0) ||
             (found_inf != nullptr && *found_inf != 0.0f);
  }
  __syncthreads();
  const float lr = hyper[0], momentum = hyper[1], dampening = hyper[2], wd = hyper[3];
  const bool first_step = step_seen == 0.0f;
  const SgdHyper<float> hf{lr, momentum, 1.0f - dampening, wd, first_step};
  const SgdHyper<double> hd{lr, momentum, 1.0 - static_cast<double>(dampening), wd, first_step};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // A failed step still takes its ticket below, so the ticket is back at 0 for the next launch.
  const int64_t items = failed ? 0 : ts.first_item[ts.count];
  int k = 0;  // the tensor of item i: items ascend along a thread's loop, so k only moves on
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += stride) {
    while (i >= ts.first_item[k + 1]) ++k;
    void* p = ts.param[k];
    const void* g = ts.grad[k];
    void* b = ts.buf[k];
    const int64_t n = ts.numel[k], j = i - ts.first_item[k];
    switch (ts.dtype[k]) {
      case kMtFloat32:
        sgd_item<float, float>(p, g, b, n, j, hf, f);
        break;
      case kMtFloat64:
        sgd_item<double, double>(p, g, b, n, j, hd, f);
        break;
      case kMtFloat16:
        sgd_item<__half, float>(p, g, b, n, j, hf, f);
        break;
      case kMtBFloat16:
        sgd_item<__nv_bfloat16, float>(p, g, b, n, j, hf, f);
        break;
    }
  }
  if (step_ticket != nullptr && threadIdx.x == 0) {
    __threadfence();  // this block's read of the step is complete before its ticket is taken
    if (atomicAdd(step_ticket, 1u) == gridDim.x - 1) {
      __threadfence();  // every other block's read happened before its ticket: now write
      if (!failed) *step = step_seen + 1.0f;
      *step_ticket = 0;  // for the next launch
    }
  }
}

}  // namespace ember::kernels::cuda::dev

