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
__device__ __forceinline__ void sgd_tensor(void* param, const void* grad, void* buffer, int64_t n,
                                           const SgdHyper<Acc>& h, SgdFlags f, int64_t first,
                                           int64_t step) {
  T* p = static_cast<T*>(param);
  const T* g = static_cast<const T*>(grad);
  T* buf = static_cast<T*>(buffer);
  for (int64_t i = first; i < n; i += step) {
    const Acc pi = to_acc<Acc>(p[i]);
    Acc d = to_acc<Acc>(g[i]);
    if (f.maximize) d = -d;
    if (h.weight_decay != Acc(0)) d += h.weight_decay * pi;
    if (f.momentum_buffers) {
      // The buffer is used as stored (rounded to T), as PyTorch does.
      const T b = from_acc<T>(h.first_step ? d : h.momentum * to_acc<Acc>(buf[i]) + h.keep * d);
      buf[i] = b;
      d = f.nesterov ? d + h.momentum * to_acc<Acc>(b) : to_acc<Acc>(b);
    }
    p[i] = from_acc<T>(pi - h.lr * d);
  }
}

// hyper: float32 {lr, momentum, dampening, weight_decay}; step: float32 steps taken so far.
__global__ void sgd_update_kernel(SgdTensors ts, const float* __restrict__ hyper,
                                  const float* __restrict__ step, SgdFlags f) {
  const float lr = hyper[0], momentum = hyper[1], dampening = hyper[2], wd = hyper[3];
  const bool first_step = *step == 0.0f;
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
}

}  // namespace ember::kernels::cuda::dev
