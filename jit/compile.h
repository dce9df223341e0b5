#pragma once
// jit::compile: wraps a whole training step (or any function of tensors) so it is traced once
// per signature and replayed from a cached executable afterwards.
//
//   auto step = jit::compile([&](const Tensor& x, const Tensor& y) { ...; return loss; },
//                            {.mode = jit::Mode::Default, .fullgraph = true});
//   Tensor loss = step(x, y);
//
// Arguments: tensors (part of the signature: shape, strides, dtype, device, requires_grad) and
// plain values (arithmetic, enums, strings: guarded by value, a new value is a new signature).
// Results: a Tensor, std::tuple / std::pair of tensors, std::vector<Tensor>, or nothing.
// The rules (what is frozen, what is guarded, what breaks a graph) are in the README.
//
// Threads: calls of one compiled function (and of its copies, which share its cache) are
// serialised: a second thread waits until the first call returns. A call made from inside the
// function's own body (recursion) runs the body directly, as plain eager code (inside a trace it
// is traced inline, like any other code of the outer call).
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "jit/errors.h"
#include "jit/signature.h"

namespace ember::jit {

enum class Mode {
  Default,         // the plan's kernels launched in order
  ReduceOverhead,  // CUDA: the executable replayed as a CUDA graph (next issue)
  MaxAutotune,     // CUDA: also autotunes GEMM algorithms and launch shapes (next issue)
};

struct Options {
  Mode mode = Mode::Default;
  // A graph break raises GraphBreakError instead of running that signature eagerly.
  bool fullgraph = false;
  // true: every input dim is symbolic (one executable for all sizes); false: always specialize;
  // unset (auto): specialize first, make a dim symbolic the first time it changes.
  std::optional<bool> dynamic = std::nullopt;
  // Signatures traced per function before it gives up and runs eagerly.
  int recompile_limit = 8;
  std::string name = "fn";  // in logs
};

// What a compiled function did so far.
struct CompileStats {
  int traces = 0;          // eager runs under the tracer
  int executables = 0;     // executables built
  int recompiles = 0;      // signature misses after the first signature
  int replays = 0;         // calls served by an executable
  int graph_replays = 0;   // of those, launched as one captured CUDA graph
  int graph_captures = 0;  // CUDA graphs captured (one per addresses of the arguments)
  int eager_calls = 0;     // calls run eagerly (breaks, past the limit)
  int graph_breaks = 0;
};

// What jit::explain found: the graph before and after the passes, breaks, fusion, memory.
struct Explanation {
  bool captured = false;               // false: the function breaks (see breaks)
  std::vector<std::string> breaks;     // "item: reads tensor data ... (at file:line)"
  std::string traced_graph;            // text dump before the passes
  std::string optimized_graph;         // after them (fused groups marked)
  std::string dot;                     // Graphviz of the optimized graph
  std::vector<std::string> passes;     // "dce: 120 -> 96 nodes"
  std::vector<std::string> groups;     // "pointwise: 3 nodes (relu, mul, add)"
  std::vector<std::string> lowerings;  // how fused groups run on the device (CUDA)
  int32_t nodes_traced = 0, nodes_optimized = 0;
  int32_t kernels_per_replay = 0;
  int64_t arena_bytes = 0;
  std::string str() const;
};

namespace detail {

class CompiledCore {
 public:
  explicit CompiledCore(Options options);
  ~CompiledCore();
  using EagerFn = void (*)(void* ctx, std::vector<Tensor>& outputs);
  // Runs one call: replay, or eager (tracing when the signature is new).
  void call(std::span<const Tensor> tensors, const PlainKey& plain, EagerFn eager, void* ctx,
            std::vector<Tensor>& outputs);
  const CompileStats& stats() const;
  const Options& options() const;
  // The optimized graph of the most recently built executable, as text (empty if none).
  std::string last_graph() const;
  void reset();  // drops every cached executable

  // Holds the function for one call (other threads wait) and marks this thread as inside it.
  class CallGuard {
   public:
    explicit CallGuard(CompiledCore& c) : core_(c), lock_(c.mutex_) {
      c.owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    }
    ~CallGuard() { core_.owner_.store(std::thread::id(), std::memory_order_relaxed); }
    CallGuard(const CallGuard&) = delete;
    CallGuard& operator=(const CallGuard&) = delete;

   private:
    CompiledCore& core_;
    std::lock_guard<std::mutex> lock_;
  };
  // Whether this thread is inside a call of this function (a recursive call).
  bool running_here() const {
    return owner_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};
};

using EagerCall = void (*)(void* ctx, std::vector<Tensor>& outputs);
Explanation explain_call(std::span<const Tensor> tensors, EagerCall eager, void* ctx);

template <class T>
inline constexpr bool is_tensor_v = std::is_same_v<std::remove_cvref_t<T>, Tensor>;

template <class T>
void add_plain(PlainKey& key, const T& v, size_t position) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_arithmetic_v<U> || std::is_enum_v<U>) {
    key.add(&v, sizeof(U));
    key.end_arg(position);
  } else if constexpr (std::is_convertible_v<const U&, std::string_view>) {
    const std::string_view s(v);
    const size_t n = s.size();
    key.add(&n, sizeof n);
    key.add(s.data(), n);
    key.end_arg(position);
  } else {
    static_assert(is_tensor_v<U>,
                  "jit::compile: arguments must be tensors or plain values (numbers, enums, "
                  "strings); capture modules and optimizers in the lambda instead");
  }
}

template <class R>
void flatten_result(R&& r, std::vector<Tensor>& out) {
  using U = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<U, Tensor>) {
    out.push_back(std::forward<R>(r));
  } else if constexpr (std::is_same_v<U, std::vector<Tensor>>) {
    for (auto& t : r) out.push_back(t);
  } else {
    std::apply([&](auto&... ts) { (out.push_back(ts), ...); }, r);
  }
}

template <class R>
R unflatten_result(std::vector<Tensor>& v) {
  if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_same_v<R, Tensor>) {
    return std::move(v.at(0));
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    return std::move(v);
  } else {
    return [&]<size_t... I>(std::index_sequence<I...>) { return R{std::move(v.at(I))...}; }
    (std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

}  // namespace detail

template <class F>
class Compiled {
 public:
  Compiled(F fn, Options options)
      : fn_(std::make_shared<F>(std::move(fn))),
        core_(std::make_shared<detail::CompiledCore>(std::move(options))) {}

  template <class... Args>
  auto operator()(Args&&... args) {
    using R = std::invoke_result_t<F&, Args&...>;
    if (core_->running_here()) return static_cast<R>(std::invoke(*fn_, args...));
    const detail::CompiledCore::CallGuard guard(*core_);
    constexpr size_t kTensors = (size_t{0} + ... + (detail::is_tensor_v<Args> ? 1 : 0));
    std::array<Tensor, kTensors> tensors;
    detail::PlainKey plain;
    size_t k = 0, position = 0;
    (
        [&](const auto& a) {
          if constexpr (detail::is_tensor_v<decltype(a)>)
            tensors[k++] = a;
          else
            detail::add_plain(plain, a, position);
          ++position;
        }(args),
        ...);
    struct Ctx {
      F* fn;
      std::tuple<Args&...> args;
    } ctx{fn_.get(), std::tuple<Args&...>(args...)};
    auto eager = [](void* p, std::vector<Tensor>& out) {
      Ctx& c = *static_cast<Ctx*>(p);
      if constexpr (std::is_void_v<R>) {
        std::apply(*c.fn, c.args);
      } else {
        detail::flatten_result(std::apply(*c.fn, c.args), out);
      }
    };
    core_->call(std::span<const Tensor>(tensors.data(), kTensors), plain, eager, &ctx, outputs_);
    return detail::unflatten_result<R>(outputs_);
  }

  const CompileStats& stats() const { return core_->stats(); }
  std::string last_graph() const { return core_->last_graph(); }
  void reset() { core_->reset(); }

 private:
  std::shared_ptr<F> fn_;
  std::shared_ptr<detail::CompiledCore> core_;
  std::vector<Tensor> outputs_;
};

// Runs `fn(args...)` once eagerly under the tracer (its effects happen, as in eager) and reports
// what compiling it would do; also prints the report to stderr.
template <class F, class... Args>
Explanation explain(F&& fn, Args&&... args) {
  std::vector<Tensor> tensors;
  (
      [&](const auto& a) {
        if constexpr (detail::is_tensor_v<decltype(a)>) tensors.push_back(a);
      }(args),
      ...);
  using Fn = std::remove_reference_t<F>;
  using R = std::invoke_result_t<Fn&, Args&...>;
  struct Ctx {
    Fn* fn;
    std::tuple<Args&...> args;
  } ctx{&fn, std::tuple<Args&...>(args...)};
  auto eager = [](void* p, std::vector<Tensor>& out) {
    Ctx& c = *static_cast<Ctx*>(p);
    if constexpr (std::is_void_v<R>) {
      std::apply(*c.fn, c.args);
    } else {
      detail::flatten_result(std::apply(*c.fn, c.args), out);
    }
  };
  return detail::explain_call(tensors, eager, &ctx);
}

template <class F>
Compiled<std::decay_t<F>> compile(F&& fn, Options options = {}) {
  return Compiled<std::decay_t<F>>(std::forward<F>(fn), std::move(options));
}

}  // namespace ember::jit
