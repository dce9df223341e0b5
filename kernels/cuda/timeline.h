#pragma once
// Device time of each part of a queued sequence, for profiles (EMBER_LOGS=perf, the step
// anatomy tool). Free of CUDA toolkit headers; implemented in kernels/cuda/timeline.cu (or by
// kernels/cuda_stub.cc, where constructing one is an error).
#include <memory>
#include <vector>

namespace ember::cuda {

// hold() queues a kernel that keeps the stream busy for `ms`, so what is queued behind it runs
// back to back once it ends: the time between two marks is then device time, not the host's
// launch gaps.
class Timeline {
 public:
  Timeline(int device, int marks);  // marks 0..marks-1, recorded on the device's stream
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  void hold(double ms);
  void mark(int i);
  // Waits for the stream; microseconds from mark i-1 to mark i (element 0 is 0).
  std::vector<double> elapsed_us();
  // Whether the host queued every mark before the hold ended (if not, gaps are included).
  bool held_through() const;
  // Host time from the hold to the last mark: how long queuing the sequence took.
  double queued_us() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::cuda
