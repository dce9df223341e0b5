// Launchers of cross_entropy.cuh: the eager cross_entropy and cross_entropy_backward (per row, or
// reduced to a mean or sum), and the fused pair the JIT's CrossEntropy lowering calls
// (cross_entropy_fused.h).
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cross_entropy_fused.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"

namespace ember::kernels::cuda {
namespace {

// The one launch shape of cross_entropy_rows_kernel: a warp per row up to 1024 classes (8 rows
// per block), then wider groups. `loss` or `dx` null: that half is not computed.
void launch_rows(DType dtype, const void* logits, const int64_t* target, const void* grad,
                 int64_t grad_stride, void* loss, void* dx, int64_t N, int64_t C,
                 int64_t ignore_index, double smoothing, int device, const char* name) {
  cudaStream_t s = stream(device);
  DeviceErrorFlag* flag = device_error_flag(device);
  const int64_t per_row = C <= 1024 ? 32 : C <= 8192 ? 256 : 1024;
  const dim3 block(static_cast<unsigned>(per_row),
                   static_cast<unsigned>(std::max<int64_t>(1, 256 / per_row)));
  const dim3 grid(static_cast<unsigned>(ceil_div(N, block.y)));
  visit_float_dtype(dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const auto* x = static_cast<const T*>(logits);
    const auto* g = static_cast<const T*>(grad);
    auto* l = static_cast<T*>(loss);
    auto* d = static_cast<T*>(dx);
    const Acc e = static_cast<Acc>(smoothing);
    if (d == nullptr)
      dev::cross_entropy_rows_kernel<T, Acc, true, false>
          <<<grid, block, 0, s>>>(x, target, g, grad_stride, l, d, N, C, ignore_index, e, flag);
    else if (l == nullptr)
      dev::cross_entropy_rows_kernel<T, Acc, false, true>
          <<<grid, block, 0, s>>>(x, target, g, grad_stride, l, d, N, C, ignore_index, e, flag);
    else
      dev::cross_entropy_rows_kernel<T, Acc, true, true>
          <<<grid, block, 0, s>>>(x, target, g, grad_stride, l, d, N, C, ignore_index, e, flag);
    check_launch(name);
  });
}

// The launch shape of the reduced kernels, a function of (N, C, device) alone, so the eager
// forward, the eager backward and the fused pair fold the loss in the same order. Up to
// kThreadRowMaxC classes: cross_entropy_rowthread_kernel, one thread per row, one 256-thread
// block for up to 256 rows. Wider rows: cross_entropy_reduced_kernel, up to four rows
// per row group in one block of 1024 threads. Longer batches spread over 256-thread blocks, at
// most the scratch's slots (the count of targets then comes from a kernel of its own).
// Up to this many rows every block of a wide mean-with-gradient launch counts the targets itself
// (re-reading them from L2 is cheaper than a separate count_targets_kernel launch and the
// dependency it adds); above it the redundant reads grow past that, and one kernel counts them
// first.
constexpr int64_t kCountInBlockMaxRows = 16384;

struct ReducedShape {
  dim3 block, grid;
  bool rowthread = false;
};
ReducedShape reduced_shape(int64_t N, int64_t C, int device) {
  const int64_t slots = finish_scratch(device).slots;
  if (C <= dev::kThreadRowMaxC) {
    // One block only up to one row per thread: with several rows per thread each row's round
    // trip to memory waits for the previous one, and several blocks (with the counting
    // kernel) are faster.
    const int64_t blocks = N <= 256 ? 1 : std::min<int64_t>(ceil_div(N, 256), slots);
    return {dim3(256), dim3(static_cast<unsigned>(blocks)), true};
  }
  const int64_t per_row = C <= 1024 ? 32 : C <= 8192 ? 256 : 1024;
  const int64_t wide_rows = 1024 / per_row;
  if (N <= 4 * wide_rows)
    return {dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(wide_rows)), dim3(1)};
  const int64_t rows = std::max<int64_t>(1, 256 / per_row);
  const int64_t blocks = std::min<int64_t>(ceil_div(N, rows), slots);
  return {dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(rows)),
          dim3(static_cast<unsigned>(blocks))};
}

// The mean- or sum-reduced loss [] and/or the logits' gradient, `grad` the loss's gradient [].
// `grad` null: the gradient is grad_value.
void launch_reduced(DType dtype, const void* logits, const int64_t* target, const void* grad,
                    double grad_value, void* loss, void* dx, int64_t N, int64_t C,
                    int64_t ignore_index, double smoothing, bool mean, int device,
                    const char* name) {
  cudaStream_t s = stream(device);
  DeviceErrorFlag* flag = device_error_flag(device);
  const FinishScratch fs = finish_scratch(device);
  const ReducedShape shape = reduced_shape(N, C, device);
  const bool gradient = dx != nullptr;
  const long long* count_in = nullptr;  // null: each block counts the targets itself
  if (gradient && mean && shape.grid.x > 1 && N > kCountInBlockMaxRows) {
    dev::count_targets_kernel<<<1, 1024, 0, s>>>(target, N, ignore_index, fs.count);
    check_launch(name);
    count_in = fs.count;
  }
  visit_float_dtype(dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const auto* x = static_cast<const T*>(logits);
    const auto* g = static_cast<const T*>(grad);
    auto* l = static_cast<T*>(loss);
    auto* d = static_cast<T*>(dx);
    const Acc e = static_cast<Acc>(smoothing);
    const Acc gv = static_cast<Acc>(grad_value);
    if (shape.rowthread) {
      if (d == nullptr)
        dev::cross_entropy_rowthread_kernel<T, Acc, true, false><<<shape.grid, shape.block, 0, s>>>(
            x, target, g, gv, l, d, N, C, ignore_index, e, mean, count_in, fs.partial_sum,
            fs.partial_count, fs.ticket, flag);
      else if (l == nullptr)
        dev::cross_entropy_rowthread_kernel<T, Acc, false, true><<<shape.grid, shape.block, 0, s>>>(
            x, target, g, gv, l, d, N, C, ignore_index, e, mean, count_in, fs.partial_sum,
            fs.partial_count, fs.ticket, flag);
      else
        dev::cross_entropy_rowthread_kernel<T, Acc, true, true><<<shape.grid, shape.block, 0, s>>>(
            x, target, g, gv, l, d, N, C, ignore_index, e, mean, count_in, fs.partial_sum,
            fs.partial_count, fs.ticket, flag);
      check_launch(name);
      return;
    }
    if (d == nullptr)
      dev::cross_entropy_reduced_kernel<T, Acc, true, false><<<shape.grid, shape.block, 0, s>>>(
          x, target, g, gv, l, d, N, C, ignore_index, e, mean, count_in, fs.partial_sum,
          fs.partial_count, fs.ticket, flag);
    else if (l == nullptr)
      dev::cross_entropy_reduced_kernel<T, Acc, false, true><<<shape.grid, shape.block, 0, s>>>(
          x, target, g, gv, l, d, N, C, ignore_index, e, mean, count_in, fs.partial_sum,
          fs.partial_count, fs.ticket, flag);
    else
      dev::cross_entropy_reduced_kernel<T, Acc, true, true><<<shape.grid, shape.block, 0, s>>>(
          x, target, g, gv, l, d, N, C, ignore_index, e, mean, count_in, fs.partial_sum,
          fs.partial_count, fs.ticket, flag);
    check_launch(name);
  });
}

}  // namespace

int cross_entropy_reduced_kernels(int64_t n, int64_t c, bool mean, int device) {
  return mean && n > kCountInBlockMaxRows && reduced_shape(n, c, device).grid.x > 1 ? 2 : 1;
}

void cross_entropy(const KernelCall& call) {
  const bool backward = call.op == OpId::cross_entropy_backward;
  const char* name = backward ? "cross_entropy_backward" : "cross_entropy";
  const Tensor& logits = call.inputs[backward ? 1 : 0];
  const Tensor& target = call.inputs[backward ? 2 : 1];
  const Tensor& out = call.out;
  const int64_t N = logits.size(0), C = logits.size(1);
  EMBER_CHECK(logits.is_contiguous() && target.is_contiguous() && out.is_contiguous(), name,
              ": CUDA kernel needs contiguous logits, target and output");
  const int64_t* t = static_cast<const int64_t*>(target.raw_data());
  const LossReduction red = call.attrs.reduction;
  if (red != LossReduction::None) {
    // A reduced loss over no rows is still written (mean: NaN, sum: 0).
    if (backward && N == 0) return;
    const bool mean = red == LossReduction::Mean;
    // The gradient may be a 0-dim host tensor (infer_meta allows it): passed by value.
    const bool host_grad = backward && call.inputs[0].device().is_cpu();
    launch_reduced(logits.dtype(), logits.raw_data(), t,
                   backward && !host_grad ? call.inputs[0].raw_data() : nullptr,
                   host_grad ? cross_entropy_grad_value(call.inputs[0].dtype(), call.inputs[0].raw_data())
                             : 0.0,
                   backward ? nullptr : out.raw_data(), backward ? out.raw_data() : nullptr, N, C,
                   call.attrs.ignore_index, call.attrs.label_smoothing, mean, out.device().index,
                   name);
    return;
  }
  if (N == 0) return;
  if (backward) {
    const Tensor& grad = call.inputs[0];
    const int64_t gs = grad.dim() == 0 ? 0 : grad.stride(0);
    launch_rows(logits.dtype(), logits.raw_data(), t, grad.raw_data(), gs, nullptr, out.raw_data(),
                N, C, call.attrs.ignore_index, call.attrs.label_smoothing, out.device().index,
                name);
  } else {
    launch_rows(logits.dtype(), logits.raw_data(), t, nullptr, 0, out.raw_data(), nullptr, N, C,
                call.attrs.ignore_index, call.attrs.label_smoothing, out.device().index, name);
  }
}

void cross_entropy_fused(const CrossEntropyFusedCall& call) {
  const char* name = "cross_entropy_fused";
  EMBER_CHECK(call.n >= 0 && call.c > 0, name, ": bad shape [", call.n, ",", call.c, "]");
  const bool reduced = call.reduction != LossReduction::None;
  DeviceGuard guard(call.device);
  if (call.n == 0) {
    // No rows: nothing to differentiate, but a reduced loss is still written (mean: NaN).
    if (!reduced) return;
    EMBER_CHECK(call.loss, name, ": a reduced loss needs its output");
    launch_reduced(call.dtype, call.logits, call.target, nullptr, 0.0, call.loss, nullptr, 0,
                   call.c, call.ignore_index, call.label_smoothing,
                   call.reduction == LossReduction::Mean, call.device, name);
    return;
  }
  EMBER_CHECK(call.logits && call.target && (call.grad || reduced) && call.dlogits, name,
              ": null logits, target, grad or dlogits");
  if (reduced) {
    EMBER_CHECK(call.loss, name, ": a reduced loss needs its output");
    launch_reduced(call.dtype, call.logits, call.target, call.grad, call.grad_value, call.loss,
                   call.dlogits, call.n, call.c, call.ignore_index, call.label_smoothing,
                   call.reduction == LossReduction::Mean, call.device, name);
    return;
  }
  launch_rows(call.dtype, call.logits, call.target, call.grad, call.grad_stride, call.loss,
              call.dlogits, call.n, call.c, call.ignore_index, call.label_smoothing, call.device,
              name);
}

}  // namespace ember::kernels::cuda
