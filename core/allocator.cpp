#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/caching_allocator.h"
#include "core/error.h"

namespace ember {
namespace {

// 64-byte aligned host memory straight from the C library.
class HostBackend final : public RawBackend {
 public:
  void* raw_alloc(size_t nbytes) override {
    constexpr size_t kAlign = 64;
    return std::aligned_alloc(kAlign, (nbytes + kAlign - 1) / kAlign * kAlign);
  }
  void raw_free(void* p) override { std::free(p); }
};

class PlainCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    void* p = backend_.raw_alloc(nbytes);
    EMBER_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t) override { backend_.raw_free(p); }

 private:
  HostBackend backend_;
};

// Host tensors go through the same caching allocator as a CUDA device's: a training step's
// large temporaries (activations, gradients, a fresh batch) reuse the blocks the step before
// freed, so a steady-state step faults in no new pages (the C library returns big blocks to
// the kernel on free and maps fresh, zeroed pages for the next). Under AddressSanitizer the
// plain allocator is used instead, so a use after free is still caught.
struct CpuCache {
  HostBackend backend;
  CachingAllocator allocator{backend, "cpu"};
};

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheHostMemory = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCacheHostMemory = false;
#else
constexpr bool kCacheHostMemory = true;
#endif
#else
constexpr bool kCacheHostMemory = true;
#endif

// Never destroyed: tensors with static storage duration may free their memory after every
// other static object is gone.
CpuCache& cpu_cache() {
  static CpuCache* c = new CpuCache;
  return *c;
}

}  // namespace

Allocator* cpu_allocator() {
  if constexpr (kCacheHostMemory) {
    return &cpu_cache().allocator;
  } else {
    static PlainCpuAllocator a;
    return &a;
  }
}

Allocator* allocator_for(Device d) {
  return d.is_cpu() ? cpu_allocator() : cuda_allocator(d.index);
}

namespace cpu {
bool caches_memory() { return kCacheHostMemory; }
AllocatorStats memory_stats() {
  if constexpr (kCacheHostMemory) return cpu_cache().allocator.stats();
  return {};
}
void reset_peak_memory_stats() {
  if constexpr (kCacheHostMemory) cpu_cache().allocator.reset_peak();
}
void empty_cache() {
  if constexpr (kCacheHostMemory) cpu_cache().allocator.empty_cache();
}
}  // namespace cpu

}  // namespace ember
