#pragma once
// The fused softmax-cross-entropy forward + backward (cross_entropy.cuh's row kernel computing
// both halves; implemented in cross_entropy.cu) as a host call
// without CUDA types, for the JIT's CrossEntropy lowering (jit/lower_gemm_cuda.cpp).
#include <cstdint>

#include "core/dtype.h"
#include "core/op.h"

namespace ember::kernels::cuda {

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
