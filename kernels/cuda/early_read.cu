// Early reads (kernels/cuda/early_read.h): a CUDA graph copies a returned scalar (the loss) into
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

#include "core/error.h"
#include "kernels/cuda/early_read.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/side_branch.h"

namespace ember::cuda {

struct EarlySlot {
  unsigned long long value;
  unsigned long long seq;
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

std::shared_ptr<EarlyRead> EarlyRead::make(size_t bytes, int device) {
  EMBER_CHECK(bytes > 0 && bytes <= 8, "cuda::EarlyRead: ", bytes, " bytes (1..8)");
  kernels::cuda::DeviceGuard guard(device);
  std::shared_ptr<EarlyRead> r(new EarlyRead);  // freed by the destructor if a call below throws
  r->bytes_ = bytes;
  r->device_ = device;
  void* h = nullptr;
  EMBER_CUDA_CHECK(cudaHostAlloc(&h, sizeof(EarlySlot), cudaHostAllocMapped));
  r->host_ = static_cast<EarlySlot*>(h);
  std::memset(r->host_, 0, sizeof(EarlySlot));
  void* d = nullptr;
  EMBER_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
  r->mapped_ = static_cast<EarlySlot*>(d);
  EMBER_CUDA_CHECK(cudaMalloc(&r->launches_, sizeof(unsigned long long)));
  EMBER_CUDA_CHECK(cudaMemset(r->launches_, 0, sizeof(unsigned long long)));
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());  // the zeroed count before any graph runs
  return r;
}

EarlyRead::~EarlyRead() {
  if (launches_) (void)cudaFree(launches_);
  if (host_) (void)cudaFreeHost(host_);
}

void EarlyRead::capture(const void* src) {
  kernels::cuda::DeviceGuard guard(device_);
  cudaStream_t s = fork_early_branch(device_);
  early_copy_kernel<<<1, 1, 0, s>>>(static_cast<const unsigned char*>(src),
                                    static_cast<unsigned>(bytes_), mapped_, launches_);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

int64_t early_reads_served() { return g_served.load(std::memory_order_relaxed); }

bool EarlyRead::read(uint64_t tag, void* dst, size_t bytes) {
  if (tag != launched_ || bytes != bytes_) return false;
  const volatile EarlySlot* slot = host_;
  // Spin: the copy lands a few microseconds after the loss exists. Now and then make sure the
  // device still has work queued; if it went idle without writing the slot (a failed launch),
  // fall back to reading device memory, which reports the error.
  for (uint32_t spins = 1; slot->seq < tag; ++spins) {
    if ((spins & 0x3fffu) != 0) continue;
    const cudaError_t q = cudaStreamQuery(kernels::cuda::stream(device_));
    if (q == cudaErrorNotReady) continue;
    if (q != cudaSuccess) (void)cudaGetLastError();
    if (slot->seq < tag) return false;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const unsigned long long v = slot->value;
  std::memcpy(dst, &v, bytes);  // little-endian: the low bytes are the value
  kernels::cuda::check_device_error(device_);
  g_served.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace ember::cuda
