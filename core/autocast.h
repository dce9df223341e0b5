#pragma once
/// \file
/// Automatic mixed precision (AutocastGuard), like `torch.autocast`.
///
/// Within an autocast region, ops run in the dtype PyTorch's autocast picks for them, given by
/// the `autocast` key of their op-table row (core/ops.yaml):
///
/// - `lower` (mm, bmm, conv2d, attention; nn::Linear): floating inputs cast to the region's low
///   dtype.
/// - `fp32` (exp, log, rsqrt, pow, softplus, softmax, log_softmax, cross_entropy, sum; layer
///   norm): 16-bit floating inputs cast to float32.
/// - `promote` (cat, scatter_add): mixed floating inputs widened to the widest (float32 when
///   float16 meets bfloat16).
///
/// Everything else runs on what it is given (a ReLU after a bfloat16 product stays bfloat16).
/// float64 tensors are never cast, as in PyTorch. The casts are ordinary `cast` ops, recorded by
/// autograd (the gradient flows back to the float32 parameter in float32) and by the JIT's
/// tracer, which fuses them into their neighbours.
///
/// \code
/// Tensor loss;
/// {
///   ember::AutocastGuard amp(DeviceType::CUDA, kBFloat16);  // or kFloat16; enabled flag third
///   loss = criterion(model->forward(x), y);
/// }
/// loss.backward();  // outside, as PyTorch advises
/// \endcode
///
/// State is per thread and per device type (CPU and CUDA have their own, as in PyTorch). The cast
/// of a parameter (a leaf that requires grad) is made once per region and reused while the
/// parameter is unchanged (its version counter), so a weight used twice in a step is cast once.
/// The cache is dropped when the outermost region ends. Backward (autograd's engine) runs with
/// autocast off: each backward op sees the dtypes its forward op saw. A compiled function's
/// signature includes the autocast state, so entering or leaving a region retraces.
#include <cstdint>
#include <span>

#include "core/op.h"
#include "core/tensor.h"

namespace ember {

/// Opens (or, with enabled = false, closes) an autocast region on `device` for its scope, like
/// `with torch.autocast(device_type, dtype)`; the previous state comes back when it ends, so
/// guards nest.
class AutocastGuard {
 public:
  /// Enters the region: ops on `device` tensors in this thread autocast to `dtype` (kBFloat16 or
  /// kFloat16, on either device; anything else throws ember::Error), or do not autocast at all
  /// when `enabled` is false.
  AutocastGuard(DeviceType device, DType dtype = kBFloat16, bool enabled = true);
  /// Restores the state the constructor found; the outermost guard also drops the cached
  /// parameter casts.
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
};
/// PyTorch's name for AutocastGuard: `ember::autocast amp(DeviceType::CUDA);`.
using autocast = AutocastGuard;

/// Whether an autocast region is enabled on `device` in this thread, like
/// `torch.is_autocast_enabled(device_type)`.
bool autocast_enabled(DeviceType device);
/// The low dtype a region on `device` casts to (kBFloat16 until a guard sets another), like
/// `torch.get_autocast_dtype(device_type)`.
DType autocast_dtype(DeviceType device);

/// The autocast state of this thread as one word (every device type's enabled flag and dtype),
/// for keys that must change with it (the JIT's signatures). 0 when autocast is off everywhere.
uint32_t autocast_key();

namespace autocast_detail {
// Whether any autocast region is open on this thread: one inline thread-local read on
// dispatch's path (set by AutocastGuard).
inline thread_local bool t_any_enabled = false;
inline bool any_enabled() { return t_any_enabled; }
// What dispatch does to an op's inputs under autocast, by the op's row: casts where the policy
// asks, into `out` (same length as `in`). Returns false (and leaves `out` alone) when nothing
// needs a cast.
bool cast_inputs(OpId op, std::span<const Tensor> in, std::span<Tensor> out);
// Drops the cached parameter casts (the JIT calls it before tracing, so a trace never captures a
// cast made outside it).
void clear_cache();
}  // namespace autocast_detail

/// `t` as an op of the `lower` policy would see it under the current autocast state: cast to the
/// region's low dtype. For layers built from several ops that PyTorch treats as one autocast op
/// (Linear). Returns `t` itself outside a region on t's device type, for non-floating tensors
/// and for float64.
Tensor autocast_lower(const Tensor& t);
/// `t` as an op of the `fp32` policy would see it: a 16-bit floating `t` cast to float32 inside
/// a region on t's device type (for LayerNorm), else `t` itself.
Tensor autocast_fp32(const Tensor& t);

}  // namespace ember
