#include "kernels/cuda/runtime.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/tickets.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kMaxDevices = 64;
// cuBLAS asks for 32 MiB of workspace on Hopper to reach its best kernels.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kReadbackBytes = 4096;

struct DeviceState {
  std::once_flag stream_once, blas_once, blaslt_once, workspace_once;
  cudaStream_t stream = nullptr;
  int sm_count = 0;
  DeviceErrorFlag* error_host = nullptr;    // what the host reads
  DeviceErrorFlag* error_device = nullptr;  // the same memory, as kernels address it
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t blaslt = nullptr;
  Workspace workspace;
  FinishScratch finish;
  // Pinned host memory for small device-to-host reads (item(), a loss): the DMA writes it
  // directly, where a read into pageable memory goes through the driver's staging copy.
  void* readback = nullptr;
  std::mutex readback_mu;
  // acquire_tickets' pool: free ranges of zeroed counters, in chunks never freed.
  std::mutex tickets_mu;
  std::vector<std::pair<unsigned*, int64_t>> free_tickets;
};

struct Runtime {
  std::once_flag count_once;
  int count = 0;
  DeviceState dev[kMaxDevices];
};

// Never destroyed: tensors that outlive main() may still free into state that lives here.
Runtime& rt() {
  static Runtime* r = new Runtime;
  return *r;
}

int probe_device_count() {
  int n = 0;
  // No driver, no device or a driver too old all land here as an error: CUDA is unavailable.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return std::min(n, kMaxDevices);
}

DeviceState& state(int dev) { return rt().dev[dev]; }

DeviceState& ready(int dev) {
  DeviceState& s = state(dev);
  std::call_once(s.stream_once, [&] {
    DeviceGuard g(dev);
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&s.sm_count, cudaDevAttrMultiProcessorCount, dev));
    void* host = nullptr;
    EMBER_CUDA_CHECK(
        cudaHostAlloc(&host, sizeof(DeviceErrorFlag), cudaHostAllocMapped | cudaHostAllocPortable));
    s.error_host = static_cast<DeviceErrorFlag*>(host);
    *s.error_host = DeviceErrorFlag{};
    void* device = nullptr;
    EMBER_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
    s.error_device = static_cast<DeviceErrorFlag*>(device);
    void* raised = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&raised, sizeof(unsigned)));
    EMBER_CUDA_CHECK(cudaMemset(raised, 0, sizeof(unsigned)));
    s.error_host->raised = static_cast<unsigned*>(raised);
    EMBER_CUDA_CHECK(cudaHostAlloc(&s.readback, kReadbackBytes, cudaHostAllocPortable));
    // Here with the stream, not on first use: the first use may be inside a CUDA-graph capture,
    // where allocating and zeroing would break the capture.
    FinishScratch& f = s.finish;
    f.slots = kFinishSlotsPerSm * std::max(s.sm_count, 1);
    // [slots] doubles, [slots] int64, the count, then the two tickets (4 bytes each); 8-byte
    // aligned throughout.
    const size_t bytes = static_cast<size_t>(f.slots) * 16 + 16;
    void* p = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&p, bytes));  // never freed, like the workspace
    EMBER_CUDA_CHECK(cudaMemset(p, 0, bytes));
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());  // our stream does not wait for the legacy one
    auto* base = static_cast<char*>(p);
    f.partial_sum = reinterpret_cast<double*>(base);
    f.partial_count = reinterpret_cast<long long*>(base + size_t{8} * f.slots);
    f.count = reinterpret_cast<long long*>(base + size_t{16} * f.slots);
    f.ticket = reinterpret_cast<unsigned*>(base + size_t{16} * f.slots + 8);
    f.step_ticket = reinterpret_cast<unsigned*>(base + size_t{16} * f.slots + 12);
  });
  return s;
}

std::string describe_device_error(int code, long long value, long long limit) {
  std::string v = std::to_string(value), l = std::to_string(limit);
  switch (code) {
    case kCrossEntropyTarget:
      return "cross_entropy: target " + v + " is out of range for " + l + " classes";
    case kGatherIndex:
      return "gather: index " + v + " is out of range for a dimension of size " + l;
    case kIndexSelectIndex:
      return "index_select: index " + v + " is out of range for a dimension of size " + l;
    case kOneHotClass:
      return "one_hot: class " + v + " is out of range for " + l + " classes";
    case kScatterAddIndex:
      return "scatter_add: index " + v + " is out of range for a dimension of size " + l;
    default:
      return "a CUDA kernel raised device error " + std::to_string(code) + " (value " + v +
             ", limit " + l + ")";
  }
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Clears the error when it is not sticky, so one failure does not poison later calls.
  (void)cudaGetLastError();
  EMBER_FAIL("CUDA error: ", call, " failed: ", cudaGetErrorString(err), " (",
             cudaGetErrorName(err), ") at ", file, ":", line);
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  EMBER_FAIL("cuBLAS error: ", call, " failed: ", cublasGetStatusString(st), " (",
             cublasGetStatusName(st), ") at ", file, ":", line);
}

void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    EMBER_FAIL("CUDA error: launching kernel ", kernel, " failed: ", cudaGetErrorString(err), " (",
               cudaGetErrorName(err), ")");
}

void check_device(int dev, const char* what) {
  const int n = ember::cuda::device_count();
  EMBER_CHECK(n > 0, what, ": CUDA is not available (no CUDA driver or device was found)");
  EMBER_CHECK(dev >= 0 && dev < n, what, ": device cuda:", dev, " does not exist (", n,
              n == 1 ? " CUDA device is" : " CUDA devices are", " visible)");
}

DeviceGuard::DeviceGuard(int dev) {
  int cur = -1;
  EMBER_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != dev) {
    EMBER_CUDA_CHECK(cudaSetDevice(dev));
    prev_ = cur;
  }
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) (void)cudaSetDevice(prev_);
}

namespace {
// A capture's side branch in use on this thread (see set_launch_stream).
thread_local int t_launch_dev = -1;
thread_local cudaStream_t t_launch_stream = nullptr;
}  // namespace

cudaStream_t stream(int dev) {
  if (dev == t_launch_dev) return t_launch_stream;
  return ready(dev).stream;
}

void set_launch_stream(int dev, cudaStream_t s) {
  t_launch_dev = s ? dev : -1;
  t_launch_stream = s;
}
int sm_count(int dev) { return ready(dev).sm_count; }

cublasHandle_t cublas_handle(int dev) {
  DeviceState& s = ready(dev);
  std::call_once(s.blas_once, [&] {
    DeviceGuard g(dev);
    const Workspace ws = cublas_workspace(dev);
    EMBER_CUBLAS_CHECK(cublasCreate(&s.blas));
    EMBER_CUBLAS_CHECK(cublasSetStream(s.blas, s.stream));
    EMBER_CUBLAS_CHECK(cublasSetWorkspace(s.blas, ws.ptr, ws.size));
  });
  return s.blas;
}

cublasLtHandle_t cublaslt_handle(int dev) {
  DeviceState& s = ready(dev);
  std::call_once(s.blaslt_once, [&] {
    DeviceGuard g(dev);
    EMBER_CUBLAS_CHECK(cublasLtCreate(&s.blaslt));
  });
  return s.blaslt;
}

Workspace cublas_workspace(int dev) {
  DeviceState& s = ready(dev);
  std::call_once(s.workspace_once, [&] {
    DeviceGuard g(dev);
    // Outside the caching allocator: it lives as long as the handles and is never freed.
    EMBER_CUDA_CHECK(cudaMalloc(&s.workspace.ptr, kWorkspaceBytes));
    s.workspace.size = kWorkspaceBytes;
  });
  return s.workspace;
}

FinishScratch finish_scratch(int dev) { return ready(dev).finish; }

unsigned* acquire_tickets(int dev, int64_t count) {
  EMBER_CHECK(count > 0, "acquire_tickets: count must be positive, got ", count);
  DeviceState& s = ready(dev);
  std::lock_guard<std::mutex> lock(s.tickets_mu);
  for (auto& [p, n] : s.free_tickets) {  // first fit
    if (n < count) continue;
    unsigned* got = p;
    p += count;
    n -= count;
    return got;
  }
  constexpr int64_t kChunk = 4096;  // 16 KiB: every reduction of a large model, once
  const int64_t n = std::max(count, kChunk);
  void* p = nullptr;
  DeviceGuard g(dev);
  EMBER_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(n) * sizeof(unsigned)));
  EMBER_CUDA_CHECK(cudaMemset(p, 0, static_cast<size_t>(n) * sizeof(unsigned)));
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());  // our stream does not wait for the legacy one
  auto* base = static_cast<unsigned*>(p);
  if (n > count) s.free_tickets.emplace_back(base + count, n - count);
  return base;
}

void release_tickets(int dev, unsigned* tickets, int64_t count) {
  if (tickets == nullptr || count <= 0) return;
  DeviceState& s = state(dev);
  std::lock_guard<std::mutex> lock(s.tickets_mu);
  // Joined to a neighbouring free range where one ends or starts here, so a pool that serves
  // many executables over a run does not splinter.
  for (auto& [p, n] : s.free_tickets) {
    if (p + n == tickets) {
      n += count;
      return;
    }
    if (tickets + count == p) {
      p = tickets;
      n += count;
      return;
    }
  }
  s.free_tickets.emplace_back(tickets, count);
}

DeviceErrorFlag* device_error_flag(int dev) { return ready(dev).error_device; }

const unsigned* device_error_raised(int dev) { return ready(dev).error_host->raised; }

void check_device_error(int dev) {
  DeviceErrorFlag* flag = state(dev).error_host;
  if (!flag) return;  // no kernel of this device ever ran
  volatile DeviceErrorFlag* f = flag;
  const int code = f->code;
  if (code == kDeviceErrorNone) return;
  // Found early (item() on a loss the graph wrote while the step still runs): let the rest of
  // the step finish first, so the kernels after the failure see the flag and change nothing,
  // then clear it for the next step.
  DeviceGuard g(dev);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream(dev)));
  const long long value = f->value, limit = f->limit;
  f->value = 0;
  f->limit = 0;
  f->code = kDeviceErrorNone;
  if (f->raised) {
    EMBER_CUDA_CHECK(cudaMemsetAsync(f->raised, 0, sizeof(unsigned), stream(dev)));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream(dev)));
  }
  EMBER_FAIL(describe_device_error(code, value, limit), " (detected on cuda:", dev, ")");
}

}  // namespace ember::kernels::cuda

// ---- core/cuda_runtime.h ---------------------------------------------------------------------
namespace ember::cuda {

namespace kc = ember::kernels::cuda;

bool is_available() { return device_count() > 0; }

int device_count() {
  auto& r = kc::rt();
  std::call_once(r.count_once, [&] { r.count = kc::probe_device_count(); });
  return r.count;
}

void synchronize(int device) {
  kc::check_device(device, "cuda::synchronize");
  kc::DeviceGuard g(device);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(kc::stream(device)));
  kc::check_device_error(device);
}

void copy_host_to_device(void* dst, const void* src, size_t n, int device) {
  if (n == 0) return;
  kc::check_device(device, "cuda::copy_host_to_device");
  kc::DeviceGuard g(device);
  cudaStream_t s = kc::stream(device);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s));
  // From pageable memory the call returns once `src` was staged, so the caller may reuse it.
  // From pinned memory the DMA reads `src` later: wait for it to keep that promise.
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, src) != cudaSuccess) {
    (void)cudaGetLastError();
  } else if (attr.type == cudaMemoryTypeHost) {
    EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
  }
}

void* alloc_pinned(size_t n) {
  void* p = nullptr;
  EMBER_CUDA_CHECK(cudaHostAlloc(&p, n == 0 ? 1 : n, cudaHostAllocPortable));
  return p;
}

void free_pinned(void* p) {
  if (p) (void)cudaFreeHost(p);  // never throws: called from destructors
}

struct CopyEvent {
  cudaEvent_t event = nullptr;
};

CopyEvent* copy_pinned_to_device(void* dst, const void* src, size_t n, int device) {
  kc::check_device(device, "cuda::copy_pinned_to_device");
  kc::DeviceGuard g(device);
  cudaStream_t s = kc::stream(device);
  auto* e = new CopyEvent;
  if (cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming) != cudaSuccess) {
    delete e;
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
  if (n) {
    const cudaError_t err = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s);
    if (err != cudaSuccess) {
      (void)cudaEventDestroy(e->event);
      delete e;
      EMBER_CUDA_CHECK(err);
    }
  }
  EMBER_CUDA_CHECK(cudaEventRecord(e->event, s));
  return e;
}

void wait_copy(CopyEvent* e) {
  if (!e) return;
  const cudaError_t err = cudaEventSynchronize(e->event);
  (void)cudaEventDestroy(e->event);
  delete e;
  EMBER_CUDA_CHECK(err);
}

void copy_device_to_host(void* dst, const void* src, size_t n, int device) {
  kc::check_device(device, "cuda::copy_device_to_host");
  kc::DeviceGuard g(device);
  cudaStream_t s = kc::stream(device);
  kc::DeviceState& st = kc::state(device);  // ready: stream() set it up
  if (n > 0 && n <= kc::kReadbackBytes && st.readback != nullptr) {
    // Small reads through the pinned buffer (item(), a loss): see DeviceState::readback.
    std::lock_guard<std::mutex> lock(st.readback_mu);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(st.readback, src, n, cudaMemcpyDeviceToHost, s));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
    std::memcpy(dst, st.readback, n);
  } else {
    if (n) EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  // The data may be the result of a kernel that met bad input: report that instead.
  kc::check_device_error(device);
}

void copy_device_to_device(void* dst, const void* src, size_t n, int device) {
  if (n == 0) return;
  kc::check_device(device, "cuda::copy_device_to_device");
  kc::DeviceGuard g(device);
  // cudaMemcpyDefault: with unified addressing the source may live on another device.
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, kc::stream(device)));
}

}  // namespace ember::cuda
