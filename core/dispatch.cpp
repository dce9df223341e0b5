#include "core/dispatch.h"

#include <cstring>
#include <vector>

#include "core/autocast.h"
#include "core/cuda_runtime.h"

namespace ember {
namespace {

OpObserver g_autograd_observer = nullptr;
InplaceCheck g_inplace_check = nullptr;
thread_local OpObserver t_trace_observer = nullptr;

Tensor make_view(const Tensor& base, const OutputMeta& m) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->sizes = m.shape;
  impl->strides = m.strides;
  impl->offset = m.offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

// Copies between devices. The source is made contiguous on its own device first, so a single
// flat copy moves it.
Tensor transfer(const Tensor& x, Device to) {
  if (x.device() == to) return x.clone();  // an explicit same-device move still yields a copy
  Tensor src = x.is_contiguous() ? x : x.contiguous();
  Tensor out = make_empty(src.sizes(), src.dtype(), to);
  const size_t n = static_cast<size_t>(src.nbytes());
  if (n == 0) return out;
  const Device from = src.device();
  if (from.is_cpu() && to.is_cuda()) {
    cuda::copy_host_to_device(out.raw_data(), src.raw_data(), n, to.index);
  } else if (from.is_cuda() && to.is_cpu()) {
    cuda::copy_device_to_host(out.raw_data(), src.raw_data(), n, from.index);
  } else if (from.is_cuda() && to.is_cuda()) {
    // Between two GPUs: stage through the host (rare; keeps the runtime interface small).
    std::vector<char> host(n);
    cuda::copy_device_to_host(host.data(), src.raw_data(), n, from.index);
    cuda::copy_host_to_device(out.raw_data(), host.data(), n, to.index);
  }
  return out;
}

}  // namespace

void run_kernel(const KernelCall& call, Device device) {
  if (device.is_cpu()) {
    kernels::run_cpu(call);
  } else {
    kernels::run_cuda(call);
  }
}

void run_transfer(const Tensor& src, const Tensor& out) {
  const size_t n = static_cast<size_t>(out.nbytes());
  if (n == 0) return;
  const Device from = src.device(), to = out.device();
  if (!src.is_contiguous() || (from.is_cuda() && to.is_cuda() && from != to)) {
    Tensor moved = transfer(src, to);  // rare: stage through a fresh tensor
    if (to.is_cpu())
      std::memcpy(out.raw_data(), moved.raw_data(), n);
    else
      cuda::copy_device_to_device(out.raw_data(), moved.raw_data(), n, to.index);
  } else if (from.is_cpu() && to.is_cuda()) {
    cuda::copy_host_to_device(out.raw_data(), src.raw_data(), n, to.index);
  } else if (from.is_cuda() && to.is_cpu()) {
    cuda::copy_device_to_host(out.raw_data(), src.raw_data(), n, from.index);
  } else if (from.is_cpu()) {
    std::memcpy(out.raw_data(), src.raw_data(), n);
  } else {
    cuda::copy_device_to_device(out.raw_data(), src.raw_data(), n, to.index);
  }
}

void set_autograd_observer(OpObserver fn) { g_autograd_observer = fn; }
void set_trace_observer(OpObserver fn) { t_trace_observer = fn; }
OpObserver trace_observer() { return t_trace_observer; }
void set_autograd_inplace_check(InplaceCheck fn) { g_inplace_check = fn; }

namespace {

Tensor dispatch_as_given(OpId op, std::span<const Tensor> inputs, const Attrs& attrs,
                         const Tensor* out) {
  const OpKind kind = op_info(op).kind;
  Tensor result;
  if (kind == OpKind::Nullary) {
    EMBER_CHECK(out && out->defined(), op_name(op), ": needs an output tensor to write into");
    result = *out;
    if (g_inplace_check) g_inplace_check(op, inputs, result);
    ++result.impl()->storage->version;
    if (result.numel() > 0) run_kernel({op, inputs, attrs, result}, result.device());
  } else {
    const OutputMeta m = infer_meta(op, inputs, attrs);
    if (kind == OpKind::MultiTensor) {
      // Updates some of its inputs in place and has no output: its layout says which.
      EMBER_CHECK(!out, op_name(op), ": writes its inputs in place; it takes no output");
      const MultiTensorLayout layout = MultiTensorLayout::of(attrs);
      if (g_inplace_check)
        layout.for_each_written([&](size_t i) { g_inplace_check(op, inputs, inputs[i]); });
      layout.for_each_written([&](size_t i) { ++inputs[i].impl()->storage->version; });
      run_kernel({op, inputs, attrs, result}, m.device);
    } else if (kind == OpKind::View) {
      EMBER_CHECK(!out, op_name(op), ": a view op cannot write into an output");
      result = make_view(inputs[0], m);
    } else if (kind == OpKind::Transfer) {
      EMBER_CHECK(!out, "to_device: cannot write into an output");
      result = transfer(inputs[0], m.device);
    } else {
      if (out) {
        EMBER_CHECK(out->defined(), op_name(op), ": output tensor is undefined");
        EMBER_CHECK(out->sizes() == m.shape, op_name(op), ": result of shape ", m.shape,
                    " cannot be written into a tensor of shape ", out->sizes());
        EMBER_CHECK(out->dtype() == m.dtype, op_name(op), ": result of dtype ", dtype_name(m.dtype),
                    " cannot be written into a tensor of dtype ", dtype_name(out->dtype()));
        EMBER_CHECK(out->device() == m.device, op_name(op), ": result on ", m.device.str(),
                    " cannot be written into a tensor on ", out->device().str());
        result = *out;
        if (g_inplace_check) g_inplace_check(op, inputs, result);
        ++result.impl()->storage->version;
      } else {
        result = make_empty(m.shape, m.dtype, m.device, op_name(op).data());
      }
      if (result.numel() > 0) run_kernel({op, inputs, attrs, result}, result.device());
    }
  }
  if (t_trace_observer) t_trace_observer(op, inputs, attrs, result, out != nullptr);
  if (g_autograd_observer) g_autograd_observer(op, inputs, attrs, result, out != nullptr);
  return result;
}

}  // namespace

Tensor dispatch(OpId op, std::span<const Tensor> inputs, const Attrs& attrs, const Tensor* out) {
  if (autocast_detail::any_enabled() && op_info(op).autocast != AutocastPolicy::None) [[unlikely]] {
    // The casts are dispatched (and so recorded) first, then the op on what they made.
    constexpr size_t kInline = 4;
    Tensor inline_cast[kInline];
    std::vector<Tensor> many;
    std::span<Tensor> cast(inline_cast, inputs.size() <= kInline ? inputs.size() : 0);
    if (inputs.size() > kInline) {
      many.resize(inputs.size());
      cast = many;
    }
    if (autocast_detail::cast_inputs(op, inputs, cast))
      return dispatch_as_given(op, std::span<const Tensor>(cast.data(), cast.size()), attrs, out);
  }
  return dispatch_as_given(op, inputs, attrs, out);
}

}  // namespace ember
