#pragma once
// CPU kernels by kind; kernels/cpu/dispatch_cpu.cpp routes a KernelCall to one of these.
#include <type_traits>

#include "core/dispatch.h"
#include "core/half.h"

namespace ember::kernels::cpu {
void pointwise(const KernelCall& call);      // Nullary/Unary/Binary/Ternary (pointwise.cpp)
void reduce(const KernelCall& call);         // reduce.cpp
void matmul(const KernelCall& call);         // matmul.cpp (Eigen)
void softmax(const KernelCall& call);        // softmax.cpp (softmax, log_softmax)
void cross_entropy(const KernelCall& call);  // cross_entropy.cpp
void index(const KernelCall& call);          // index.cpp (gather, index_select, one_hot)
void cat(const KernelCall& call);            // cat.cpp
void arange(const KernelCall& call);         // random.cpp
void random(const KernelCall& call);         // random.cpp
void multi_tensor(const KernelCall& call);   // multi_tensor.cpp (sgd_update)
// optimizer_kernels.cpp (adam_update, rmsprop_update, adagrad_update)
void optimizer_update(const KernelCall& call);
void amp_unscale(const KernelCall& call);  // amp.cpp: GradScaler's unscale and inf check
void multi_norm(const KernelCall& call);   // multi_norm.cpp: each tensor's p-norm, stacked
void layer_norm(const KernelCall& call);   // layer_norm.cpp: layer_norm and its backward row
void pool(const KernelCall& call);  // pool.cpp: max_pool2d and its backward row
void attention(const KernelCall& call);  // attention.cpp: the fused attention rows
void conv(const KernelCall& call);  // conv.cpp: conv2d and its backward rows (im2col + GEMM)
// C[m, n] = op(A) op(B), or C += op(A) op(B) when accumulate, on the calling thread only (the
// BLAS when the build has it, else Eigen). Row-major with leading dimensions: A is [m, k], or
// stored as [k, m] when ta; B is [k, n], or stored [n, k] when tb. float and double
// (matmul.cpp).
template <class T>
void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);
// A double result rounded to T; 16-bit floats through float, as their constructors take it.
template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
// Whether a multi-tensor update was handed a found_inf that is set (multi_tensor.cpp).
bool found_inf_set(const KernelCall& call);
}  // namespace ember::kernels::cpu
