#pragma once
// An in-memory kernels::cuda::nvrtc::BinaryStore that counts its reads and writes, for tests of
// what reaches a store (the NVRTC binaries, the GEMM algorithm choices). CUDA builds only.
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/cuda/nvrtc.h"

namespace ember::test {

class MemoryBinaryStore final : public kernels::cuda::nvrtc::BinaryStore {
 public:
  std::optional<std::string> load(const std::string& key) override {
    ++loads;
    auto it = map.find(key);
    if (it == map.end()) return std::nullopt;
    return it->second;
  }
  void store(const std::string& key, std::string_view bytes) override {
    ++stores;
    map[key] = std::string(bytes);
  }
  std::map<std::string, std::string> map;
  int loads = 0, stores = 0;
};

}  // namespace ember::test
