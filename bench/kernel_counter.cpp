#include "kernel_counter.h"

#include "core/error.h"

#ifdef EMBER_BENCH_CUPTI
#include <cupti.h>

#include <atomic>
#include <cstdlib>
#endif

namespace ember::bench {

#ifdef EMBER_BENCH_CUPTI
namespace {

// Records counted so far (CUPTI hands buffers back on its own thread, hence atomic).
std::atomic<int64_t> g_records{0};
std::atomic<bool> g_active{false};
bool g_callbacks_registered = false;

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kAlign = 8;  // CUPTI wants 8-byte aligned buffers

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  EMBER_FAIL("ember_bench: CUPTI ", what, " failed: ", s ? s : "unknown error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  int64_t n = 0;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    // Only the enabled kinds arrive; the check keeps other tools' kinds out regardless.
    for (CUpti_ActivityKind k : kKinds)
      if (record->kind == k) ++n;
  }
  g_records += n;
  std::free(buffer);
}

}  // namespace

bool KernelCounter::available() { return true; }

KernelCounter::KernelCounter() {
  EMBER_CHECK(!g_active.exchange(true), "ember_bench: one KernelCounter at a time");
  try {
    if (!g_callbacks_registered) {
      check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
            "cuptiActivityRegisterCallbacks");
      g_callbacks_registered = true;
    }
    for (CUpti_ActivityKind k : kKinds) check(cuptiActivityEnable(k), "cuptiActivityEnable");
  } catch (...) {
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
    g_active = false;
    throw;
  }
  g_records = 0;
}

KernelCounter::~KernelCounter() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  g_active = false;
}

void KernelCounter::reset() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  g_records = 0;
}

int64_t KernelCounter::count() {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  return g_records.load();
}

#else  // built without CUPTI

bool KernelCounter::available() { return false; }
KernelCounter::KernelCounter() {
  EMBER_FAIL("ember_bench: built without CUPTI, kernels cannot be counted");
}
KernelCounter::~KernelCounter() = default;
void KernelCounter::reset() {}
int64_t KernelCounter::count() { return 0; }

#endif

}  // namespace ember::bench
