#pragma once
/// \file
/// Allocators, which hand out raw host or device memory, and the host cache's statistics.
///
/// Storage returns memory through the allocator it came from.
#include <cstddef>
#include <cstdint>

#include "core/cuda_runtime.h"
#include "core/device.h"

namespace ember {

/// A source of raw memory for one device, like `c10::Allocator`.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// `nbytes` bytes of uninitialised memory. Never returns null: throws ember::Error when memory
  /// cannot be had.
  virtual void* allocate(size_t nbytes) = 0;
  /// Returns `p`, which allocate(`nbytes`) of this allocator handed out.
  virtual void deallocate(void* p, size_t nbytes) = 0;
};

/// The host allocator: 64-byte aligned memory (cache line and AVX-512 friendly), through a
/// caching allocator (core/caching_allocator.h) except in AddressSanitizer builds.
Allocator* cpu_allocator();
/// The caching allocator of CUDA device `index` (throws ember::Error when CUDA is unavailable).
Allocator* cuda_allocator(int index);
/// cpu_allocator() or cuda_allocator(d.index), by the device's type.
Allocator* allocator_for(Device d);

// The host memory cache, like ember::cuda's memory_stats / empty_cache. In the stats,
// num_device_mallocs counts the C library allocations. Without a cache (ASan builds) the stats
// are all zero.
namespace cpu {
/// Whether host tensors go through the caching allocator (false in AddressSanitizer builds).
bool caches_memory();
/// The host cache's figures, as cuda::memory_stats reports them for a CUDA device;
/// `num_device_mallocs` counts the C library allocations (cache misses), `reserved` the bytes
/// obtained from it. All zero without a cache (caches_memory() false).
cuda::AllocatorStats memory_stats();
/// Sets the peak (`peak_allocated`) to what is allocated now.
void reset_peak_memory_stats();
/// Returns cached free blocks to the C library (memory in use stays).
void empty_cache();
}  // namespace cpu

}  // namespace ember
