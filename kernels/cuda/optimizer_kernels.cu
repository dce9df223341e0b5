// Launcher of optimizer_kernels.cuh: adam_update, rmsprop_update and adagrad_update for all
// parameters of a group in one launch (more launches only past kOptimMax tensors). Inputs, as
// validated by meta (layout: MultiTensorLayout, core/dispatch.h):
//   [hyper float64[H], step float32 scalar, params[n], grads[n], states[S][n]]
// Nothing here reads device memory or synchronizes, so the update can be captured in a graph.
// attrs.increment_step: only the last launch counts the step, through the device's step ticket
// (runtime.h), which sgd_update uses the same way: every multi-tensor update of a device runs on
// its one stream, so no two launches hold the ticket at once.
#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/optimizer_kernels.cuh"

namespace ember::kernels::cuda {
namespace {

constexpr int kThreads = 256;

dev::OptimDType table_dtype(std::string_view op, DType t, int64_t i) {
  switch (t) {
    case DType::Float32:
      return dev::kOptF32;
    case DType::Float64:
      return dev::kOptF64;
    case DType::Float16:
      return dev::kOptF16;
    case DType::BFloat16:
      return dev::kOptBF16;
    default:
      EMBER_FAIL(op, ": parameter ", i, " has dtype ", dtype_name(t), "; expected a floating dtype");
  }
}

}  // namespace

void optimizer_update(const KernelCall& call) {
  const auto& in = call.inputs;
  const Attrs& a = call.attrs;
  const std::string_view name = op_name(call.op);
  const MultiTensorLayout layout = MultiTensorLayout::of(a);
  const int64_t n = layout.n;
  EMBER_CHECK(n > 0 && in.size() == layout.inputs() && layout.state_groups <= dev::kOptimStates,
              name, ": expected ", layout.inputs(), " tensors for ", n, " parameters, got ",
              in.size());
  dev::OptimFlags flags{};
  switch (call.op) {
    case OpId::adam_update:
      flags.kind = dev::kOptAdam;
      break;
    case OpId::rmsprop_update:
      flags.kind = dev::kOptRmsprop;
      break;
    case OpId::adagrad_update:
      flags.kind = dev::kOptAdagrad;
      break;
    default:
      EMBER_FAIL(name, ": not an Adam-family update");
  }
  flags.amsgrad = a.amsgrad;
  flags.decoupled = a.decoupled_weight_decay;
  flags.momentum = a.momentum_buffers;
  flags.centered = a.centered;
  flags.maximize = a.maximize;
  const Tensor &hyper = in[MultiTensorLayout::kHyper], &step = in[MultiTensorLayout::kStep];
  const Device dev = in[layout.param(0)].device();
  EMBER_CHECK(hyper.dtype() == kFloat64 && hyper.is_contiguous() && hyper.device() == dev &&
                  step.dtype() == kFloat32 && step.numel() == 1 && step.device() == dev,
              name, ": expected float64 hyperparameters and a float32 step on ", dev.str());
  const int device = dev.index;
  cudaStream_t s = stream(device);
  unsigned* const step_ticket = a.increment_step ? finish_scratch(device).step_ticket : nullptr;
  for (int64_t base = 0; base < n; base += dev::kOptimMax) {
    const bool last_launch = base + dev::kOptimMax >= n;
    dev::OptimTensors ts{};
    ts.states = layout.state_groups;
    const int64_t count = std::min<int64_t>(dev::kOptimMax, n - base);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = base + k;
      const Tensor& p = in[layout.param(i)];
      const Tensor& g = in[layout.grad(i)];
      EMBER_CHECK(p.device() == dev && g.device() == dev && p.is_contiguous() &&
                      g.is_contiguous() && g.sizes() == p.sizes() && g.dtype() == p.dtype(),
                  name, ": parameter ", i, " (", dtype_name(p.dtype()), " ", p.sizes(),
                  ") needs a contiguous gradient of its dtype and shape on ", dev.str());
      ts.param[k] = p.raw_data();
      ts.grad[k] = g.raw_data();
      for (int q = 0; q < layout.state_groups; ++q) {
        const Tensor& t = in[layout.state(q, i)];
        EMBER_CHECK(t.device() == dev && t.is_contiguous() && t.sizes() == p.sizes() &&
                        t.dtype() == p.dtype(),
                    name, ": state ", q, " of parameter ", i, " must be a contiguous ",
                    dtype_name(p.dtype()), " ", p.sizes(), " on ", dev.str());
        ts.state[q][k] = t.raw_data();
      }
      ts.numel[k] = p.numel();
      ts.dtype[k] = table_dtype(name, p.dtype(), i);
      ts.first_item[k + 1] =
          ts.first_item[k] + ceil_div(p.numel(), dev::optim_item_elems(ts.dtype[k]));
    }
    ts.count = static_cast<int>(count);
    unsigned* const ticket = last_launch ? step_ticket : nullptr;
    const int64_t items = ts.first_item[count];
    if (items == 0 && ticket == nullptr) continue;
    const unsigned blocks = grid_stride_blocks(items, kThreads, device);
    const auto* h = static_cast<const double*>(hyper.raw_data());
    auto* st = static_cast<float*>(step.raw_data());
    const unsigned* err = device_error_raised(device);
    switch (flags.kind) {
      case dev::kOptAdam:
        dev::optim_update_kernel<dev::kOptAdam><<<blocks, kThreads, 0, s>>>(ts, h, st, ticket, flags, err);
        break;
      case dev::kOptRmsprop:
        dev::optim_update_kernel<dev::kOptRmsprop><<<blocks, kThreads, 0, s>>>(ts, h, st, ticket, flags, err);
        break;
      case dev::kOptAdagrad:
        dev::optim_update_kernel<dev::kOptAdagrad><<<blocks, kThreads, 0, s>>>(ts, h, st, ticket, flags, err);
        break;
    }
    check_launch(flags.kind == dev::kOptAdam      ? "adam_update"
                 : flags.kind == dev::kOptRmsprop ? "rmsprop_update"
                                                  : "adagrad_update");
  }
}

}  // namespace ember::kernels::cuda
