#pragma once
// Allocators hand out raw device or host memory; Storage returns it through the same allocator.
#include <cstddef>
#include <cstdint>

#include "core/cuda_runtime.h"
#include "core/device.h"

namespace ember {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns null: throws ember::Error when memory cannot be had.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
};

// 64-byte aligned host memory (cache line and AVX-512 friendly), through a caching allocator
// (core/caching_allocator.h) except in AddressSanitizer builds.
Allocator* cpu_allocator();
// The caching allocator of CUDA device `index` (throws when CUDA is unavailable).
Allocator* cuda_allocator(int index);
Allocator* allocator_for(Device d);

// The host cache, like ember::cuda's memory_stats / empty_cache (the stats' num_device_mallocs
// counts the C library allocations). Without a cache (ASan builds) the stats are all zero.
namespace cpu {
bool caches_memory();
cuda::AllocatorStats memory_stats();
void reset_peak_memory_stats();
void empty_cache();  // returns cached free blocks to the C library
}  // namespace cpu

}  // namespace ember
