// max_pool2d and its backward row on the CPU: planes (sample, channel) in parallel, the window
// arithmetic of kernels/max_pool.h.
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/max_pool.h"

namespace ember::kernels::cpu {
namespace {

PoolGeometry<int64_t> geometry(const Tensor& x, const Shape& y, const Attrs& a) {
  return {x.size(2),         x.size(3),         y[2],
          y[3],              a.window[0],       a.window[1],
          a.conv_stride[0],  a.conv_stride[1],  a.conv_padding[0],
          a.conv_padding[1], a.conv_dilation[0], a.conv_dilation[1]};
}

template <class T>
void run(const KernelCall& call) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const bool fwd = call.op == OpId::max_pool2d;
  const Tensor& x = fwd ? call.inputs[0] : call.inputs[1];
  const Shape ys = fwd ? call.out.sizes() : call.inputs[0].sizes();
  const PoolGeometry<int64_t> g = geometry(x, ys, call.attrs);
  const int64_t planes = x.size(0) * x.size(1), in = g.h * g.w, out = g.oh * g.ow;
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(call.out.raw_data());
  const int64_t work = fwd ? out * g.kh * g.kw : in * g.kh * g.kw;
  const int64_t grain = std::max<int64_t>(1, kParallelGrainElements / std::max<int64_t>(1, work));
  if (fwd) {
    parallel_for(planes, grain, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t at = window_argmax<C, T, int64_t>(px + p * in, g, oy, ox);
            po[p * out + oy * g.ow + ox] = at < 0 ? T(0) : px[p * in + at];
          }
    });
    return;
  }
  const T* pg = static_cast<const T*>(call.inputs[0].raw_data());
  parallel_for(planes, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t y = 0; y < g.h; ++y)
        for (int64_t xx = 0; xx < g.w; ++xx)
          po[p * in + y * g.w + xx] =
              T(pool_input_grad<C, T, int64_t>(px + p * in, pg + p * out, g, y, xx));
  });
}

}  // namespace

void pool(const KernelCall& call) {
  for (const Tensor& t : call.inputs)
    EMBER_CHECK(t.is_contiguous(), op_name(call.op), ": the CPU kernel takes contiguous tensors");
  if (call.out.numel() == 0) return;
  visit_dtype(call.out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      run<T>(call);
    } else {
      EMBER_FAIL(op_name(call.op), ": unsupported dtype ", dtype_name(call.out.dtype()));
    }
  });
}

}  // namespace ember::kernels::cpu
