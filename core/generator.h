#pragma once
/// \file
/// Generator, the counter-based (Philox) random number generator, and the default one.
///
/// A generator's state is just (seed, offset), and one stream serves CPU and CUDA alike: the
/// same seed gives the same rand / randn / randint values on either device.
#include <cstdint>
#include <memory>
#include <mutex>

namespace ember {

/// A Philox4x32-10 generator, like `torch.Generator`: a seed (the key) and an offset (the next
/// unused counter).
///
/// Each draw of n elements reserves ceil(n / 2) counters with advance(), so draws never overlap
/// and a draw's values depend only on (seed, offset), not on the device or the thread count.
/// Every method is thread-safe. Pass one to rand / randn / randint for a
/// stream of its own; without one they use default_generator().
class Generator {
 public:
  /// A generator with `seed`, at offset 0 (the default seed is PyTorch's default seed).
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  /// Sets the seed and rewinds the offset to 0, like `torch.Generator.manual_seed`.
  void manual_seed(uint64_t seed) {
    std::lock_guard<std::mutex> g(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  /// The current seed, like `torch.Generator.initial_seed`.
  uint64_t seed() const {
    std::lock_guard<std::mutex> g(mu_);
    return seed_;
  }
  /// The next counter a draw will use (with seed(), the whole state: save both to replay).
  uint64_t offset() const {
    std::lock_guard<std::mutex> g(mu_);
    return offset_;
  }
  /// Moves to counter `off`, e.g. back to a saved offset() to repeat the draws made from it.
  void set_offset(uint64_t off) {
    std::lock_guard<std::mutex> g(mu_);
    offset_ = off;
  }
  /// Reserves `counters` Philox counters; returns the first. Kernels of random ops call this,
  /// users normally do not.
  uint64_t advance(uint64_t counters) { return reserve(counters).offset; }
  /// The seed and first counter of a draw of `counters` counters.
  struct Reservation {
    uint64_t seed;    ///< the generator's seed at the draw
    uint64_t offset;  ///< the first of the reserved counters
  };
  /// Reserves `counters` counters and returns them with the seed they belong to, read together
  /// (a manual_seed() on another thread cannot fall between the two).
  Reservation reserve(uint64_t counters) {
    std::lock_guard<std::mutex> g(mu_);
    const Reservation r{seed_, offset_};
    offset_ += counters;
    return r;
  }

 private:
  mutable std::mutex mu_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// The process-wide generator that rand / randn / randint use when given none, like
/// `torch.default_generator`.
Generator& default_generator();
/// Seeds the default generator (and rewinds it), like `torch.manual_seed`.
void manual_seed(uint64_t seed);

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
