#pragma once
/// \file
/// The narrow interface core needs from the CUDA runtime: devices, synchronization, copies and
/// the allocator's figures.
///
/// Implemented in kernels/cuda (or by a stub that reports CUDA as unavailable when Ember is built
/// without it: is_available() is false and the other calls throw ember::Error). Every call that
/// takes a device index throws ember::Error for a device that does not exist. What only the JIT's
/// replays use (graph capture, early reads, timelines) is declared beside its implementation:
/// kernels/cuda/graph.h, kernels/cuda/early_read.h, kernels/cuda/timeline.h.
#include <cstddef>
#include <cstdint>

namespace ember::cuda {

/// Built with CUDA and at least one device visible, like `torch.cuda.is_available()`.
bool is_available();
/// The number of visible CUDA devices (0 without CUDA), like `torch.cuda.device_count()`.
int device_count();
/// Built with cuDNN: conv2d runs on it (else nn's conv falls back).
bool has_cudnn();
/// Waits until all work queued on `device`'s stream has finished, like
/// `torch.cuda.synchronize()`. Also raises, as ember::Error, errors flagged by kernels (an index
/// out of range in gather or cross_entropy).
void synchronize(int device = 0);
/// Copies `n` bytes from host `src` to device memory `dst` on the device's stream. Returns once
/// `src` may be reused (from page-locked memory that means once the copy has read it).
void copy_host_to_device(void* dst, const void* src, size_t n, int device);
/// Copies `n` bytes from device memory `src` to host `dst` on the device's stream; returns once
/// `dst` holds them (a synchronization with the stream).
void copy_device_to_host(void* dst, const void* src, size_t n, int device);
/// Copies `n` bytes between device addresses, queued on `device`'s stream (returns at once;
/// later work on the stream sees the result). The source may be on another device.
void copy_device_to_device(void* dst, const void* src, size_t n, int device);

/// `n` bytes of page-locked host memory (the DataLoader's staging), like
/// `torch.Tensor.pin_memory()`'s buffers; free with free_pinned(). A host-to-device copy from it
/// with copy_pinned_to_device() is queued and returns at once.
void* alloc_pinned(size_t n);
/// Frees memory from alloc_pinned() (null is ignored; never throws).
void free_pinned(void* p);
/// An opaque handle to a queued pinned-memory copy; wait_copy() waits for it and frees it.
struct CopyEvent;
/// Queues a copy of `n` bytes from pinned host `src` (from alloc_pinned()) to device `dst` and
/// returns at once. `src` must stay untouched until wait_copy() on the returned event returns.
CopyEvent* copy_pinned_to_device(void* dst, const void* src, size_t n, int device);
/// Blocks until the copy has read its source, then frees `e` (null is ignored).
void wait_copy(CopyEvent* e);

/// A caching allocator's figures, like `torch.cuda.memory_stats()` (also used for the host cache,
/// ember::cpu::memory_stats()).
struct AllocatorStats {
  int64_t allocated = 0;           ///< Bytes in live blocks handed out.
  int64_t reserved = 0;            ///< Bytes obtained from cudaMalloc (cached blocks included).
  int64_t peak_allocated = 0;      ///< High-water mark of `allocated`.
  int64_t num_allocs = 0;          ///< allocate() calls.
  int64_t num_device_mallocs = 0;  ///< cudaMalloc calls (cache misses).
};
/// The figures of `device`'s caching allocator, like `torch.cuda.memory_stats()`.
AllocatorStats memory_stats(int device = 0);
/// Sets `device`'s peak_allocated to what is allocated now, like
/// `torch.cuda.reset_peak_memory_stats()`.
void reset_peak_memory_stats(int device = 0);
/// Returns cached free blocks of every device to the driver, like `torch.cuda.empty_cache()`.
void empty_cache();
/// What the driver reports for the whole device (cudaMemGetInfo): memory outside Ember's cache
/// counts as used, blocks cached by the allocator too.
struct DeviceMemoryInfo {
  int64_t free = 0;   ///< Bytes the driver could still hand out.
  int64_t total = 0;  ///< Bytes on the device.
};
/// The driver's free and total memory of `device`, like `torch.cuda.mem_get_info()`.
DeviceMemoryInfo memory_info(int device = 0);

}  // namespace ember::cuda
