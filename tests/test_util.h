#pragma once
#include <stdlib.h>  // mkdtemp

#include <catch2/catch.hpp>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/cuda_runtime.h"
#include "jit/log.h"

// First line of every [cuda] test case: without a GPU the case prints the marker ctest turns
// into "skipped" (see tests/CMakeLists.txt) and returns without asserting anything.
#define EMBER_REQUIRE_CUDA()                                  \
  do {                                                        \
    if (!::ember::cuda::is_available()) {                     \
      std::cout << "EMBER_SKIP: no CUDA device" << std::endl; \
      return;                                                 \
    }                                                         \
  } while (0)

namespace ember::test {

// A fresh directory under the system's temp dir (`prefix` and six random characters), removed
// with everything in it when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "ember_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Turns the given JIT logs (a jit::Log mask) on into a buffer for the object's lifetime.
class LogCapture {
 public:
  explicit LogCapture(unsigned mask) {
    lines().clear();
    prev_ = jit::set_log_mask(mask);
    jit::set_log_sink(&capture_line);
  }
  explicit LogCapture(jit::Log which) : LogCapture(static_cast<unsigned>(which)) {}
  ~LogCapture() {
    jit::set_log_mask(prev_);
    jit::set_log_sink(nullptr);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  // Lines containing `needle`.
  int count(std::string_view needle) const {
    int n = 0;
    for (const std::string& l : lines())
      if (l.find(needle) != std::string::npos) ++n;
    return n;
  }
  std::string all() const {
    std::string s;
    for (const std::string& l : lines()) s += l + "\n";
    return s;
  }

 private:
  static std::vector<std::string>& lines() {
    static std::vector<std::string> captured;
    return captured;
  }
  static void capture_line(std::string_view line) { lines().emplace_back(line); }
  unsigned prev_ = 0;
};

}  // namespace ember::test
