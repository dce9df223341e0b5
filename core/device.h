#pragma once
/// \file
/// Device and DeviceType: where a tensor's memory lives (the host, or one CUDA device).
#include <cstdint>
#include <string>

namespace ember {

/// The kind of memory a tensor lives in, like `torch.device.type`.
enum class DeviceType : uint8_t {
  CPU,  ///< Host memory; kernels run on the CPU (Eigen, the intra-op thread pool).
  CUDA  ///< Memory of a CUDA device; kernels run on that device's stream.
};

/// A device: a type plus an index, like `torch.device` ("cpu", "cuda:0").
///
/// A plain value type, cheap to copy and compare. The CPU has one device, index 0. Making a
/// Device never checks that it exists: using a missing CUDA device (moving a tensor there,
/// allocating on it) raises ember::Error.
struct Device {
  DeviceType type = DeviceType::CPU;  ///< CPU or CUDA.
  int8_t index = 0;                   ///< The CUDA device ordinal; always 0 for the CPU.

  /// The host device.
  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  /// CUDA device `i` (not checked against the devices present).
  static constexpr Device cuda(int i = 0) { return {DeviceType::CUDA, static_cast<int8_t>(i)}; }
  /// Parses "cpu", "cuda" (device 0) or "cuda:N" with N from 0 to 127; anything else throws
  /// ember::Error.
  static Device parse(const std::string& s);

  /// True for the host device.
  bool is_cpu() const { return type == DeviceType::CPU; }
  /// True for any CUDA device.
  bool is_cuda() const { return type == DeviceType::CUDA; }
  /// Same type and index.
  bool operator==(const Device&) const = default;
  /// "cpu" or "cuda:N" (a CUDA device always prints its index), as parse() reads it back.
  std::string str() const;
};

}  // namespace ember
