// cuda::Timeline (kernels/cuda/timeline.h): events between the parts of a queued sequence, behind a
// kernel that holds the stream so the parts run back to back and the events time the device.
#include <chrono>

#include "core/error.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/timeline.h"

namespace ember::cuda {
namespace {

// Spins one thread on the global nanosecond timer until `ns` have passed.
__global__ void hold_kernel(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

using Clock = std::chrono::steady_clock;

}  // namespace

struct Timeline::Impl {
  int device = 0;
  std::vector<cudaEvent_t> events;
  Clock::time_point hold_start{};
  double hold_ms = 0;
  double queued_ms = 0;  // host time from the hold to the last mark
};

Timeline::Timeline(int device, int marks) : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(marks > 0, "cuda::Timeline: needs at least one mark, got ", marks);
  kernels::cuda::DeviceGuard guard(device);
  impl_->device = device;
  impl_->events.assign(static_cast<size_t>(marks), nullptr);
  for (cudaEvent_t& e : impl_->events) EMBER_CUDA_CHECK(cudaEventCreate(&e));
}

Timeline::~Timeline() {
  for (cudaEvent_t e : impl_->events)
    if (e) (void)cudaEventDestroy(e);
}

void Timeline::hold(double ms) {
  kernels::cuda::DeviceGuard guard(impl_->device);
  impl_->hold_ms = ms;
  impl_->hold_start = Clock::now();
  hold_kernel<<<1, 1, 0, kernels::cuda::stream(impl_->device)>>>(
      static_cast<unsigned long long>(ms * 1e6));
  kernels::cuda::check_launch("hold_kernel");
}

void Timeline::mark(int i) {
  EMBER_CHECK(i >= 0 && static_cast<size_t>(i) < impl_->events.size(), "cuda::Timeline::mark: ", i,
              " is not one of the ", impl_->events.size(), " marks");
  kernels::cuda::DeviceGuard guard(impl_->device);
  EMBER_CUDA_CHECK(
      cudaEventRecord(impl_->events[static_cast<size_t>(i)], kernels::cuda::stream(impl_->device)));
  impl_->queued_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - impl_->hold_start).count();
}

std::vector<double> Timeline::elapsed_us() {
  kernels::cuda::DeviceGuard guard(impl_->device);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(kernels::cuda::stream(impl_->device)));
  std::vector<double> out(impl_->events.size(), 0.0);
  for (size_t i = 1; i < out.size(); ++i) {
    float ms = 0;
    EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->events[i - 1], impl_->events[i]));
    out[i] = 1e3 * static_cast<double>(ms);
  }
  return out;
}

bool Timeline::held_through() const { return impl_->queued_ms < impl_->hold_ms; }
double Timeline::queued_us() const { return 1e3 * impl_->queued_ms; }

}  // namespace ember::cuda
