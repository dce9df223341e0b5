#pragma once
// A process-wide counter bumped when host configuration that changes what a step computes
// changes: a module switching train()/eval(), an optimizer gaining parameters or changing a
// structural option (momentum on/off, nesterov, maximize). The JIT reads such configuration on
// the host while tracing, so an executable remembers the counter and retraces when it moved.
#include <atomic>
#include <cstdint>

namespace ember {

namespace detail {
inline std::atomic<uint64_t> g_config_epoch{0};
}
inline uint64_t config_epoch() { return detail::g_config_epoch.load(std::memory_order_relaxed); }
inline void bump_config_epoch() { detail::g_config_epoch.fetch_add(1, std::memory_order_relaxed); }

}  // namespace ember
