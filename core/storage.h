#pragma once
#include <atomic>
#include <cstddef>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace ember {

namespace cuda {
struct EarlyRead;  // core/cuda_runtime.h
}

// A block of memory shared by a tensor and all its views. The version counter is bumped by
// every in-place write through any view; autograd compares it against saved versions.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  Allocator* allocator = nullptr;  // null: memory not owned (from_blob)
  uint32_t version = 0;
  // A CUDA-graph replay's returned scalar: a pinned copy item() may read instead (see
  // cuda::read_early), valid while the storage is still at `early_version` and the replay
  // `early_seq` is the slot's latest.
  std::shared_ptr<cuda::EarlyRead> early;
  uint64_t early_seq = 0;
  uint32_t early_version = 0;

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
