// amp_unscale on CUDA: GradScaler's unscale of every gradient of an optimizer in one launch per
// dtype (more only past kAmpMax tensors), in place, with the inf/NaN check. Inputs (validated by
// meta; MultiTensorLayout with grads_only): [inv_scale float32 [1], found_inf float32 scalar,
// grads[n]]. inv_scale is read on the device, and found_inf written there (1 by any thread that
// meets a non-finite gradient, else left alone), so the step replays in a CUDA graph with no
// host read. The work is the flat list of 16-byte items of multi_tensor.cuh.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"

namespace ember::kernels::cuda {
namespace dev {

inline constexpr int kAmpMax = 96;

// ~2.3 KB of kernel parameters.
struct AmpTensors {
  int count;
  void* grad[kAmpMax];
  int64_t numel[kAmpMax];
  int64_t first_item[kAmpMax + 1];
};

template <class T>
__global__ void __launch_bounds__(256) amp_unscale_kernel(AmpTensors ts,
                                                          const float* __restrict__ inv_scale,
                                                          float* found_inf) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  constexpr int kVec = 16 / sizeof(T);
  const Acc s = static_cast<Acc>(*inv_scale);
  const int64_t items = ts.first_item[ts.count];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  int k = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += stride) {
    while (i >= ts.first_item[k + 1]) ++k;
    T* g = static_cast<T*>(ts.grad[k]);
    const int64_t j = i - ts.first_item[k], n = ts.numel[k], lo = j * kVec;
    if (lo + kVec <= n && reinterpret_cast<unsigned long long>(g) % 16 == 0) {
      uint4 w = reinterpret_cast<const uint4*>(g)[j];
      T* e = reinterpret_cast<T*>(&w);
#pragma unroll
      for (int q = 0; q < kVec; ++q) {
        const Acc v = to_acc<Acc>(e[q]);
        bad |= !isfinite(v);
        e[q] = from_acc<T>(v * s);
      }
      reinterpret_cast<uint4*>(g)[j] = w;
    } else {
      const int64_t hi = lo + kVec < n ? lo + kVec : n;
      for (int64_t q = lo; q < hi; ++q) {
        const Acc v = to_acc<Acc>(g[q]);
        bad |= !isfinite(v);
        g[q] = from_acc<T>(v * s);
      }
    }
  }
  if (bad) *found_inf = 1.0f;  // every writer writes the same value
}

}  // namespace dev

namespace {

constexpr int kThreads = 256;

template <class T>
void launch(unsigned blocks, cudaStream_t s, const dev::AmpTensors& ts, const float* inv,
            float* found) {
  dev::amp_unscale_kernel<T><<<blocks, kThreads, 0, s>>>(ts, inv, found);
}

}  // namespace

const float* found_inf_of(const KernelCall& call) {
  const MultiTensorLayout layout = MultiTensorLayout::of(call.attrs);
  if (!layout.reads_found_inf) return nullptr;
  const Tensor& f = call.inputs[layout.found_inf()];
  const Device dev = call.inputs[layout.param(0)].device();
  EMBER_CHECK(f.dtype() == kFloat32 && f.numel() == 1 && f.device() == dev, op_name(call.op),
              ": found_inf must be a float32 scalar on ", dev.str());
  return static_cast<const float*>(f.raw_data());
}

void amp_unscale(const KernelCall& call) {
  const MultiTensorLayout layout = MultiTensorLayout::of(call.attrs);
  const auto& in = call.inputs;
  const int64_t n = layout.n;
  EMBER_CHECK(n > 0 && layout.lists == 1 && in.size() == layout.inputs(),
              "amp_unscale: expected ", layout.inputs(), " tensors for ", n, " gradients, got ",
              in.size());
  const Tensor &inv = in[MultiTensorLayout::kHyper], &found = in[MultiTensorLayout::kStep];
  const Device dev = in[layout.param(0)].device();
  EMBER_CHECK(inv.dtype() == kFloat32 && inv.numel() == 1 && inv.device() == dev &&
                  found.dtype() == kFloat32 && found.numel() == 1 && found.device() == dev,
              "amp_unscale: expected a float32 inv_scale [1] and a float32 found_inf on ",
              dev.str());
  const int device = dev.index;
  cudaStream_t s = stream(device);
  for (int64_t base = 0; base < n;) {
    const DType t = in[layout.param(base)].dtype();
    dev::AmpTensors ts{};
    int64_t count = 0;
    for (; count < dev::kAmpMax && base + count < n; ++count) {
      const Tensor& g = in[layout.param(base + count)];
      if (g.dtype() != t) break;
      EMBER_CHECK(g.device() == dev && g.is_contiguous(), "amp_unscale: gradient ", base + count,
                  " (", g.sizes(), " on ", g.device().str(), ") must be contiguous on ",
                  dev.str());
      ts.grad[count] = g.raw_data();
      ts.numel[count] = g.numel();
      ts.first_item[count + 1] =
          ts.first_item[count] + ceil_div(g.numel(), 16 / static_cast<int64_t>(element_size(t)));
    }
    ts.count = static_cast<int>(count);
    base += count;
    const int64_t items = ts.first_item[count];
    if (items == 0) continue;
    const unsigned blocks = grid_stride_blocks(items, kThreads, device);
    const auto* iv = static_cast<const float*>(inv.raw_data());
    auto* fo = static_cast<float*>(found.raw_data());
    switch (t) {
      case DType::Float32:
        launch<float>(blocks, s, ts, iv, fo);
        break;
      case DType::Float64:
        launch<double>(blocks, s, ts, iv, fo);
        break;
      case DType::Float16:
        launch<__half>(blocks, s, ts, iv, fo);
        break;
      case DType::BFloat16:
        launch<__nv_bfloat16>(blocks, s, ts, iv, fo);
        break;
      default:
        EMBER_FAIL("amp_unscale: gradient ", base - count, " has dtype ", dtype_name(t),
                   "; expected a floating dtype");
    }
    check_launch("amp_unscale");
  }
}

}  // namespace ember::kernels::cuda
