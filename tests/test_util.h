#pragma once
#include <stdlib.h>  // mkdtemp

#include <catch2/catch.hpp>
#include <filesystem>
#include <iostream>
#include <string>

#include "core/cuda_runtime.h"

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

}  // namespace ember::test
