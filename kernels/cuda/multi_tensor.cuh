#pragma once
// Multi-tensor optimizer updates: one launch updates every parameter of a group in place.
//
// sgd_update is PyTorch's SGD step. The tensors travel in the kernel's parameters (a table of
// pointers, sizes and dtypes, up to kMultiTensorMax per launch); the hyperparameters
// {lr, momentum, dampening, weight_decay} and the step count are read from device memory by
// every launch, never baked in on the host, so a captured CUDA graph replays with whatever
// values the optimizer stored last. Each tensor is covered by the whole grid in turn (a
// grid-stride loop per tensor), so one big weight matrix and many small biases both fill the GPU.
// 16-bit floats compute in float, float64 in double.
//
// Counting the step (attrs.increment_step) in the same launch saves the optimizer a kernel per
// step. Blocks run in any order, so no block may write the step while another has yet to read
// it: each block reads it once (thread 0), and after its work thread 0 takes a ticket; the block
// drawing the last ticket writes old + 1 and puts the ticket back to 0 for the next launch
// (CUDA-graph replays included, so no memset is ever needed).
#include "kernels/cuda/block_reduce.cuh"

namespace ember::kernels::cuda::dev {

inline constexpr int kMultiTensorMax = 64;

// The storage type of one tensor of the table.
enum MultiTensorDType : unsigned char { kMtFloat32, kMtFloat64, kMtFloat16, kMtBFloat16 };

// ~2.1 KB: well inside the 4 KB of kernel parameters every architecture takes.
struct SgdTensors {
  int count;
  void* param[kMultiTensorMax];
  const void* grad[kMultiTensorMax];
  void* buf[kMultiTensorMax];  // unused without momentum buffers
  int64_t numel[kMultiTensorMax];
  unsigned char dtype[kMultiTensorMax];
};

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

// One tensor, thread `first` of `step`. Where every pointer is 16-byte aligned the bulk moves in
// 16-byte vectors (4 floats, 8 halves): the update is bandwidth-bound, and scalar accesses left it
// at a fraction of the copy rate. Each element is updated alone, so vectors change no value.
template <class T, class Acc>
__device__ __forceinline__ void sgd_tensor(void* param, const void* grad, void* buffer, int64_t n,
                                           const SgdHyper<Acc>& h, SgdFlags f, int64_t first,
                                           int64_t step) {
  constexpr int kVec = 16 / sizeof(T);
  T* p = static_cast<T*>(param);
  const T* g = static_cast<const T*>(grad);
  T* buf = static_cast<T*>(buffer);
  T unused{};
  const auto misaligned = [](const void* q) {
    return reinterpret_cast<unsigned long long>(q) % 16 != 0;
  };
  int64_t done = 0;
  if (kVec > 1 && !misaligned(p) && !misaligned(g) && (!f.momentum_buffers || !misaligned(buf))) {
    const int64_t nvec = n / kVec;
    for (int64_t i = first; i < nvec; i += step) {
      uint4 pw = reinterpret_cast<const uint4*>(p)[i];
      const uint4 gw = reinterpret_cast<const uint4*>(g)[i];
      uint4 bw{};
      if (f.momentum_buffers) bw = reinterpret_cast<const uint4*>(buf)[i];
      T* pe = reinterpret_cast<T*>(&pw);
      const T* ge = reinterpret_cast<const T*>(&gw);
      T* be = reinterpret_cast<T*>(&bw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) sgd_element<T, Acc>(pe[j], ge[j], be[j], h, f);
      reinterpret_cast<uint4*>(p)[i] = pw;
      if (f.momentum_buffers) reinterpret_cast<uint4*>(buf)[i] = bw;
    }
    done = nvec * kVec;
  }
  for (int64_t i = done + first; i < n; i += step)
    sgd_element<T, Acc>(p[i], g[i], f.momentum_buffers ? buf[i] : unused, h, f);
}

// hyper: float32 {lr, momentum, dampening, weight_decay}; step: float32 steps taken so far.
// step_ticket: null, or a counter that is 0 at launch: then the launch also sets step to its
// old value + 1 once every block has read the old one (not restrict or const: written here).
__global__ void sgd_update_kernel(SgdTensors ts, const float* __restrict__ hyper, float* step,
                                  unsigned* step_ticket, SgdFlags f) {
  // One read per block, by the thread that later takes the block's ticket, so the read comes
  // before the ticket in that thread's own program order.
  __shared__ float step_seen;
  if (threadIdx.x == 0) step_seen = *step;
  __syncthreads();
  const float lr = hyper[0], momentum = hyper[1], dampening = hyper[2], wd = hyper[3];
  const bool first_step = step_seen == 0.0f;
  const SgdHyper<float> hf{lr, momentum, 1.0f - dampening, wd, first_step};
  const SgdHyper<double> hd{lr, momentum, 1.0 - static_cast<double>(dampening), wd, first_step};
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int k = 0; k < ts.count; ++k) {
    void* p = ts.param[k];
    const void* g = ts.grad[k];
    void* b = ts.buf[k];
    const int64_t n = ts.numel[k];
    switch (ts.dtype[k]) {
      case kMtFloat32:
        sgd_tensor<float, float>(p, g, b, n, hf, f, first, stride);
        break;
      case kMtFloat64:
        sgd_tensor<double, double>(p, g, b, n, hd, f, first, stride);
        break;
      case kMtFloat16:
        sgd_tensor<__half, float>(p, g, b, n, hf, f, first, stride);
        break;
      case kMtBFloat16:
        sgd_tensor<__nv_bfloat16, float>(p, g, b, n, hf, f, first, stride);
        break;
    }
  }
  if (step_ticket != nullptr && threadIdx.x == 0) {
    __threadfence();  // this block's read of the step is complete before its ticket is taken
    if (atomicAdd(step_ticket, 1u) == gridDim.x - 1) {
      __threadfence();  // every other block's read happened before its ticket: now write
      *step = step_seen + 1.0f;
      *step_ticket = 0;  // for the next launch
    }
  }
}

}  // namespace ember::kernels::cuda::dev
