#pragma once
/// \file
/// Storage, the refcounted block of memory behind a tensor and all its views.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace ember {

/// Where a host read (Tensor::item()) may find a storage's first bytes sooner than in device
/// memory.
///
/// Whoever wrote them (the JIT's CUDA-graph replay of a step, which also copies the loss to
/// pinned memory the moment it exists: kernels/cuda/early_read.h) leaves one on the storage
/// (Storage::pending_read). Users do not implement this.
class HostReadSource {
 public:
  virtual ~HostReadSource() = default;
  /// Writes the `bytes` bytes the write tagged `tag` produced to `dst` and returns true; false
  /// when this source no longer holds them (the caller reads the device memory instead).
  virtual bool read(uint64_t tag, void* dst, size_t bytes) = 0;
};

/// A HostReadSource left on a storage, valid while the storage's version is unchanged.
struct PendingHostRead {
  std::shared_ptr<HostReadSource> source;  ///< The source; null: none.
  uint64_t tag = 0;                        ///< Which write of the source produced the bytes.
  /// The storage's version it was left at: a later write voids it.
  uint32_t version = 0;
};

/// A block of memory shared by a tensor and all its views, like `torch.UntypedStorage`.
///
/// The version counter is bumped by every in-place write through any view; autograd compares it
/// against saved versions (modifying a tensor that backward still needs is an ember::Error).
/// Owned memory goes back to its allocator when the last tensor using it is gone.
struct Storage {
  void* data = nullptr;  ///< The first byte (a device pointer for CUDA); null when empty.
  size_t nbytes = 0;     ///< Size of the block in bytes.
  Device device;         ///< Where the memory lives.
  /// The allocator that frees `data`; null: memory not owned (a non-owning Storage).
  Allocator* allocator = nullptr;
  uint32_t version = 0;          ///< Bumped by every in-place write through any view.
  PendingHostRead pending_read;  ///< A faster source for a host read of the first bytes, if any.

  /// Host blocks this small live inside the Storage itself: a wrapped number, a 0-dim loss or
  /// a step count would otherwise each take a 512-byte block of the host cache (and its lock).
  static constexpr size_t kInlineBytes = 16;

  /// Allocates `n` bytes on `d` from `a` (no allocation when `n` is 0, none from `a` for host
  /// blocks of at most kInlineBytes); throws ember::Error when the memory cannot be had.
  Storage(size_t n, Device d, Allocator* a) : nbytes(n), device(d), allocator(a) {
    if (n == 0) return;
    if (d.is_cpu() && n <= kInlineBytes) {
      data = inline_;
      allocator = nullptr;  // nothing to give back
      return;
    }
    data = a->allocate(n);
  }
  /// Wraps `n` bytes at `p` on `d` without owning them: the caller keeps them alive and frees
  /// them.
  Storage(void* p, size_t n, Device d) : data(p), nbytes(n), device(d) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  /// Returns owned memory to its allocator.
  ~Storage() {
    if (allocator && data) allocator->deallocate(data, nbytes);
  }

 private:
  alignas(16) unsigned char inline_[kInlineBytes] = {};
};

/// The shared handle tensors hold to their storage.
using StoragePtr = std::shared_ptr<Storage>;

}  // namespace ember
