// Launcher of multi_tensor.cuh: sgd_update for all parameters of a group in one launch (more
// launches only past kMultiTensorMax tensors). Inputs, as validated by meta:
//   [hyper float32[4], step float32 scalar, params[n], grads[n], (momentum buffers[n])]
// Nothing here reads device memory or synchronizes, so the update can be captured in a graph.
// attrs.increment_step: only the last launch counts the step (launches on one stream run in
// order, so every earlier launch has read it by then), through the device's step ticket
// (runtime.h); nothing else uses that ticket, and every sgd_update of a device runs on its one
// stream, so no two launches hold it at once.
#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/multi_tensor.cuh"

namespace ember::kernels::cuda {
namespace {

constexpr int kThreads = 256;

void sgd_update(const KernelCall& call) {
  const auto& in = call.inputs;
  const Attrs& a = call.attrs;
  const int64_t n = a.num_tensors;
  const MultiTensorLayout layout = MultiTensorLayout::of(a);
  const size_t want = layout.inputs();
  EMBER_CHECK(n > 0 && in.size() == want, "sgd_update: expected ", want, " tensors for ", n,
              " parameters, got ", in.size());
  const Tensor &hyper = in[0], &step = in[1];
  const Device dev = in[2].device();
  EMBER_CHECK(hyper.dtype() == kFloat32 && hyper.numel() == 4 && hyper.is_contiguous() &&
                  hyper.device() == dev && step.dtype() == kFloat32 && step.numel() == 1 &&
                  step.device() == dev,
              "sgd_update: expected float32 hyperparameters [4] and a float32 step on ", dev.str());
  const int device = dev.index;
  cudaStream_t s = stream(device);
  const dev::SgdFlags flags{a.nesterov, a.maximize, a.momentum_buffers};
  unsigned* const step_ticket = a.increment_step ? finish_scratch(device).step_ticket : nullptr;
  const float* const found_inf = found_inf_of(call);
  for (int64_t base = 0; base < n; base += dev::kMultiTensorMax) {
    const bool last_launch = base + dev::kMultiTensorMax >= n;
    dev::SgdTensors ts{};
    const int64_t count = std::min<int64_t>(dev::kMultiTensorMax, n - base);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = base + k;
      const Tensor& p = in[static_cast<size_t>(2 + i)];
      const Tensor& g = in[static_cast<size_t>(2 + n + i)];
      const Tensor* b = a.momentum_buffers ? &in[static_cast<size_t>(2 + 2 * n + i)] : nullptr;
      EMBER_CHECK(p.device() == dev && g.device() == dev && (!b || b->device() == dev) &&
                      p.is_contiguous() && g.is_contiguous() && (!b || b->is_contiguous()) &&
                      g.sizes() == p.sizes() && g.dtype() == p.dtype() &&
                      (!b || (b->sizes() == p.sizes() && b->dtype() == p.dtype())),
                  "sgd_update: parameter ", i, " (", dtype_name(p.dtype()), " ", p.sizes(),
                  ") needs a contiguous gradient", b ? " and momentum buffer" : "",
                  " of its dtype and shape on ", dev.str());
      ts.param[k] = p.raw_data();
      ts.grad[k] = g.raw_data();
      ts.buf[k] = b ? b->raw_data() : nullptr;
      ts.numel[k] = p.numel();
      ts.dtype[k] = multi_tensor_dtype(p.dtype(), "sgd_update", "parameter", i);
      ts.first_item[k + 1] =
          ts.first_item[k] + ceil_div(p.numel(), dev::sgd_item_elems(ts.dtype[k]));
    }
    ts.count = static_cast<int>(count);
    unsigned* const ticket = last_launch ? step_ticket : nullptr;
    const int64_t items = ts.first_item[count];
    // Empty tensors need no launch, unless this one counts the step (one block then).
    if (items == 0 && ticket == nullptr) continue;
    // A thread per item, up to what the device holds at once (then the grid strides).
    dev::sgd_update_kernel<<<grid_stride_blocks(items, kThreads, device), kThreads, 0, s>>>(
        ts, static_cast<const float*>(hyper.raw_data()), static_cast<float*>(step.raw_data()),
        ticket, flags, device_error_raised(device), found_inf);
    check_launch("sgd_update");
  }
}

}  // namespace

void multi_tensor(const KernelCall& call) {
  switch (call.op) {
    case OpId::sgd_update:
      return sgd_update(call);
    case OpId::amp_unscale:
      return amp_unscale(call);
    default:
      return optimizer_update(call);  // the Adam family (optimizer_kernels.cu)
  }
}

}  // namespace ember::kernels::cuda
