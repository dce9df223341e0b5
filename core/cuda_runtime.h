#pragma once
// The narrow interface core needs from the CUDA runtime: devices, synchronization, copies and
// the allocator's figures. Implemented in kernels/cuda (or by a stub that reports CUDA as
// unavailable when Ember is built without it). What only the JIT's replays use (graph capture,
// early reads, timelines) is declared beside its implementation: kernels/cuda/graph.h,
// kernels/cuda/early_read.h, kernels/cuda/timeline.h.
#include <cstddef>
#include <cstdint>

namespace ember::cuda {

bool is_available();  // built with CUDA and at least one device visible
int device_count();
bool has_cudnn();  // built with cuDNN: conv2d runs on it (else nn's conv falls back)
void synchronize(int device = 0);  // also raises errors flagged by kernels (bad indices)
// Copies on the device's stream. Host-to-device from pageable memory and device-to-host return
// once the data is safe to reuse / read.
void copy_host_to_device(void* dst, const void* src, size_t n, int device);
void copy_device_to_host(void* dst, const void* src, size_t n, int device);
void copy_device_to_device(void* dst, const void* src, size_t n, int device);

// Page-locked host memory (the DataLoader's staging): a host-to-device copy from it is queued
// and returns at once. The copy's event says when the device has read the source, which must
// stay untouched until wait_copy() returns.
void* alloc_pinned(size_t n);
void free_pinned(void* p);
struct CopyEvent;  // opaque
CopyEvent* copy_pinned_to_device(void* dst, const void* src, size_t n, int device);
void wait_copy(CopyEvent* e);  // blocks until the copy has read its source, then frees `e`

struct AllocatorStats {
  int64_t allocated = 0;           // bytes in live blocks handed out
  int64_t reserved = 0;            // bytes obtained from cudaMalloc
  int64_t peak_allocated = 0;      // high-water mark of `allocated`
  int64_t num_allocs = 0;          // allocate() calls
  int64_t num_device_mallocs = 0;  // cudaMalloc calls (cache misses)
};
AllocatorStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
void empty_cache();  // returns cached free blocks to the driver
// What the driver reports for the whole device (cudaMemGetInfo): memory outside Ember's cache
// counts as used, blocks cached by the allocator too.
struct DeviceMemoryInfo {
  int64_t free = 0;   // bytes the driver could still hand out
  int64_t total = 0;  // bytes on the device
};
DeviceMemoryInfo memory_info(int device = 0);

}  // namespace ember::cuda
