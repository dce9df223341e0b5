// amp_unscale on the CPU: GradScaler's unscale of every gradient of an optimizer in one call,
// in place, with the inf/NaN check. Inputs (validated by meta, core/meta.cpp; layout:
// MultiTensorLayout with grads_only):
//   [inv_scale float32 [1], found_inf float32 scalar, grads[n]]
// Each gradient becomes g * inv_scale (rounded to its dtype; 16-bit floats compute in float,
// float64 in double); found_inf becomes 1 if any gradient is not finite and is left alone
// otherwise, so calls for several optimizers or dtypes accumulate into one flag, as PyTorch's
// _amp_foreach_non_finite_check_and_unscale_ does.
#include <atomic>
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {

void amp_unscale(const KernelCall& call) {
  const MultiTensorLayout layout = MultiTensorLayout::of(call.attrs);
  const auto& in = call.inputs;
  EMBER_CHECK(layout.n > 0 && layout.lists == 1 && in.size() == layout.inputs(),
              "amp_unscale: expected ", layout.inputs(), " tensors for ", layout.n,
              " gradients, got ", in.size());
  const Tensor &inv = in[MultiTensorLayout::kHyper], &found = in[MultiTensorLayout::kStep];
  EMBER_CHECK(inv.dtype() == kFloat32 && inv.numel() == 1 && found.dtype() == kFloat32 &&
                  found.numel() == 1,
              "amp_unscale: expected a float32 inv_scale [1] and a float32 found_inf, got ",
              dtype_name(inv.dtype()), " ", inv.sizes(), " and ", dtype_name(found.dtype()), " ",
              found.sizes());
  const float inv_scale = *static_cast<const float*>(inv.raw_data());
  std::atomic<bool> bad{false};
  for (int64_t i = 0; i < layout.n; ++i) {
    const Tensor& g = in[layout.param(i)];
    EMBER_CHECK(g.is_contiguous(), "amp_unscale: gradient ", i, " (", g.sizes(), ", strides ",
                g.strides(), ") must be contiguous");
    visit_dtype(g.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        EMBER_FAIL("amp_unscale: gradient ", i, " has dtype ", dtype_name(g.dtype()),
                   "; expected a floating dtype");
      } else {
        using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
        T* p = static_cast<T*>(g.raw_data());
        const Acc s = static_cast<Acc>(inv_scale);
        parallel_for(g.numel(), kParallelGrainElements, [&](int64_t b, int64_t e) {
          bool range_bad = false;
          for (int64_t k = b; k < e; ++k) {
            const Acc v = static_cast<Acc>(p[k]);
            range_bad |= !std::isfinite(v);  // the scaled gradient, as PyTorch checks it
            p[k] = static_cast<T>(v * s);
          }
          if (range_bad) bad.store(true, std::memory_order_relaxed);
        });
      }
    });
  }
  if (bad.load()) *static_cast<float*>(found.raw_data()) = 1.0f;
}

}  // namespace ember::kernels::cpu
