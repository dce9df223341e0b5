#pragma once
#include <catch2/catch.hpp>
#include <iostream>

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
