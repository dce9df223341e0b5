#include "core/device.h"

#include "core/error.h"

namespace ember {

Device Device::parse(const std::string& s) {
  constexpr int kMaxIndex = 127;  // Device::index is an int8_t
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5) {
    int idx = 0;
    for (size_t i = 5; i < s.size(); ++i) {
      EMBER_CHECK(s[i] >= '0' && s[i] <= '9' && idx <= kMaxIndex, "Device: cannot parse '", s,
                  "' (expected cpu, cuda or cuda:N with N a device index from 0 to ", kMaxIndex,
                  ")");
      idx = idx * 10 + (s[i] - '0');
    }
    EMBER_CHECK(idx <= kMaxIndex, "Device: cannot parse '", s,
                "' (expected cpu, cuda or cuda:N with N a device index from 0 to ", kMaxIndex, ")");
    return cuda(idx);
  }
  EMBER_FAIL("Device: cannot parse '", s, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(static_cast<int>(index));
}

}  // namespace ember
