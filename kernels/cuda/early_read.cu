// Early reads (core/cuda_runtime.h): a CUDA graph copies a returned scalar (the loss) into
// mapped pinned host memory as soon as the step writing it has run, with a one-thread kernel on a
// side branch of the graph, and the host spins on that memory instead of synchronizing the
// stream. A kernel writing host memory directly reaches the host sooner than a copy node
// followed by an event record node (the copy engine's latency, then the event's).
//
// The slot holds the value and a sequence number: the kernel counts its launches in device
// memory and writes the value, a system-wide fence, then the count; the host knows how many
// graphs holding the copy it launched, so the value is the one it waits for once the slot shows
// that count.
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <memory>

#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/early_read.h"
#include "kernels/cuda/runtime.h"

namespace ember::cuda {

struct EarlySlot {
  unsigned long long value;
  unsigned long long seq;
};

struct EarlyRead {
  EarlySlot* host = nullptr;               // pinned, mapped
  EarlySlot* mapped = nullptr;             // the same memory as the device addresses it
  unsigned long long* launches = nullptr;  // device memory: copies the device has made
  size_t bytes = 0;
  int device = 0;
  uint64_t launched = 0;  // graphs holding the copy the host launched
  ~EarlyRead() {
    if (launches) (void)cudaFree(launches);
    if (host) (void)cudaFreeHost(host);
  }
};

namespace {

__global__ void early_copy_kernel(const unsigned char* src, unsigned bytes, EarlySlot* slot,
                                  unsigned long long* launches) {
  unsigned long long v = 0;
  for (unsigned i = 0; i < bytes; ++i) v |= static_cast<unsigned long long>(src[i]) << (8 * i);
  const unsigned long long seq = *launches + 1;
  *launches = seq;
  volatile EarlySlot* s = slot;
  s->value = v;
  __threadfence_system();  // the value is visible to the host before the count
  s->seq = seq;
}

std::atomic<int64_t> g_served{0};

}  // namespace

std::shared_ptr<EarlyRead> make_early_read(size_t bytes, int device) {
  EMBER_CHECK(bytes > 0 && bytes <= 8, "cuda::make_early_read: ", bytes, " bytes (1..8)");
  kernels::cuda::DeviceGuard guard(device);
  auto r = std::make_shared<EarlyRead>();
  r->bytes = bytes;
  r->device = device;
  void* h = nullptr;
  EMBER_CUDA_CHECK(cudaHostAlloc(&h, sizeof(EarlySlot), cudaHostAllocMapped));
  r->host = static_cast<EarlySlot*>(h);
  std::memset(r->host, 0, sizeof(EarlySlot));
  void* d = nullptr;
  EMBER_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
  r->mapped = static_cast<EarlySlot*>(d);
  EMBER_CUDA_CHECK(cudaMalloc(&r->launches, sizeof(unsigned long long)));
  EMBER_CUDA_CHECK(cudaMemset(r->launches, 0, sizeof(unsigned long long)));
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());  // the zeroed count before any graph runs
  return r;
}

void capture_early_read(EarlyRead& r, const void* src, int device) {
  kernels::cuda::DeviceGuard guard(device);
  cudaStream_t s = fork_early_branch(device);
  early_copy_kernel<<<1, 1, 0, s>>>(static_cast<const unsigned char*>(src),
                                    static_cast<unsigned>(r.bytes), r.mapped, r.launches);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

uint64_t note_early_launch(EarlyRead& r) { return ++r.launched; }

int64_t early_reads_served() { return g_served.load(std::memory_order_relaxed); }

bool read_early(EarlyRead& r, uint64_t seq, void* dst, size_t bytes) {
  if (seq != r.launched || bytes != r.bytes) return false;
  const volatile EarlySlot* slot = r.host;
  // Spin: the copy lands a few microseconds after the loss exists. Now and then make sure the
  // device still has work queued; if it went idle without writing the slot (a failed launch),
  // fall back to reading device memory, which reports the error.
  for (uint32_t spins = 1; slot->seq < seq; ++spins) {
    if ((spins & 0x3fffu) != 0) continue;
    const cudaError_t q = cudaStreamQuery(kernels::cuda::stream(r.device));
    if (q == cudaErrorNotReady) continue;
    if (q != cudaSuccess) (void)cudaGetLastError();
    if (slot->seq < seq) return false;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const unsigned long long v = slot->value;
  std::memcpy(dst, &v, bytes);  // little-endian: the low bytes are the value
  kernels::cuda::check_device_error(r.device);
  g_served.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace ember::cuda
