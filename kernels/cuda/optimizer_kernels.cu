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

constexpr int kThreads = 256;  // the kernel's launch bounds

int item_elems(DType t) { return 16 / static_cast<int>(element_size(t)); }

template <dev::OptimKind Kind>
void launch_kind(DType t, unsigned blocks, cudaStream_t s, const dev::OptimTensors& ts,
                 const double* h, float* st, unsigned* ticket, dev::OptimFlags f,
                 const unsigned* err, const float* inf) {
  switch (t) {
    case DType::Float32:
      dev::optim_update_kernel<Kind, float><<<blocks, kThreads, 0, s>>>(ts, h, st, ticket, f, err, inf);
      break;
    case DType::Float64:
      dev::optim_update_kernel<Kind, double><<<blocks, kThreads, 0, s>>>(ts, h, st, ticket, f, err, inf);
      break;
    case DType::Float16:
      dev::optim_update_kernel<Kind, __half><<<blocks, kThreads, 0, s>>>(ts, h, st, ticket, f, err, inf);
      break;
    default:  // BFloat16: the only other dtype the launcher lets through
      dev::optim_update_kernel<Kind, __nv_bfloat16><<<blocks, kThreads, 0, s>>>(ts, h, st, ticket, f, err, inf);
      break;
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
  const float* const inf = found_inf_of(call);
  // One launch per run of up to kOptimMax parameters of one dtype (a group is nearly always a
  // single run); the last launch counts the step.
  for (int64_t base = 0; base < n;) {
    const DType t = in[layout.param(base)].dtype();
    EMBER_CHECK(t == DType::Float32 || t == DType::Float64 || t == DType::Float16 ||
                    t == DType::BFloat16,
                name, ": parameter ", base, " has dtype ", dtype_name(t),
                "; expected a floating dtype");
    dev::OptimTensors ts{};
    ts.states = layout.state_groups;
    int64_t count = 0;
    for (; count < dev::kOptimMax && base + count < n; ++count) {
      const int64_t i = base + count, k = count;
      const Tensor& p = in[layout.param(i)];
      if (p.dtype() != t) break;
      const Tensor& g = in[layout.grad(i)];
      EMBER_CHECK(p.device() == dev && g.device() == dev && p.is_contiguous() &&
                      g.is_contiguous() && g.sizes() == p.sizes() && g.dtype() == p.dtype(),
                  name, ": parameter ", i, " (", dtype_name(p.dtype()), " ", p.sizes(),
                  ") needs a contiguous gradient of its dtype and shape on ", dev.str());
      ts.param[k] = p.raw_data();
      ts.grad[k] = g.raw_data();
      for (int q = 0; q < layout.state_groups; ++q) {
        const Tensor& st = in[layout.state(q, i)];
        EMBER_CHECK(st.device() == dev && st.is_contiguous() && st.sizes() == p.sizes() &&
                        st.dtype() == p.dtype(),
                    name, ": state ", q, " of parameter ", i, " must be a contiguous ",
                    dtype_name(p.dtype()), " ", p.sizes(), " on ", dev.str());
        ts.state[q][k] = st.raw_data();
      }
      ts.numel[k] = p.numel();
      ts.first_item[k + 1] = ts.first_item[k] + ceil_div(p.numel(), item_elems(t));
    }
    ts.count = static_cast<int>(count);
    base += count;
    unsigned* const ticket = base == n ? step_ticket : nullptr;
    const int64_t items = ts.first_item[count];
    if (items == 0 && ticket == nullptr) continue;
    const unsigned blocks = grid_stride_blocks(items, kThreads, device);
    const auto* h = static_cast<const double*>(hyper.raw_data());
    auto* st = static_cast<float*>(step.raw_data());
    const unsigned* err = device_error_raised(device);
    switch (flags.kind) {
      case dev::kOptAdam:
        launch_kind<dev::kOptAdam>(t, blocks, s, ts, h, st, ticket, flags, err, inf);
        break;
      case dev::kOptRmsprop:
        launch_kind<dev::kOptRmsprop>(t, blocks, s, ts, h, st, ticket, flags, err, inf);
        break;
      case dev::kOptAdagrad:
        launch_kind<dev::kOptAdagrad>(t, blocks, s, ts, h, st, ticket, flags, err, inf);
        break;
    }
    check_launch(flags.kind == dev::kOptAdam      ? "adam_update"
                 : flags.kind == dev::kOptRmsprop ? "rmsprop_update"
                                                  : "adagrad_update");
  }
}

}  // namespace ember::kernels::cuda
