#pragma once
// Counts the GPU operations a stretch of code executes: kernels (graph-launched ones included),
// memcpys and memsets, through CUPTI's activity API. Only built with CUPTI (EMBER_BENCH_CUPTI);
// elsewhere available() is false and nothing is counted.
//
//   KernelCounter kc;             // enables the activity kinds (process-wide, one at a time)
//   ... warm up ...
//   kc.reset();                   // drops what was recorded so far (after a device sync)
//   ... K steps, then a device sync ...
//   int64_t n = kc.count();       // operations executed since reset()
#include <cstdint>
#include <string>

namespace ember::bench {

class KernelCounter {
 public:
  // True when this build can count (CUPTI linked in).
  static bool available();

  // Starts recording; an ember::Error when CUPTI refuses (the message says why).
  KernelCounter();
  ~KernelCounter();  // stops recording
  KernelCounter(const KernelCounter&) = delete;
  KernelCounter& operator=(const KernelCounter&) = delete;

  // Both flush CUPTI's buffers first: call them after the device is synchronized.
  void reset();
  int64_t count();
};

}  // namespace ember::bench
