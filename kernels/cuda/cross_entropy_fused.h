#pragma once
// The fused softmax-cross-entropy forward + backward (cross_entropy.cuh's row kernel computing
// both halves; implemented in cross_entropy.cu) as a host call
// without CUDA types, for the JIT's CrossEntropy lowering (jit/lower_gemm_cuda.cpp).
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/op.h"

namespace ember::kernels::cuda {

// A reduced loss's gradient held in a 0-dim host tensor of `dtype` at `p`, as the kernels take
// it by value: exact in double for every floating dtype (16-bit ones widen through float).
inline double cross_entropy_grad_value(DType dtype, const void* p) {
  return visit_dtype(dtype, [&](auto tag) {
    using H = typename decltype(tag)::type;
    const H v = *static_cast<const H*>(p);
    if constexpr (std::is_same_v<H, double>)
      return v;
    else
      return static_cast<double>(static_cast<float>(v));
  });
}

struct CrossEntropyFusedCall {
  int device = 0;
  DType dtype = kFloat32;           // logits, grad, loss and dlogits (float types)
  const void* logits = nullptr;     // [n, c] contiguous
  const int64_t* target = nullptr;  // [n] contiguous
  const void* grad = nullptr;       // grad of row i's loss at grad[i * grad_stride]; reduced: []
  double grad_value = 0;            // reduced with grad null: the loss's gradient, by value
  int64_t grad_stride = 1;          // 0: one scalar for every row (an expanded mean gradient)
  void* loss = nullptr;             // [n] contiguous, or [] when reduced; null: not written
  LossReduction reduction = LossReduction::None;  // Mean / Sum: the loss is one value
  void* dlogits = nullptr;                        // [n, c] contiguous
  int64_t n = 0, c = 0;
  int64_t ignore_index = -100;
  double label_smoothing = 0;
};

// Queues the kernel on stream(device). A bad target is reported at the next synchronize (the
// device error flag), like the eager kernels.
void cross_entropy_fused(const CrossEntropyFusedCall& call);

// How many kernels a reduced cross entropy of [n, c] logits launches with its gradient: 2 when
// a mean over more rows than one block takes needs the count of targets first, else 1.
int cross_entropy_reduced_kernels(int64_t n, int64_t c, bool mean, int device);

}  // namespace ember::kernels::cuda
