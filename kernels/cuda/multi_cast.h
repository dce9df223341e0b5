#pragma once
// Many dtype conversions in one launch (multi_cast.cu): what the JIT's Casts groups run, e.g.
// autocast's per-step casts of every weight to bfloat16, which are otherwise one small launch
// each. No CUDA types, for the JIT's lowering.
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace ember::kernels::cuda {

// dst[i] = src[i] converted from `from` to `to` for i < numel; both dense (contiguous).
struct CastJob {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t numel = 0;
  DType from = kFloat32, to = kFloat32;
};

// Whether cast_many converts between these dtypes (the floating ones).
bool cast_many_supports(DType from, DType to);

// Queues the conversions on stream(device): one launch per kMultiCastMax jobs. Each element is
// converted exactly as the eager cast kernel converts it (the same conversion functions), so the
// results are its bits. Nothing here allocates or synchronizes: it can be captured in a graph.
inline constexpr int kMultiCastMax = 64;
void cast_many(int device, std::span<const CastJob> jobs);

}  // namespace ember::kernels::cuda
