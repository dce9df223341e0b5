#pragma once
// The counter-based generator: (seed, offset). One stream serves CPU and CUDA alike.
#include <cstdint>
#include <memory>
#include <mutex>

namespace ember {

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> g(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t off) {
    std::lock_guard<std::mutex> g(mu_);
    offset_ = off;
  }
  // Reserves `counters` Philox counters; returns the first.
  uint64_t advance(uint64_t counters) {
    std::lock_guard<std::mutex> g(mu_);
    const uint64_t o = offset_;
    offset_ += counters;
    return o;
  }

 private:
  std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // seeds the default generator

namespace detail {
// What this thread drew: counters from the default generator so far, and whether its latest
// draw came from it. Another thread's draws interleave with this thread's at any point; these
// let the JIT's tracer account for its own thread's draws only (jit/tracer.cpp).
struct ThreadDraws {
  uint64_t default_counters = 0;
  bool last_from_default = false;
};
inline thread_local ThreadDraws t_draws;
}  // namespace detail

}  // namespace ember
