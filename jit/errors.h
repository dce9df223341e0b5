#pragma once
// Errors the JIT raises besides ember::Error for bad input.
#include "core/error.h"

namespace ember::jit {

// With Options::fullgraph, a function that cannot be captured whole: names the op, the reason
// and the call site ("item: reads tensor data on the host ... (at train.cpp:42)").
class GraphBreakError : public Error {
 public:
  explicit GraphBreakError(const std::string& msg) : Error("jit graph break: " + msg) {}
};

}  // namespace ember::jit
