#include "jit/arena_pool.h"

#include "core/allocator.h"

namespace ember::jit {

StoragePtr ArenaPool::storage(size_t index, Device device) {
  for (const Slot& s : slots_)
    if (s.index == index && s.device == device) return s.storage;
  slots_.push_back(
      {index, device, std::make_shared<Storage>(size_t{0}, device, allocator_for(device))});
  return slots_.back().storage;
}

void ArenaPool::reserve(size_t index, Device device, size_t bytes) {
  Storage& s = *storage(index, device);
  if (s.nbytes >= bytes) return;
  // Free before allocating: the old bytes are dead (calls run one at a time, and on a device
  // the caching allocator hands memory back in stream order), so the two never coexist. The
  // generation moves first, so that if the allocation fails (out of memory) every executable
  // sees its arena changed and asks again instead of running on the freed bytes.
  if (s.data) s.allocator->deallocate(s.data, s.nbytes);
  s.data = nullptr;
  s.nbytes = 0;
  ++generation_;
  s.data = s.allocator->allocate(bytes);
  s.nbytes = bytes;
}

}  // namespace ember::jit
