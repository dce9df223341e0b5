#pragma once
/// \file
/// Ember's diagnostic logs, switched on by the EMBER_LOGS environment variable (like
/// TORCH_LOGS).
///
/// `EMBER_LOGS=graph_breaks,recompiles,graph,fusion,code,cache,autotune,perf` (any subset, or
/// "all") turns on the JIT's logs and the kernels' autotuning (cuDNN's algorithm choice); lines
/// go to stderr with an "[ember] [<log>]" prefix. The variable is read once; a disabled log costs
/// one load and a branch.
#include <string_view>

namespace ember {

/// One log, by its EMBER_LOGS name; the values are bits of the mask set_log_mask() takes.
enum class Log : unsigned {
  graph_breaks = 1u << 0,  ///< Where and why a traced function breaks its graph (host reads).
  recompiles = 1u << 1,    ///< Why a compiled function traces again (a new signature).
  graph = 1u << 2,         ///< Each traced graph, before and after the passes.
  fusion = 1u << 3,        ///< The passes' effect and the fused groups; groups left unfused.
  code = 1u << 4,          ///< The generated kernel source.
  cache = 1u << 5,         ///< Kernel and executable cache hits, misses and disk loads.
  autotune = 1u << 6,      ///< Algorithm choices of autotuned kernels (GEMM, cuDNN conv).
  perf = 1u << 7,          ///< Performance notes: CUDA graph captures, slow fallbacks.
};

namespace detail {
unsigned log_mask();
void log_write(Log which, std::string_view msg);
}  // namespace detail

/// Whether log `which` is on (test it before building an expensive message).
inline bool log_enabled(Log which) {
  return (detail::log_mask() & static_cast<unsigned>(which)) != 0;
}
/// Writes one message to log `which` if that log is on.
inline void log(Log which, std::string_view msg) {
  if (log_enabled(which)) detail::log_write(which, msg);
}
/// For tests: replaces the mask read from EMBER_LOGS (an OR of Log bits) and returns the
/// previous one.
unsigned set_log_mask(unsigned mask);
/// A receiver of whole log lines, prefix included and without the newline.
using LogSink = void (*)(std::string_view line);
/// Where the logs go; null (the default) writes them to stderr. For tests.
void set_log_sink(LogSink sink);

}  // namespace ember
