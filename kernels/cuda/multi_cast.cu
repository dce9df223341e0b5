// cast_many (multi_cast.h): the jobs travel in the kernel's parameters, the work is one flat list
// of items over all of them (an item is 8 consecutive elements of one job) and the grid strides
// over that list, so one large tensor and many small ones fill the GPU alike, and a thread waits
// on memory once per item, not once per job.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/multi_cast.h"
#include "kernels/cuda/multi_tensor_dtype.h"
#include "kernels/cuda/pointwise.cuh"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kItem = 8;  // elements per item: 16 bytes of a 16-bit type
constexpr int kThreads = 256;

// ~2.9 KB: inside the 4 KB of kernel parameters every architecture takes.
struct CastTable {
  int count;
  const void* src[kMultiCastMax];
  void* dst[kMultiCastMax];
  int64_t numel[kMultiCastMax];
  int64_t first_item[kMultiCastMax + 1];  // job k's items: [first_item[k], first_item[k + 1])
  unsigned char from[kMultiCastMax], to[kMultiCastMax];
};

template <class From, class To>
__device__ __forceinline__ void cast_item(const void* src, void* dst, int64_t e0, int64_t n) {
  const From* s = static_cast<const From*>(src) + e0;
  To* d = static_cast<To*>(dst) + e0;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (e0 + kItem <= n && aligned(s) && aligned(d)) {
    // Whole 16-byte vectors both ways (kItem elements are a multiple of 16 bytes of any type).
    From v[kItem];
    To o[kItem];
#pragma unroll
    for (int c = 0; c < int(sizeof(v) / 16); ++c)
      reinterpret_cast<uint4*>(v)[c] = reinterpret_cast<const uint4*>(s)[c];
#pragma unroll
    for (int i = 0; i < kItem; ++i) o[i] = elementwise::Convert<To>::from(v[i]);
#pragma unroll
    for (int c = 0; c < int(sizeof(o) / 16); ++c)
      reinterpret_cast<uint4*>(d)[c] = reinterpret_cast<const uint4*>(o)[c];
    return;
  }
  const int64_t m = n - e0 < kItem ? n - e0 : kItem;
  for (int64_t i = 0; i < m; ++i) d[i] = elementwise::Convert<To>::from(s[i]);
}

template <class From>
__device__ __forceinline__ void cast_from(unsigned char to, const void* src, void* dst, int64_t e0,
                                          int64_t n) {
  switch (to) {
    case dev::kMtFloat32:
      return cast_item<From, float>(src, dst, e0, n);
    case dev::kMtFloat64:
      return cast_item<From, double>(src, dst, e0, n);
    case dev::kMtFloat16:
      return cast_item<From, __half>(src, dst, e0, n);
    default:
      return cast_item<From, __nv_bfloat16>(src, dst, e0, n);
  }
}

__global__ void __launch_bounds__(kThreads) cast_many_kernel(const CastTable t) {
  const int64_t items = t.first_item[t.count];
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int k = 0;  // the job owning the item: the last whose first item is at or before it
    for (int step = kMultiCastMax / 2; step > 0; step /= 2)
      if (k + step < t.count && t.first_item[k + step] <= item) k += step;
    const int64_t e0 = (item - t.first_item[k]) * kItem;
    const void* src = t.src[k];
    void* dst = t.dst[k];
    const int64_t n = t.numel[k];
    switch (t.from[k]) {
      case dev::kMtFloat32:
        cast_from<float>(t.to[k], src, dst, e0, n);
        break;
      case dev::kMtFloat64:
        cast_from<double>(t.to[k], src, dst, e0, n);
        break;
      case dev::kMtFloat16:
        cast_from<__half>(t.to[k], src, dst, e0, n);
        break;
      default:
        cast_from<__nv_bfloat16>(t.to[k], src, dst, e0, n);
        break;
    }
  }
}

}  // namespace

bool cast_many_supports(DType from, DType to) { return is_floating(from) && is_floating(to); }

void cast_many(int device, std::span<const CastJob> jobs) {
  const cudaStream_t s = stream(device);
  for (size_t base = 0; base < jobs.size(); base += kMultiCastMax) {
    CastTable t{};
    const size_t count = std::min<size_t>(kMultiCastMax, jobs.size() - base);
    t.count = static_cast<int>(count);
    for (size_t k = 0; k < count; ++k) {
      const CastJob& j = jobs[base + k];
      EMBER_CHECK(
          cast_many_supports(j.from, j.to) && j.numel >= 0 && (j.numel == 0 || (j.src && j.dst)),
          "cast_many: job ", base + k, " converts ", dtype_name(j.from), " to ", dtype_name(j.to),
          " over ", j.numel, " elements; expected floating dtypes");
      t.src[k] = j.src;
      t.dst[k] = j.dst;
      t.numel[k] = j.numel;
      t.from[k] = multi_tensor_dtype(j.from, "cast_many", "source", static_cast<int64_t>(base + k));
      t.to[k] = multi_tensor_dtype(j.to, "cast_many", "result", static_cast<int64_t>(base + k));
      t.first_item[k + 1] = t.first_item[k] + ceil_div(j.numel, int64_t{kItem});
    }
    const int64_t items = t.first_item[count];
    if (items == 0) continue;
    cast_many_kernel<<<grid_stride_blocks(items, kThreads, device), kThreads, 0, s>>>(t);
    check_launch("cast_many");
  }
}

}  // namespace ember::kernels::cuda
