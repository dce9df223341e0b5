#pragma once
// CUDA kernels by kind; kernels/cuda/dispatch_cuda.cpp routes a KernelCall to one of these.
// Each launcher enqueues on the device's Ember stream (kernels/cuda/runtime.h) and checks the
// launch; none synchronizes.
#include "core/dispatch.h"

namespace ember::kernels::cuda {
void pointwise(const KernelCall& call);
void reduce(const KernelCall& call);
void matmul(const KernelCall& call);
void softmax(const KernelCall& call);
void cross_entropy(const KernelCall& call);
void index(const KernelCall& call);
void cat(const KernelCall& call);
void arange(const KernelCall& call);
void random(const KernelCall& call);
void multi_tensor(const KernelCall& call);  // sgd_update (optim/)
void pool(const KernelCall& call);          // pool.cu: max_pool2d and its backward row
void conv(const KernelCall& call);          // conv.cpp: conv2d and its backward rows (cuDNN)
void attention(const KernelCall& call);     // attention.cu: the fused attention rows
// adam_update, rmsprop_update, adagrad_update (optimizer_kernels.cu)
void optimizer_update(const KernelCall& call);
void amp_unscale(const KernelCall& call);  // amp.cu: GradScaler's unscale and inf check
void multi_norm(const KernelCall& call);   // multi_norm.cu: each tensor's p-norm, stacked
void layer_norm(const KernelCall& call);   // layer_norm.cu: layer_norm and its backward row
// A multi-tensor update's found_inf (GradScaler's) as a device pointer, or null without one.
const float* found_inf_of(const KernelCall& call);
}  // namespace ember::kernels::cuda
