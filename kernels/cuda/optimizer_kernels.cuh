#pragma once
// The Adam-family multi-tensor updates on CUDA: adam_update, rmsprop_update and adagrad_update,
// every parameter of a group in one launch (more only past kOptimMax tensors), in place.
//
// The same scheme as sgd_update (multi_tensor.cuh): the tensors travel in the kernel's
// parameters, the work is one flat list of 16-byte items over all tensors that the grid strides
// over (an item moves as 16-byte vectors of the parameter, its gradient and one to three
// states), the float64 hyperparameters and the float32 step are read from device memory by every
// launch (so a captured CUDA graph replays with whatever the optimizer stored last), the step is
// counted in the launch through the device's step ticket, and a raised device error flag makes
// the launch change nothing. The per-element rules are kernels/optimizer_rules.h, the CPU
// kernels' own text; the scalars derived from the hyperparameters and the step (bias
// corrections, the decayed lr) are computed on the device in double.
#include <type_traits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/device_error.cuh"
#include "kernels/optimizer_rules.h"

namespace ember::kernels::cuda::dev {

inline constexpr int kOptimMax = 40;
inline constexpr int kOptimStates = 3;

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
};


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
  OptimScalars() = default;  // trivial, so it can live in shared memory
  __device__ OptimScalars(const double* h, float step) : s(optim_rules::adam_scalars<Acc>(h, step)) {}
};
template <class Acc>
struct OptimScalars<kOptRmsprop, Acc> {
  optim_rules::RmspropScalars<Acc> s;
  OptimScalars() = default;
  __device__ OptimScalars(const double* h, float) : s(optim_rules::rmsprop_scalars<Acc>(h)) {}
};
template <class Acc>
struct OptimScalars<kOptAdagrad, Acc> {
  optim_rules::AdagradScalars<Acc> s;
  OptimScalars() = default;
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
    // (Both orders spelled out: an index picked at run time would put st in local memory.)
    if (f.momentum)
      optim_rules::rmsprop_element<Acc>(p, g, st[0], st[1], st[2], sc.s,
                                        {f.momentum, f.centered, f.maximize});
    else
      optim_rules::rmsprop_element<Acc>(p, g, st[0], st[2], st[1], sc.s,
                                        {f.momentum, f.centered, f.maximize});
  } else {
    optim_rules::adagrad_element<Acc>(p, g, st[0], sc.s, f.maximize);
  }
}

// Item j of tensor k: elements [j * kVec, min(n, (j + 1) * kVec)). A whole vector whose
// pointers are all 16-byte aligned moves as one 16-byte load and store per stream, every load
// issued before any store (element by element, the compiler cannot move the next element's loads
// above this element's stores, since the streams may alias: a thread then waits on memory once
// per element, and the update ran at a fraction of the copy rate). Anything else goes element by
// element. Each element is updated alone, so the vectors change no value.
template <OptimKind Kind, class T, class Acc>
__device__ __forceinline__ void optim_item(const OptimTensors& ts, int k, int64_t j,
                                           const OptimScalars<Kind, Acc>& sc, OptimFlags f) {
  constexpr int kVec = 16 / sizeof(T);
  T* p = static_cast<T*>(ts.param[k]);
  const T* g = static_cast<const T*>(ts.grad[k]);
  T* st[kOptimStates] = {static_cast<T*>(ts.state[0][k]), static_cast<T*>(ts.state[1][k]),
                         static_cast<T*>(ts.state[2][k])};
  const int states = ts.states;
  const int64_t n = ts.numel[k], lo = j * kVec;
  const auto aligned = [](const void* q) {
    return reinterpret_cast<unsigned long long>(q) % 16 == 0;
  };
  bool vector = lo + kVec <= n && aligned(p) && aligned(g);
#pragma unroll
  for (int q = 0; q < kOptimStates; ++q) vector = vector && (q >= states || aligned(st[q]));
  if (vector) {
    uint4 pw = reinterpret_cast<const uint4*>(p)[j];
    const uint4 gw = reinterpret_cast<const uint4*>(g)[j];
    uint4 sw[kOptimStates] = {};
#pragma unroll
    for (int q = 0; q < kOptimStates; ++q)
      if (q < states) sw[q] = reinterpret_cast<const uint4*>(st[q])[j];
    T* pe = reinterpret_cast<T*>(&pw);
    const T* ge = reinterpret_cast<const T*>(&gw);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      Acc pv = to_acc<Acc>(pe[e]);
      Acc sv[kOptimStates];
#pragma unroll
      for (int q = 0; q < kOptimStates; ++q) sv[q] = to_acc<Acc>(reinterpret_cast<T*>(&sw[q])[e]);
      optim_element<Kind, Acc>(pv, to_acc<Acc>(ge[e]), sv, sc, f);
      pe[e] = from_acc<T>(pv);
#pragma unroll
      for (int q = 0; q < kOptimStates; ++q) reinterpret_cast<T*>(&sw[q])[e] = from_acc<T>(sv[q]);
    }
    reinterpret_cast<uint4*>(p)[j] = pw;
#pragma unroll
    for (int q = 0; q < kOptimStates; ++q)
      if (q < states) reinterpret_cast<uint4*>(st[q])[j] = sw[q];
    return;
  }
  const int64_t hi = lo + kVec < n ? lo + kVec : n;
  for (int64_t i = lo; i < hi; ++i) {
    Acc pv = to_acc<Acc>(p[i]);
    Acc sv[kOptimStates] = {Acc(0), Acc(0), Acc(0)};
#pragma unroll
    for (int q = 0; q < kOptimStates; ++q)
      if (q < states) sv[q] = to_acc<Acc>(st[q][i]);
    optim_element<Kind, Acc>(pv, to_acc<Acc>(g[i]), sv, sc, f);
    p[i] = from_acc<T>(pv);
#pragma unroll
    for (int q = 0; q < kOptimStates; ++q)
      if (q < states) st[q][i] = from_acc<T>(sv[q]);
  }
}

// hyper: float64, the op's hyperparameters; step: float32 updates taken so far. step_ticket:
// null, or a counter that is 0 at launch: then the launch also sets step to its old value + 1
// once every block has read the old one. error_raised: the device error flag's word (null skips
// the check); found_inf: null, or GradScaler's flag, which when set also makes the launch change
// nothing (the step count included). Every tensor of ts is stored as T (the launcher splits a group at dtype changes):
// one storage type per kernel keeps a single item path in registers, where a per-item switch
// over four held enough registers to halve the occupancy and the update's bandwidth.
template <OptimKind Kind, class T>
__global__ void __launch_bounds__(256) optim_update_kernel(OptimTensors ts,
                                                           const double* __restrict__ hyper,
                                                           float* step, unsigned* step_ticket,
                                                           OptimFlags f,
                                                           const unsigned* error_raised,
                                                           const float* found_inf) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  // The scalars (float64 powers of the betas, a square root) are worked out once per block, by
  // the thread that reads the step, and shared.
  __shared__ float step_seen;
  __shared__ bool failed;
  __shared__ OptimScalars<Kind, Acc> scalars;
  if (threadIdx.x == 0) {
    step_seen = *step;
    failed = (error_raised != nullptr &&
              *static_cast<const volatile unsigned*>(error_raised) != 0) ||
             (found_inf != nullptr && *found_inf != 0.0f);
    scalars = OptimScalars<Kind, Acc>(hyper, step_seen);
  }
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t items = failed ? 0 : ts.first_item[ts.count];
  int k = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += stride) {
    while (i >= ts.first_item[k + 1]) ++k;
    optim_item<Kind, T, Acc>(ts, k, i - ts.first_item[k], scalars, f);
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
