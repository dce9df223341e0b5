#pragma once
// The arenas of the executables of one compiled function, shared: its calls run one at a time,
// so the executable of one signature (a batch size) can keep its intermediates in the same
// bytes as another's (without sharing, a function that serves four batch sizes would hold four
// arenas, a peak far above eager's: bench/NOTES.md). Arena k of every
// executable on a device is the same Storage object, grown when a plan needs more: the slots
// read its data pointer at run time, and a captured CUDA graph, which holds the old pointer, is
// captured again (generation() tells an executor the memory moved).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/storage.h"

namespace ember::jit {

class ArenaPool {
 public:
  // The shared storage of arena `index` on `device` (empty until reserve()).
  StoragePtr storage(size_t index, Device device);
  // Makes that storage at least `bytes` long; a larger one replaces the old memory.
  void reserve(size_t index, Device device, size_t bytes);
  uint64_t generation() const { return generation_; }
  // Whether `s` is one of the pool's arenas (a gradient an executable left there, say).
  bool owns(const Storage* s) const {
    for (const Slot& slot : slots_)
      if (slot.storage.get() == s) return true;
    return false;
  }

 private:
  struct Slot {
    size_t index;
    Device device;
    StoragePtr storage;
  };
  std::vector<Slot> slots_;
  uint64_t generation_ = 0;
};

}  // namespace ember::jit
