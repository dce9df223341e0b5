#pragma once
// Early reads: a small value (a loss) that a captured graph copies into pinned host memory as
// soon as the step producing it has run, on a branch of the graph beside the kernels after it.
// The replay leaves the slot on the storage it returns (core/storage.h, PendingHostRead), so
// item() waits for that copy alone, not for the rest of the step: the backward and the update
// keep the device busy while the host goes on. Free of CUDA toolkit headers; implemented in
// kernels/cuda/early_read.cu (or by kernels/cuda_stub.cc, where making one is an error).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/storage.h"

namespace ember::cuda {

struct EarlySlot;  // the pinned bytes the copy writes (kernels/cuda/early_read.cu)

// One pinned slot and the count of the graph launches that copy into it. One thread at a time
// per slot, like the executables that own them.
class EarlyRead final : public HostReadSource {
 public:
  // The slot for a value of `bytes` (1..8) on `device`, and its launch count.
  static std::shared_ptr<EarlyRead> make(size_t bytes, int device);
  ~EarlyRead() override;
  EarlyRead(const EarlyRead&) = delete;
  EarlyRead& operator=(const EarlyRead&) = delete;

  // During a capture: queues the copy of the slot's bytes from `src` after everything queued so
  // far, off the main line of the graph (end_capture joins it).
  void capture(const void* src);
  // After the launch of a graph holding the copy: that replay's tag for read().
  uint64_t note_launch() { return ++launched_; }
  // If `tag` is still the latest launch, waits for that copy, writes the value to `dst` and
  // returns true (device errors flagged so far are raised as by a copy); false if a later
  // launch has overwritten the slot.
  bool read(uint64_t tag, void* dst, size_t bytes) override;

 private:
  EarlyRead() = default;
  EarlySlot* host_ = nullptr;               // pinned, mapped
  EarlySlot* mapped_ = nullptr;             // the same memory as the device addresses it
  unsigned long long* launches_ = nullptr;  // device memory: copies the device has made
  size_t bytes_ = 0;
  int device_ = 0;
  uint64_t launched_ = 0;  // graphs holding the copy the host launched
};

int64_t early_reads_served();  // read() calls that returned true, in this process

}  // namespace ember::cuda
