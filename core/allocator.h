#pragma once
// Allocators hand out raw device or host memory; Storage returns it through the same allocator.
#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace ember {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns null: throws ember::Error when memory cannot be had.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p, size_t nbytes) = 0;
};

// 64-byte aligned host memory (cache line and AVX-512 friendly).
Allocator* cpu_allocator();
// The caching allocator of CUDA device `index` (throws when CUDA is unavailable).
Allocator* cuda_allocator(int index);
Allocator* allocator_for(Device d);

}  // namespace ember
