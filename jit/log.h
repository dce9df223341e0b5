#pragma once
// The logs live in core (kernels log their autotuning too); the JIT names them as before.
#include "core/log.h"

namespace ember::jit {
using ember::Log;
using ember::log;
using ember::log_enabled;
using ember::LogSink;
using ember::set_log_mask;
using ember::set_log_sink;
}  // namespace ember::jit
