#pragma once
/// \file
/// Errors the JIT raises besides ember::Error for bad input.
#include "core/error.h"

namespace ember::jit {

/// Raised by a jit::compile'd call with Options::fullgraph when the function cannot be
/// captured whole.
///
/// The message names the op, the reason and the call site ("jit graph break: item: reads
/// tensor data on the host ... (at train.cpp:42)"). Without fullgraph the same break makes that
/// signature run eagerly instead. Derives from ember::Error, so a handler for that catches it.
class GraphBreakError : public Error {
 public:
  /// An error whose message is "jit graph break: " followed by `msg`.
  explicit GraphBreakError(const std::string& msg) : Error("jit graph break: " + msg) {}
};

}  // namespace ember::jit
