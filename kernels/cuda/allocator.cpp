// cuda_allocator(): the caching allocator (core/caching_allocator.h) over cudaMalloc/cudaFree,
// one per device, and the memory statistics of core/cuda_runtime.h.
#include <atomic>
#include <mutex>
#include <string>

#include "core/allocator.h"
#include "core/caching_allocator.h"
#include "core/cuda_runtime.h"
#include "kernels/cuda/runtime.h"

namespace ember {
namespace {

namespace kc = kernels::cuda;
constexpr int kMaxDevices = 64;

class CudaBackend final : public RawBackend {
 public:
  explicit CudaBackend(int dev) : dev_(dev) {}
  void* raw_alloc(size_t nbytes) override {
    kc::DeviceGuard g(dev_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      // Not sticky: clear it so the allocator can free its cache and try again.
      (void)cudaGetLastError();
      return nullptr;
    }
    if (err != cudaSuccess) kc::throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    return p;
  }
  void raw_free(void* p) override {
    kc::DeviceGuard g(dev_);
    // The host freed these blocks when their last kernel was queued, not finished.
    EMBER_CUDA_CHECK(cudaStreamSynchronize(kc::stream(dev_)));
    EMBER_CUDA_CHECK(cudaFree(p));
  }

 private:
  int dev_;
};

struct PerDevice {
  CudaBackend backend;
  CachingAllocator allocator;
  explicit PerDevice(int dev) : backend(dev), allocator(backend, "cuda:" + std::to_string(dev)) {}
};

std::atomic<PerDevice*> g_devices[kMaxDevices];
std::mutex g_create_mu;

// Never destroyed: storages freed after main() returns still land in a live allocator.
CachingAllocator& caching_allocator(int dev, const char* what) {
  kc::check_device(dev, what);
  PerDevice* d = g_devices[dev].load(std::memory_order_acquire);
  if (!d) {
    std::lock_guard<std::mutex> g(g_create_mu);
    d = g_devices[dev].load(std::memory_order_relaxed);
    if (!d) {
      d = new PerDevice(dev);
      g_devices[dev].store(d, std::memory_order_release);
    }
  }
  return d->allocator;
}

}  // namespace

Allocator* cuda_allocator(int index) { return &caching_allocator(index, "cuda_allocator"); }

namespace cuda {

AllocatorStats memory_stats(int device) {
  return caching_allocator(device, "cuda::memory_stats").stats();
}

void reset_peak_memory_stats(int device) {
  caching_allocator(device, "cuda::reset_peak_memory_stats").reset_peak();
}

void empty_cache() {
  for (auto& slot : g_devices)
    if (PerDevice* d = slot.load(std::memory_order_acquire)) d->allocator.empty_cache();
}

DeviceMemoryInfo memory_info(int device) {
  kc::check_device(device, "cuda::memory_info");
  kc::DeviceGuard g(device);
  size_t free = 0, total = 0;
  EMBER_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
}

}  // namespace cuda
}  // namespace ember
