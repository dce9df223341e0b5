#pragma once
// What the run ran on: host, OS, CPU, device, driver and CUDA versions, the compiler, and the
// device's measured ceilings (the denominators of the floor).
#include <ember/ember.h>

#include <nlohmann/json.hpp>
#include <string>

namespace ember::bench {

struct Peak {
  double flops_per_s = 0;  // best of 5 fp32 GEMMs n x n x n
  double bytes_per_s = 0;  // bytes read + written per second by the best of 5 large copies
  std::string how;
};

// GEMM 4096^3 and a 256 MiB copy on the GPU, 1024^3 and 64 MiB on the CPU, through Ember's own
// ops, after one untimed run of each; TF32 as set by set_allow_tf32.
Peak measure_peak(Device dev);

// The schema's "machine" object.
nlohmann::json describe_machine(Device dev, const Peak& peak);

// The device's name as the report shows it (the GPU's, or the CPU model).
std::string device_name(Device dev);

}  // namespace ember::bench
