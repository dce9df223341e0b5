#pragma once
// Per-device CUDA state for the kernels: Ember's stream, cuBLAS/cuBLASLt handles and their
// workspace, the device error flag, and error checking that turns CUDA failures into
// ember::Error naming the call. Everything is created lazily on first use of a device and kept
// for the life of the process (never destroyed: at exit the driver may already be gone).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/device_error.cuh"

namespace ember::kernels::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                     int line);

// EMBER_CUDA_CHECK(cudaMemcpyAsync(...)): throws ember::Error naming the call and the error.
#define EMBER_CUDA_CHECK(call)                                                         \
  do {                                                                                 \
    const cudaError_t ember_err_ = (call);                                             \
    if (ember_err_ != cudaSuccess)                                                     \
      ::ember::kernels::cuda::throw_cuda_error(ember_err_, #call, __FILE__, __LINE__); \
  } while (0)
#define EMBER_CUBLAS_CHECK(call)                                                        \
  do {                                                                                  \
    const cublasStatus_t ember_st_ = (call);                                            \
    if (ember_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::ember::kernels::cuda::throw_cublas_error(ember_st_, #call, __FILE__, __LINE__); \
  } while (0)

// Call right after a <<<...>>> launch: a failed launch (bad configuration, a sticky error from
// an earlier kernel) becomes an ember::Error naming `kernel`.
void check_launch(const char* kernel);

// Throws naming `what` unless `dev` is a visible CUDA device.
void check_device(int dev, const char* what);

// Makes `dev` current for this thread for the guard's lifetime (cheap when it already is).
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// Ember's stream on `dev` (created with cudaStreamNonBlocking): every kernel, copy and cuBLAS
// call of that device goes here, which is what lets the caching allocator reuse a freed block
// at once.
cudaStream_t stream(int dev);
// While a CUDA graph is captured with concurrent branches (kernels/cuda/graph.h,
// use_capture_branch), stream(dev) answers this thread's branch stream instead; null restores it.
void set_launch_stream(int dev, cudaStream_t s);
int sm_count(int dev);  // multiprocessors, for sizing grids

// The cuBLAS handle is bound to stream(dev) and the workspace below, in the default math mode (a
// caller that wants TF32 asks for it). cuBLASLt takes stream and workspace per call: pass
// stream(dev) and cublas_workspace(dev). Each is created on first use.
cublasHandle_t cublas_handle(int dev);
cublasLtHandle_t cublaslt_handle(int dev);
struct Workspace {
  void* ptr = nullptr;
  size_t size = 0;
};
// Scratch for cuBLASLt matmuls (also given to the cuBLAS handle). Calls on one stream run in
// order, so they can all share it.
Workspace cublas_workspace(int dev);

// Per-device scratch of the kernels that finish inside their own launch (the last block to
// take the ticket folds every block's partial, then resets the ticket to 0): the mean-reduced
// cross entropy; sgd_update's step increment has a ticket of its own. Kernels on stream(dev) run
// one after another, so they can share it; its address never changes, so a captured CUDA graph
// can use it too. Zeroed once, never freed.
inline constexpr int kFinishSlotsPerSm = 8;
struct FinishScratch {
  int slots = 0;                       // partials available: kFinishSlotsPerSm per SM
  double* partial_sum = nullptr;       // [slots]
  long long* partial_count = nullptr;  // [slots]
  long long* count = nullptr;          // one value, written by a counting kernel
  unsigned* ticket = nullptr;          // 0 between launches
  // sgd_update with increment_step: the block drawing the last ticket adds 1 to the step once
  // every block has read it. 0 between launches. Separate from `ticket` so the two kernels
  // never depend on each other's launches being serialized.
  unsigned* step_ticket = nullptr;
};
FinishScratch finish_scratch(int dev);

// The device-visible address of `dev`'s error record: pass it to kernels, which call
// raise_device_error (kernels/cuda/device_error.cuh).
DeviceErrorFlag* device_error_flag(int dev);
// The flag's word in device memory, which raising sets too (device_error.cuh): what kernels
// that must not run after an error read.
const unsigned* device_error_raised(int dev);
// After a synchronize: throws ember::Error for a raised flag ("cross_entropy: target 12 is out
// of range for 10 classes (detected on cuda:0)") and clears it.
void check_device_error(int dev);

}  // namespace ember::kernels::cuda
