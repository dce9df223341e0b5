#pragma once
// EMBER_LOGS=graph_breaks,recompiles,graph,fusion,code,cache,autotune,perf (or "all"), like
// TORCH_LOGS: the JIT's logs and the kernels' autotuning (cuDNN's algorithm choice), to stderr
// with an "[ember]" prefix. Read once; a disabled log costs one load and a branch.
#include <string_view>

namespace ember {

enum class Log : unsigned {
  graph_breaks = 1u << 0,
  recompiles = 1u << 1,
  graph = 1u << 2,
  fusion = 1u << 3,
  code = 1u << 4,
  cache = 1u << 5,
  autotune = 1u << 6,
  perf = 1u << 7,
};

namespace detail {
unsigned log_mask();
void log_write(Log which, std::string_view msg);
}  // namespace detail

inline bool log_enabled(Log which) {
  return (detail::log_mask() & static_cast<unsigned>(which)) != 0;
}
// Writes one message if that log is on.
inline void log(Log which, std::string_view msg) {
  if (log_enabled(which)) detail::log_write(which, msg);
}
// For tests: replaces the mask read from EMBER_LOGS (returns the previous one).
unsigned set_log_mask(unsigned mask);
// Where the logs go (default stderr); for tests.
using LogSink = void (*)(std::string_view line);
void set_log_sink(LogSink sink);

}  // namespace ember
