#pragma once
// The hash behind the kernels' cache keys (NVRTC binaries, cuBLASLt algorithm choices): a 128-bit
// hash (two 64-bit lanes with different multipliers, each finished with a SplitMix64-style mix)
// written as 32 hex digits. Cache keys, not security. Host-only, no CUDA headers.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace ember::kernels::cuda {

class KeyHash {
 public:
  void add(std::string_view s) {
    for (unsigned char c : s) byte(c);
    add(static_cast<uint64_t>(s.size()));  // delimits the fields
  }
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(v >> (8 * i)));
  }
  std::string hex() const {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(mix(a_)),
                  static_cast<unsigned long long>(mix(b_)));
    return buf;
  }

 private:
  void byte(unsigned char c) {
    a_ = (a_ ^ c) * 0x100000001b3ull;
    b_ = (b_ ^ c) * 0x9e3779b97f4a7c15ull;
    b_ ^= b_ >> 29;
  }
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t a_ = 0xcbf29ce484222325ull, b_ = 0x6a09e667f3bcc909ull;
};

}  // namespace ember::kernels::cuda
