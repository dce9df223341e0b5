#include "core/allocator.h"

#include <cstdlib>
#include <new>

#include "core/error.h"

namespace ember {
namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    constexpr size_t kAlign = 64;
    const size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    EMBER_CHECK(p != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t) override { std::free(p); }
};

}  // namespace

Allocator* cpu_allocator() {
  static CpuAllocator a;
  return &a;
}

Allocator* allocator_for(Device d) {
  return d.is_cpu() ? cpu_allocator() : cuda_allocator(d.index);
}

}  // namespace ember
