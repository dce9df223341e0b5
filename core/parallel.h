#pragma once
/// \file
/// The one intra-op thread pool of the CPU backend (like ATen's `at::parallel_for`).
///
/// GEMMs, pointwise loops, reductions, the optimizer update and the JIT's fused CPU groups split
/// their work over it; the BLAS runs single-threaded inside each piece, so there is never a
/// second pool competing for the cores.
///
/// Size: EMBER_NUM_THREADS if set, else `std::thread::hardware_concurrency()`; set_num_threads()
/// changes it (like `torch.set_num_threads`). The calling thread takes part, so n threads means
/// n - 1 workers.
///
/// Results never depend on the thread count: parallel_for hands out contiguous index ranges, and
/// every caller either writes disjoint outputs per index or combines fixed-size blocks in index
/// order (kernels/cpu/reduce.cpp), so a sum adds in the same order on 1 thread or 16.
#include <cstdint>

namespace ember {

/// Elements of a cheap elementwise loop (a few operations each) below which the CPU kernels keep
/// it on one thread: the hand-off to the pool costs about as much as that many elements take.
inline constexpr int64_t kParallelGrainElements = 32768;

/// Threads the CPU kernels use (>= 1), like `torch.get_num_threads()`.
int get_num_threads();
/// Sets the pool to `n` threads, the caller included, like `torch.set_num_threads`. Throws
/// ember::Error naming the value when n < 1, or when called from inside a parallel_for body.
/// Waits for running work; safe to call between steps from the thread that runs them.
void set_num_threads(int n);
/// True inside a parallel_for body (nested calls run inline on the calling thread).
bool in_parallel_region();

namespace detail {
using RangeFn = void (*)(const void* ctx, int64_t begin, int64_t end);
void parallel_run(int64_t n, int64_t grain, RangeFn fn, const void* ctx);
}  // namespace detail

/// Calls `f(begin, end)` over disjoint ranges covering [0, n), each at least `grain` long, on up
/// to get_num_threads() threads; returns when all are done. Like `at::parallel_for`.
///
/// Runs `f(0, n)` inline when one range suffices (n < 2 grain), the pool has one thread, or it
/// is called from inside another parallel_for (or while another thread's loop holds the pool).
/// An exception thrown by `f` is rethrown here once every range has finished (the first one, if
/// several throw). No allocation, no std::function: `f` is called through a function pointer to
/// this template.
/// \param n     the number of indices; nothing runs when n <= 0.
/// \param grain the shortest range worth a thread (values below 1 count as 1); for cheap
///              elementwise work, kParallelGrainElements.
/// \param f     callable as `f(int64_t begin, int64_t end)`, safe to run concurrently on
///              disjoint ranges.
/// \code
/// parallel_for(n, kParallelGrainElements, [&](int64_t b, int64_t e) {
///   for (int64_t i = b; i < e; ++i) out[i] = in[i] * 2;
/// });
/// \endcode
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (n < 2 * grain || get_num_threads() == 1 || in_parallel_region()) {
    f(int64_t{0}, n);
    return;
  }
  detail::parallel_run(
      n, grain, [](const void* ctx, int64_t b, int64_t e) { (*static_cast<const F*>(ctx))(b, e); },
      &f);
}

}  // namespace ember
