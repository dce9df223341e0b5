#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace ember {

// Where a host read (item()) may find a storage's first bytes sooner than in device memory:
// whoever wrote them (the JIT's CUDA-graph replay of a step, which also copies the loss to
// pinned memory the moment it exists: kernels/cuda/early_read.h) leaves one on the storage.
class HostReadSource {
 public:
  virtual ~HostReadSource() = default;
  // Writes the `bytes` bytes the write tagged `tag` produced to `dst` and returns true; false
  // when this source no longer holds them (the caller reads the device memory instead).
  virtual bool read(uint64_t tag, void* dst, size_t bytes) = 0;
};

struct PendingHostRead {
  std::shared_ptr<HostReadSource> source;  // null: none
  uint64_t tag = 0;
  uint32_t version = 0;  // the storage's version it was left at: a later write voids it
};

// A block of memory shared by a tensor and all its views. The version counter is bumped by
// every in-place write through any view; autograd compares it against saved versions.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  Allocator* allocator = nullptr;  // null: memory not owned (from_blob)
  uint32_t version = 0;
  PendingHostRead pending_read;

  Storage(size_t n, Device d, Allocator* a) : nbytes(n), device(d), allocator(a) {
    data = n ? a->allocate(n) : nullptr;
  }
  Storage(void* p, size_t n, Device d) : data(p), nbytes(n), device(d) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (allocator && data) allocator->deallocate(data, nbytes);
  }
};

using StoragePtr = std::shared_ptr<Storage>;

}  // namespace ember
