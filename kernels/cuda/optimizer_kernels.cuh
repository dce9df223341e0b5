#pragma once
// The Adam-family multi-tensor updates on CUDA: adam_update, rmsprop_update and adagrad_update,
// every parameter of a group in one launch (more only past kOptimMax tensors), in place.
//
// The same scheme as sgd_update (multi_tensor.cuh): the tensors travel in the kernel's
// parameters, the work is one flat list of 16-byte items over all tensors that the grid strides
// over (each item's elements loaded one by one: no vector loads yet; an item holds up to five
// streams of one to three states), the float64 hyperparameters and the float32 step are read from device memory by every
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

// The scalars of one launch in one compute type, for update Kind.
template <OptimKind Kind, class Acc>
struct OptimScalars;
template <class Acc>
struct OptimScalars<kOptAdam, Acc> {
  optim_rules::AdamScalars<Acc> s;
  __device__ OptimScalars(const double* h, float step) : s(optim_rules::adam_scalars<Acc>(h, step)) {}
};
template <class Acc>
struct OptimScalars<kOptRmsprop, Acc> {
  optim_rules::RmspropScalars<Acc> s;
  __device__ OptimScalars(const double* h, float) : s(optim_rules::rmsprop_scalars<Acc>(h)) {}
};
template <class Acc>
struct OptimScalars<kOptAdagrad, Acc> {
  optim_rules::AdagradScalars<Acc> s;
  __device__ OptimScalars(const double* h, float step)
      : s(optim_rules::adagrad_scalars<Acc>(h, step)) {}
};

// st: the element's states in layout order.
template <OptimKind Kind, class Acc>
__device__ __forceinline__ void optim_element(Acc& p, Acc g, Acc* st,
                                              const OptimScalars<Kind, Acc>& sc, OptimFlags f) {
  if constexpr (Kind == kOptAdam) {
    optim_rules::adam_element<Acc>(p, g, st[0], st[1], st[2], sc.s,
                                   {f.amsgrad, f.decoupled, f.maximize});
  } else if constexpr (Kind == kOptRmsprop) {
    // Layout order: square_avg, (momentum_buffer), (grad_avg).
    optim_rules::rmsprop_element<Acc>(p, g, st[0], st[1], st[f.momentum ? 2 : 1], sc.s,
                                      {f.momentum, f.centered, f.maximize});
  } else {
    optim_rules::adagrad_element<Acc>(p, g, st[0], sc.s, f.maximize);
  }
}

// Item j of tensor k: its up to 16 bytes' worth of elements, element by element (plain loads;
// neighbouring threads own neighbouring items, so a warp still reads whole lines).
template <OptimKind Kind, class T, class Acc>
__device__ __forceinline__ void optim_item(const OptimTensors& ts, int k, int64_t j,
                                           const OptimScalars<Kind, Acc>& sc, OptimFlags f) {
  constexpr int kVec = 16 / sizeof(T);
  T* p = static_cast<T*>(ts.param[k]);
  const T* g = static_cast<const T*>(ts.grad[k]);
  T* st0 = static_cast<T*>(ts.state[0][k]);
  T* st1 = static_cast<T*>(ts.state[1][k]);
  T* st2 = static_cast<T*>(ts.state[2][k]);
  const int states = ts.states;
  const int64_t n = ts.numel[k], lo = j * kVec;
  const int64_t hi = lo + kVec < n ? lo + kVec : n;
  for (int64_t i = lo; i < hi; ++i) {
    Acc pv = to_acc<Acc>(p[i]);
    Acc sv[kOptimStates] = {Acc(0), Acc(0), Acc(0)};
    if (states > 0) sv[0] = to_acc<Acc>(st0[i]);
    if (states > 1) sv[1] = to_acc<Acc>(st1[i]);
    if (states > 2) sv[2] = to_acc<Acc>(st2[i]);
    optim_element<Kind, Acc>(pv, to_acc<Acc>(g[i]), sv, sc, f);
    p[i] = from_acc<T>(pv);
    if (states > 0) st0[i] = from_acc<T>(sv[0]);
    if (states > 1) st1[i] = from_acc<T>(sv[1]);
    if (states > 2) st2[i] = from_acc<T>(sv[2]);
  }
}

// hyper: float64, the op's hyperparameters; step: float32 updates taken so far. step_ticket:
// null, or a counter that is 0 at launch: then the launch also sets step to its old value + 1
// once every block has read the old one. error_raised: the device error flag's word (null skips
// the check).
template <OptimKind Kind>
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
  const OptimScalars<Kind, float> sf(hyper, step_seen);
  const OptimScalars<Kind, double> sd(hyper, step_seen);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t items = failed ? 0 : ts.first_item[ts.count];
  int k = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += stride) {
    while (i >= ts.first_item[k + 1]) ++k;
    const int64_t j = i - ts.first_item[k];
    switch (ts.dtype[k]) {
      case kOptF32:
        optim_item<Kind, float, float>(ts, k, j, sf, f);
        break;
      case kOptF64:
        optim_item<Kind, double, double>(ts, k, j, sd, f);
        break;
      case kOptF16:
        optim_item<Kind, __half, float>(ts, k, j, sf, f);
        break;
      case kOptBF16:
        optim_item<Kind, __nv_bfloat16, float>(ts, k, j, sf, f);
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
