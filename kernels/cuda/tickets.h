#pragma once
// Counters a kernel finds at zero and leaves at zero (a split reduction's tickets, one per
// tile), held by a compiled step's lowering for as long as it lives: distinct ranges, since
// kernels of side branches may run at once. They come from a per-device pool outside the
// caching allocator, like the eager kernels' finish scratch (runtime.h): kernel bookkeeping,
// not tensor memory, so a compiled step's memory figures count what eager's count.
// Implemented in runtime.cpp; no CUDA types, for the JIT's lowerings.
#include <cstdint>

namespace ember::kernels::cuda {

// `count` zeroed counters on device `dev`. May allocate and zero them: not inside a CUDA-graph
// capture.
unsigned* acquire_tickets(int dev, int64_t count);
// Returns a range acquire_tickets gave; its counters must be back at zero.
void release_tickets(int dev, unsigned* tickets, int64_t count);

}  // namespace ember::kernels::cuda
