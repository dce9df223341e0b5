#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ember {
namespace {

const char* name_of(Log l) {
  switch (l) {
    case Log::graph_breaks:
      return "graph_breaks";
    case Log::recompiles:
      return "recompiles";
    case Log::graph:
      return "graph";
    case Log::fusion:
      return "fusion";
    case Log::code:
      return "code";
    case Log::cache:
      return "cache";
    case Log::autotune:
      return "autotune";
    case Log::perf:
      return "perf";
  }
  return "?";
}

unsigned parse(const char* env) {
  if (!env) return 0;
  unsigned mask = 0;
  std::string s(env);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(pos, end - pos);
    if (!item.empty() && item[0] == '+') item.erase(0, 1);
    if (item == "all") mask = ~0u;
    for (unsigned bit = 1; bit <= static_cast<unsigned>(Log::perf); bit <<= 1)
      if (item == name_of(static_cast<Log>(bit))) mask |= bit;
    pos = end + 1;
  }
  return mask;
}

std::atomic<unsigned> g_mask{parse(std::getenv("EMBER_LOGS"))};
std::atomic<LogSink> g_sink{nullptr};
// Lines on stderr carry the milliseconds since the library loaded, so a log of a slow first step
// says where the time went between the messages as well as in them.
const std::chrono::steady_clock::time_point g_start = std::chrono::steady_clock::now();

}  // namespace

namespace detail {
unsigned log_mask() { return g_mask.load(std::memory_order_relaxed); }
void log_write(Log which, std::string_view msg) {
  std::string line = "[ember] [";
  line += name_of(which);
  line += "] ";
  line += msg;
  if (LogSink sink = g_sink.load()) {
    sink(line);
    return;
  }
  char stamp[32];
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - g_start).count();
  std::snprintf(stamp, sizeof stamp, "[ember] [+%.1f ms]", ms);
  line.replace(0, 7, stamp);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}
}  // namespace detail

unsigned set_log_mask(unsigned mask) { return g_mask.exchange(mask); }
void set_log_sink(LogSink sink) { g_sink.store(sink); }

}  // namespace ember
