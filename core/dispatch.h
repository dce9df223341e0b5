#pragma once
// The path of every primitive op: meta (validate + infer) -> kernel -> hooks.
#include <span>

#include "core/op.h"
#include "core/tensor.h"

namespace ember {

// What meta inference decides about an op's output.
struct OutputMeta {
  OutputMeta() = default;
  OutputMeta(const Shape& s, DType t, Device d) : shape(s), dtype(t), device(d) {}
  Shape shape;
  DType dtype = kFloat32;
  Device device;
  Strides strides;     // views only
  int64_t offset = 0;  // views only
};

// The dtype of the attention rows' row statistics (lse, delta: core/ops.yaml).
inline DType attention_stats_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

// Validates inputs and attrs of `op` and infers its output; throws ember::Error on bad input.
OutputMeta infer_meta(OpId op, std::span<const Tensor> inputs, const Attrs& attrs);

// Runs `op`. With `out` given the op writes into it in place (its shape and dtype must fit the
// op's result) and returns it; otherwise it returns a new tensor (or a view, for view ops).
Tensor dispatch(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
                const Tensor* out = nullptr);
inline Tensor dispatch(OpId op, std::initializer_list<Tensor> inputs, const Attrs& attrs = {},
                       const Tensor* out = nullptr) {
  return dispatch(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs, out);
}

// The inputs of a multi-tensor op (OpKind::MultiTensor), from its attrs:
// [hyperparameters, step, params[n], grads[n], then n per optimizer state group, then
// (skip_if_found_inf) found_inf]. An update writes the parameters and every state group in
// place, and the step with attrs.increment_step. amp_unscale (grads_only) has one list:
// [inv_scale, found_inf, grads[n]], and writes the gradients and found_inf (slot kStep).
// The ops have no output, so this is how dispatch (version bumps, autograd's in-place check)
// and executors know what they write.
struct MultiTensorLayout {
  int64_t n = 0;             // parameters
  int32_t state_groups = 0;  // state tensors per parameter (SGD's momentum buffer: one)
  bool writes_step = false;  // slot kStep: the step count, or amp_unscale's found_inf
  int32_t lists = 2;         // per-tensor lists before the states: params and grads, or grads
  bool reads_found_inf = false;

  // attrs.num_states counts the state tensors of the updates that set it (Adam's exp_avg,
  // exp_avg_sq, ...); sgd_update leaves it 0 and has one state group with momentum buffers.
  static MultiTensorLayout of(const Attrs& a) {
    const int32_t states =
        a.num_states > 0 ? static_cast<int32_t>(a.num_states) : (a.momentum_buffers ? 1 : 0);
    return {a.num_tensors, states, a.increment_step || a.grads_only, a.grads_only ? 1 : 2,
            a.skip_if_found_inf};
  }
  static constexpr size_t kHyper = 0, kStep = 1;
  size_t param(int64_t i) const { return static_cast<size_t>(2 + i); }
  size_t grad(int64_t i) const { return static_cast<size_t>(2 + (lists - 1) * n + i); }
  size_t state(int32_t group, int64_t i) const {
    return static_cast<size_t>(2 + (lists + group) * n + i);
  }
  size_t found_inf() const { return static_cast<size_t>(2 + (lists + state_groups) * n); }
  size_t inputs() const { return found_inf() + (reads_found_inf ? 1 : 0); }
  // Calls f(index) for every input the op writes.
  template <class F>
  void for_each_written(F&& f) const {
    for (int64_t i = 0; i < n; ++i) f(param(i));
    for (int32_t g = 0; g < state_groups; ++g)
      for (int64_t i = 0; i < n; ++i) f(state(g, i));
    if (writes_step) f(kStep);
  }
};

// What a multi-tensor update's flags ask of its inputs: the length and dtype of its
// hyperparameter vector and its state tensors per parameter (core/meta.cpp). The Adam family
// keeps its hyperparameters in float64, so the scalars the kernel derives from them (1 - beta,
// bias corrections, lr / bias correction) are PyTorch's, which computes them in Python floats.
struct MultiTensorShape {
  int64_t hyper = 0;
  int32_t states = 0;
  DType hyper_dtype = kFloat32;
};
MultiTensorShape multi_tensor_shape(OpId op, const Attrs& a);

// Observers of dispatched ops, for layers above core (autograd, the JIT's tracer). Core calls
// them after the kernel ran; they are plain function pointers so an unobserved op pays one
// predictable branch.
using OpObserver = void (*)(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
                            const Tensor& out, bool inplace);
void set_autograd_observer(OpObserver fn);  // process-wide
void set_trace_observer(OpObserver fn);     // this thread only
OpObserver trace_observer();                // this thread's, or null
// Called before an in-place kernel writes `out`, so autograd can refuse a write that would make
// gradients wrong before any data changes.
using InplaceCheck = void (*)(OpId op, std::span<const Tensor> inputs, const Tensor& out);
void set_autograd_inplace_check(InplaceCheck fn);

// The kernels each device provides (kernels/cpu, kernels/cuda). What dispatch guarantees a
// kernel, by kind (after meta succeeded; `out` is allocated, on the op's device):
//  Nullary (fill): no inputs; `out` may be strided; write attrs.value into every element.
//  Unary/Binary/Ternary: inputs share one dtype (the compute dtype), except where's condition
//    (bool) and cast's input (any); their shapes broadcast to out.sizes(); any strides; an input
//    may be a 0-dim CPU tensor when `out` is on CUDA (read its value on the host). `out` may be
//    strided and may be the very memory of an input (in-place). Plan loops with kernels::make_iter.
//  Reduce: input any strides; attrs.dims sorted, unique, non-negative and non-empty (all dims
//    when the user gave none); `out` contiguous with the reduced shape (keepdim applied). argmax:
//    the index is the row-major position among the reduced dims, first occurrence wins, NaN is
//    the maximum. Accumulate float16/bfloat16 in float.
//  Matmul: same dtype; mm [M,K]x[K,N], bmm [B,M,K]x[B,K,N] with any strides (batch stride may
//    be 0 after an expand); `out` contiguous. float32 uses TF32 on the GPU only if allow_tf32().
//  Softmax: input contiguous, attrs.dim non-negative; `out` contiguous, same shape.
//  Loss (cross_entropy): logits [N,C] float contiguous, target [N] int64 contiguous; `out` [N].
//    target == attrs.ignore_index gives 0; a target outside [0,C) otherwise is an error (CPU:
//    throw; CUDA: raise the device error flag, reported at the next synchronize / host copy).
//    With label smoothing e: loss = lse - (1-e) x[t] - e/C sum_c x[c].
//    cross_entropy_backward (grad [N], logits, target) -> [N,C]: grad[n] * (softmax - (1-e)
//    onehot(t) - e/C), rows of ignored targets 0; same checks. With attrs.reduction Mean or
//    Sum the loss is one value `out` [] (mean: the sum over the rows whose target is not
//    ignore_index, divided by their count; NaN when there are none) and the backward's grad is
//    [] (each row's gradient: grad / count for a mean, grad for a sum).
//  scatter_add (src, index) -> zeros(attrs.shape), out[..index..] += src along attrs.dim
//    (like torch.scatter_add on zeros); contiguous src/index of one shape; range errors as above.
//  Index: contiguous inputs, index int64; gather: index has input's ndim; index_select: 1-D
//    index; one_hot: int64 input, attrs.num_classes > 0. Out-of-range indices as for Loss.
//  Cat: inputs same dtype and shape but along attrs.dim (non-negative), any strides; `out`
//    contiguous.
//  Factory (arange): `out` contiguous 1-D; element i = cast(range_start + i * range_step).
//  Random: `out` contiguous; element i from core/philox.h with (attrs.seed, attrs.offset) (on
//    CUDA with attrs.rng_state set: seed = rng_state[0], first counter rng_state[1] + offset):
//    rand -> uniform (rounded below 1 in the dtype), randn -> normal, randint -> integer in
//    [attrs.lo, attrs.hi).
//  MultiTensor (sgd_update, adam_update, rmsprop_update, adagrad_update): `out` is undefined;
//    the kernel updates its inputs in place (layout: MultiTensorLayout above; the update rules:
//    optim/sgd.h, optim/adam.h, optim/rmsprop.h, optim/adagrad.h); route by the inputs' device. With
//    attrs.increment_step it also adds 1 to the step scalar, after every read of it (each
//    element sees the old value; on CUDA, once every block of the last launch has read it).
//  View and Transfer ops never reach a kernel.
struct KernelCall {
  OpId op;
  std::span<const Tensor> inputs;
  const Attrs& attrs;
  const Tensor& out;
};
// Runs the kernel of `call` on `device` with no checks, hooks or version bumps: for executors
// (the JIT) that validated the call when they built it. The device decides the kernel table; a
// multi-tensor update has no output, so the device is passed explicitly.
void run_kernel(const KernelCall& call, Device device);
// Copies `src` into the contiguous `out` on another device (to_device's work, for executors).
void run_transfer(const Tensor& src, const Tensor& out);
namespace kernels {
void run_cpu(const KernelCall& call);
void run_cuda(const KernelCall& call);
}  // namespace kernels

}  // namespace ember
