#pragma once
// Events the JIT's tracer needs besides dispatched ops (core/dispatch.h's trace observer): tensors
// born outside dispatch, host bytes written into them, host reads of tensor data, reads and
// writes of a parameter's .grad slot, backward passes, and calls no replay can repeat. Core and
// autograd call these through one thread-local pointer, so code outside a trace pays one
// predictable branch; nothing here includes jit/.
#include <source_location>

#include "core/tensor.h"

namespace ember {

struct TraceHooks {
  // make_empty made `t` (contents undefined until something writes them).
  void (*on_new_tensor)(const Tensor& t) = nullptr;
  // The host wrote bytes into the fresh CPU tensor `t` (from_blob_copy, wrap_scalar).
  void (*on_host_data)(const Tensor& t) = nullptr;
  // The host is about to read the data of `t` (`what`: item, to_vector, data_ptr, to(cpu)).
  void (*on_host_read)(const Tensor& t, const char* what,
                       const std::source_location& where) = nullptr;
  // `param`'s .grad slot now holds `grad` (undefined: cleared).
  void (*on_grad_set)(const Tensor& param, const Tensor& grad) = nullptr;
  // Code read `param`'s .grad slot, which holds `grad` (undefined: none): Tensor::grad(), and
  // the backward engine before it accumulates into the slot.
  void (*on_grad_read)(const Tensor& param, const Tensor& grad) = nullptr;
  // The backward engine ran (autograd::backward).
  void (*on_backward)() = nullptr;
  // Code did something a replay could not repeat (`what`: "broadcast", "barrier"), for `reason`.
  void (*on_untraceable)(const char* what, const char* reason,
                         const std::source_location& where) = nullptr;
};

// detail::t_trace_hooks and note_host_read are declared in core/tensor.h (its inline accessors
// call them).
inline const TraceHooks* trace_hooks() { return detail::t_trace_hooks; }
inline void set_trace_hooks(const TraceHooks* hooks) { detail::t_trace_hooks = hooks; }

}  // namespace ember
