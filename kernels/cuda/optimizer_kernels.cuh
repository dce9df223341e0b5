#pragma once
// The Adam-family multi-tensor updates on CUDA: adam_update, rmsprop_update and adagrad_update,
// every parameter of a group in one launch (more only past kOptimMax tensors), in place.
//
// The same scheme as sgd_update (multi_tensor.cuh): the tensors travel in the kernel's
// parameters, the work is one flat list of 16-byte items over all tensors that the grid strides
// over, the float64 hyperparameters and the float32 step are read from device memory by every
// launch (so a captured CUDA graph replays with whatever the optimizer stored last), the step is
// counted in the launch through the device's step ticket, and a raised device error flag makes
// the launch change nothing. The per-element rules are kernels/optimizer_rules.h, the CPU
// kernels' own text; the scalars derived from the hyperparameters and the step (bias
// corrections, the decayed lr) are computed on the device in double.
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_error.cuh"
#include "kernels/optimizer_rules.h"

namespace ember::kernels::cuda::dev {

inline constexpr int kOptimMax = 40;
inline constexpr int kOptimStates = 3;

enum OptimDType : unsigned char { kOptF32, kOptF64, kOptF16, kOptBF16 };
enum OptimKind : unsigned char { kOptAdam, kOptRmsprop, kOptAdagrad };

// ~2.3 KB of kernel parameters.
struct OptimTensors {
  int count;
  int states;  // state tensors per parameter, in layout order
  void* param[kOptimMax];
  const void* grad[kOptimMax];
  void* state[kOptimStates][kOptimMax];
  int64_t numel[kOptimMax];
  int64_t first_item[kOptimMax + 1];  // tensor k's items: [first_item[k], first_item[k+1])
  unsigned char dtype[kOptimMax];
};

__host__ __device__ constexpr int optim_item_elems(unsigned char d) {
  return d == kOptF64 ? 2 : d == kOptF32 ? 4 : 8;
}

struct OptimFlags {
  OptimKind kind;
  bool amsgrad, decoupled, momentum, centered, maximize;
};

// The scalars of one launch in one compute type.
template <class Acc>
struct OptimScalars {
  optim_rules::AdamScalars<Acc> adam;
  optim_rules::RmspropScalars<Acc> rmsprop;
  optim_rules::AdagradScalars<Acc> adagrad;
};

template <class Acc>
__device__ __forceinline__ OptimScalars<Acc> optim_scalars(const double* h, float step,
                                                           OptimKind kind) {
  OptimScalars<Acc> s{};
  if (kind == kOptAdam) s.adam = optim_rules::adam_scalars<Acc>(h, step);
  if (kind == kOptRmsprop) s.rmsprop = optim_rules::rmsprop_scalars<Acc>(h);
  if (kind == kOptAdagrad) s.adagrad = optim_rules::adagrad_scalars<Acc>(h, step);
  return s;
}

template <class Acc>
__device__ __forceinline__ void optim_element(Acc& p, Acc g, Acc* st, const OptimScalars<Acc>& s,
                                              OptimFlags f) {
  switch (f.kind) {
    case kOptAdam:
      optim_rules::adam_element<Acc>(p, g, st[0], st[1], st[2], s.adam,
                                     {f.amsgrad, f.decoupled, f.maximize});
      break;
    case kOptRmsprop: {
      // Layout order: square_avg, (momentum_buffer), (grad_avg).
      Acc& buf = st[1];
      Acc& avg = st[f.momentum ? 2 : 1];
      optim_rules::rmsprop_element<Acc>(p, g, st[0], buf, avg, s.rmsprop,
                                        {f.momentum, f.centered, f.maximize});
      break;
    }
    case kOptAdagrad:
      optim_rules::adagrad_element<Acc>(p, g, st[0], s.adagrad, f.maximize);
      break;
  }
}

// Item j of tensor k: whole 16-byte vectors when every pointer is aligned, else element by
// element. Each element is updated alone, so vectors change no value.
template <class T, class Acc>
__device__ __forceinline__ void optim_item(const OptimTensors& ts, int k, int64_t j,
                                           const OptimScalars<Acc>& s, OptimFlags f) {
  constexpr int kVec = 16 / sizeof(T);
  T* p = static_cast<T*>(ts.param[k]);
  const T* g = static_cast<const T*>(ts.grad[k]);
  T* st[kOptimStates];
  for (int q = 0; q < kOptimStates; ++q) st[q] = static_cast<T*>(ts.state[q][k]);
  const int64_t n = ts.numel[k], lo = j * kVec;
  const auto aligned = [](const void* ptr) {
    return reinterpret_cast<unsigned long long>(ptr) % 16 == 0;
  };
  bool vec = (j + 1) * kVec <= n && aligned(p) && aligned(g);
  for (int q = 0; q < ts.states; ++q) vec = vec && aligned(st[q]);
  if (vec) {
    uint4 pw = reinterpret_cast<const uint4*>(p)[j];
    const uint4 gw = reinterpret_cast<const uint4*>(g)[j];
    uint4 sw[kOptimStates] = {};
    for (int q = 0; q < ts.states; ++q) sw[q] = reinterpret_cast<const uint4*>(st[q])[j];
    T* pe = reinterpret_cast<T*>(&pw);
    const T* ge = reinterpret_cast<const T*>(&gw);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      Acc pv = to_acc<Acc>(pe[e]);
      Acc sv[kOptimStates] = {};
      for (int q = 0; q < ts.states; ++q) sv[q] = to_acc<Acc>(reinterpret_cast<T*>(&sw[q])[e]);
      optim_element<Acc>(pv, to_acc<Acc>(ge[e]), sv, s, f);
      pe[e] = from_acc<T>(pv);
      for (int q = 0; q < ts.states; ++q) reinterpret_cast<T*>(&sw[q])[e] = from_acc<T>(sv[q]);
    }
    reinterpret_cast<uint4*>(p)[j] = pw;
    for (int q = 0; q < ts.states; ++q) reinterpret_cast<uint4*>(st[q])[j] = sw[q];
    return;
  }
  const int64_t hi = lo + kVec < n ? lo + kVec : n;
  for (int64_t i = lo; i < hi; ++i) {
    Acc pv = to_acc<Acc>(p[i]);
    Acc sv[kOptimStates] = {};
    for (int q = 0; q < ts.states; ++q) sv[q] = to_acc<Acc>(st[q][i]);
    optim_element<Acc>(pv, to_acc<Acc>(g[i]), sv, s, f);
    p[i] = from_acc<T>(pv);
    for (int q = 0; q < ts.states; ++q) st[q][i] = from_acc<T>(sv[q]);
  }
}

// hyper: float64, the op's hyperparameters; step: float32 updates taken so far. step_ticket:
// null, or a counter that is 0 at launch: then the launch also sets step to its old value + 1
// once every block has read the old one. error_raised: the device error flag's word (null skips
// the check).
__global__ void optim_update_kernel(OptimTensors ts, const double* __restrict__ hyper, float* step,
                                    unsigned* step_ticket, OptimFlags f,
                                    const unsigned* error_raised) {
  __shared__ float step_seen;
  __shared__ bool failed;
  if (threadIdx.x == 0) {
    step_seen = *step;
    failed = error_raised != nullptr && *static_cast<const volatile unsigned*>(error_raised) != 0;
  }
  __syncthreads();
  const OptimScalars<float> sf = optim_scalars<float>(hyper, step_seen, f.kind);
  const OptimScalars<double> sd = optim_scalars<double>(hyper, step_seen, f.kind);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t items = failed ? 0 : ts.first_item[ts.count];
  int k = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += stride) {
    while (i >= ts.first_item[k + 1]) ++k;
    const int64_t j = i - ts.first_item[k];
    switch (ts.dtype[k]) {
      case kOptF32:
        optim_item<float, float>(ts, k, j, sf, f);
        break;
      case kOptF64:
        optim_item<double, double>(ts, k, j, sd, f);
        break;
      case kOptF16:
        optim_item<__half, float>(ts, k, j, sf, f);
        break;
      case kOptBF16:
        optim_item<__nv_bfloat16, float>(ts, k, j, sf, f);
        break;
    }
  }
  if (step_ticket != nullptr && threadIdx.x == 0) {
    __threadfence();  // this block's read of the step is complete before its ticket is taken
    if (atomicAdd(step_ticket, 1u) == gridDim.x - 1) {
      __threadfence();
      if (!failed) *step = step_seen + 1.0f;
      *step_ticket = 0;  // for the next launch
    }
  }
}

}  // namespace ember::kernels::cuda::dev
