#pragma once
/// \file
/// The JIT's names for Ember's logs, which live in core/log.h (kernels log their autotuning
/// too).
///
/// Set `EMBER_LOGS` to a comma-separated list of these names (or `all`), as PyTorch's
/// `TORCH_LOGS`; messages go to stderr with an `[ember]` prefix:
/// - `graph_breaks`: why a signature runs eagerly;
/// - `recompiles`: every signature miss or retrace, with its reason;
/// - `graph`: the traced and optimized graphs;
/// - `fusion`: node counts per pass, the fused groups, and why a group was not fused;
/// - `code`: generated kernel sources and the GEMM and cross-entropy lowerings;
/// - `cache`: signature misses, stored executables, kernel and disk cache hits and stores;
/// - `autotune`: algorithm timings and choices (GEMMs, cuDNN convolutions);
/// - `perf`: trace and build times, kernels per replay, arena bytes, CUDA graph notes.
#include "core/log.h"

namespace ember::jit {
using ember::Log;
using ember::log;
using ember::log_enabled;
using ember::LogSink;
using ember::set_log_mask;
using ember::set_log_sink;
}  // namespace ember::jit
