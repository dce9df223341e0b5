#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EMBER_CPU_RELAX() _mm_pause()
#else
#define EMBER_CPU_RELAX() std::this_thread::yield()
#endif

namespace ember {
namespace {

thread_local bool t_in_region = false;

// Marks the calling thread as inside a loop body for its lifetime (also when the body throws).
struct RegionGuard {
  bool was = t_in_region;
  RegionGuard() { t_in_region = true; }
  ~RegionGuard() { t_in_region = was; }
};

// Workers spin this long after a job before they sleep: a training step issues its parallel
// loops microseconds apart, and waking a sleeping thread costs more than most of them take.
constexpr auto kSpin = std::chrono::microseconds(200);

int default_threads() {
  if (const char* env = std::getenv("EMBER_NUM_THREADS"); env && *env) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    EMBER_CHECK(end && *end == '\0' && v >= 1 && v <= 4096,
                "EMBER_NUM_THREADS: expected a thread count >= 1, got '", env, "'");
    return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

class Pool {
 public:
  Pool() : threads_(default_threads()) {}
  ~Pool() { stop_workers(); }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void resize(int n) {
    std::lock_guard lock(submit_);
    stop_workers();
    threads_.store(n, std::memory_order_relaxed);
  }

  void run(int64_t n, int64_t grain, detail::RangeFn fn, const void* ctx) {
    std::unique_lock lock(submit_, std::try_to_lock);
    if (!lock.owns_lock()) {  // another thread's loop holds the pool: run this one inline
      RegionGuard region;
      fn(ctx, 0, n);
      return;
    }
    const int nthreads = threads();
    if (static_cast<int>(workers_.size()) != nthreads - 1) start_workers(nthreads - 1);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    const auto pieces =
        static_cast<uint64_t>(std::min<int64_t>(nthreads, n / grain));  // >= grain each
    done_.store(0, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    const uint64_t job = (generation_.load(std::memory_order_relaxed) + 1) & 0xffffffffu;
    claim_.store(job << 32 | pieces << 16, std::memory_order_release);
    bump_generation();

    {
      RegionGuard region;
      work(job);  // catches the body's exceptions
    }
    // Only the pieces are waited for: a worker that wakes after they are all claimed finds the
    // job over and never touches it, so a descheduled worker costs nothing.
    while (done_.load(std::memory_order_acquire) != static_cast<int>(pieces)) EMBER_CPU_RELAX();
    if (failed_.load(std::memory_order_relaxed)) {
      std::exception_ptr e = std::move(error_);
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  // Claims pieces of job `job` until none are left. claim_ packs (job id << 32 | pieces << 16 |
  // next piece); a claim is a compare-exchange on it, so a worker holding a stale job id claims
  // nothing. A claimed piece keeps the job alive (the submitter waits for it), so the job's
  // fields are valid while it runs. Piece i is [i n / pieces, (i + 1) n / pieces).
  void work(uint64_t job) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t pieces = (c >> 16) & 0xffffu, next = c & 0xffffu;
      if ((c >> 32) != job || next >= pieces) return;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire))
        continue;
      const auto i = static_cast<int64_t>(next), np = static_cast<int64_t>(pieces);
      const int64_t b = n_ * i / np, e = n_ * (i + 1) / np;
      try {
        fn_(ctx_, b, e);
      } catch (...) {
        if (!failed_.exchange(true)) error_ = std::current_exception();
      }
      done_.fetch_add(1, std::memory_order_release);
      c = claim_.load(std::memory_order_acquire);
    }
  }

  // `seen`: the generation when the worker was started (a job published before the thread got
  // to run may still have pieces left).
  void worker_loop(uint64_t seen) {
    t_in_region = true;
    for (;;) {
      uint64_t g = generation_.load(std::memory_order_acquire);
      if (g == seen) {
        const auto until = std::chrono::steady_clock::now() + kSpin;
        for (int i = 0; (g = generation_.load(std::memory_order_acquire)) == seen; ++i) {
          EMBER_CPU_RELAX();
          if ((i & 255) == 255 && std::chrono::steady_clock::now() > until) {
            std::unique_lock lock(sleep_);
            wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
          }
        }
      }
      seen = g;
      if (stop_.load(std::memory_order_acquire)) return;
      work(g & 0xffffffffu);
    }
  }

  // Publishes a new job (or the stop flag) to the workers. The bump happens under sleep_ so a
  // worker that has just found the generation unchanged under the lock cannot miss the wake-up.
  void bump_generation() {
    {
      std::lock_guard lock(sleep_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
  }

  void start_workers(int count) {
    stop_workers();
    stop_.store(false, std::memory_order_relaxed);
    workers_.reserve(static_cast<size_t>(count));
    const uint64_t gen = generation_.load(std::memory_order_relaxed);
    for (int i = 0; i < count; ++i) workers_.emplace_back([this, gen] { worker_loop(gen); });
  }

  void stop_workers() {
    if (workers_.empty()) return;
    stop_.store(true, std::memory_order_release);
    bump_generation();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex submit_;  // one loop on the pool at a time
  std::atomic<int> threads_;
  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::mutex sleep_;  // workers past their spin sleep on wake_
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  // The current job: written by the submitter before claim_ is published, read by a worker
  // only after it claimed a piece, rewritten only once every piece is done.
  detail::RangeFn fn_ = nullptr;
  const void* ctx_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

int get_num_threads() { return pool().threads(); }

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1, "set_num_threads: expected a thread count >= 1, got ", n);
  EMBER_CHECK(!t_in_region, "set_num_threads: called from inside a parallel loop");
  pool().resize(n);
}

bool in_parallel_region() { return t_in_region; }

namespace detail {
void parallel_run(int64_t n, int64_t grain, RangeFn fn, const void* ctx) {
  if (n / grain < 2) {  // one range of at least `grain`: no hand-off
    RegionGuard region;
    fn(ctx, 0, n);
    return;
  }
  pool().run(n, grain, fn, ctx);
}
}  // namespace detail

}  // namespace ember
