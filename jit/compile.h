#pragma once
/// \file
/// jit::compile: wraps a whole training step (or any function of tensors) so it is traced per
/// signature and replayed from a cached executable afterwards (PyTorch's `torch.compile`, with
/// backward and the optimizer step inside the graph).
///
/// \code
/// auto train_step = jit::compile([&](const Tensor& x, const Tensor& y) {
///   opt.zero_grad();
///   Tensor loss = criterion(model(x), y);
///   loss.backward();
///   opt.step();
///   return loss;
/// }, {.mode = jit::Mode::ReduceOverhead, .fullgraph = true});
/// float l = train_step(x, y).item<float>();  // read the loss outside the compiled function
/// \endcode
///
/// **Tracing.** A call with a new signature runs the function eagerly under a tracer (its
/// result is the eager result). Once two consecutive traces of a signature agree (ops,
/// attributes, layouts, state identities, frozen constants), the graph is optimized (dead code,
/// common subexpressions, constant folding, canonicalization, fusion, memory planning) and later
/// calls replay the executable without running the function. A training step therefore needs
/// two traced calls that agree, after one that creates state if it has any (momentum buffers):
/// two or three in all.
///
/// **Arguments and signature.** Arguments are tensors and plain values (numbers, enums,
/// strings); capture modules and optimizers in the lambda. The signature is, per tensor
/// argument, its shape (with dynamic dims: its rank and static dims), strides (with dynamic
/// dims: that it is contiguous), dtype, device, requires_grad and which arguments are the same
/// tensor; the value of each plain argument; grad mode; the autocast state; and, for gradients
/// the function reads before setting them, whether each is set and its layout. Where an
/// argument lives (storage offset included) is not part of it, so a batch sliced from a larger
/// tensor is an ordinary argument. A miss is logged with its reason (`input 0 dim 0: 128 -> 56`).
/// After Options::recompile_limit signatures, new ones run eagerly (said once on stderr).
///
/// **State and frozen values.** A tensor the function uses but neither receives nor creates
/// (parameters, `.grad` slots, optimizer buffers and hyperparameters, step counters, the
/// default generator) is state: read live at every replay and updated in place, so after a
/// replay model and optimizer are as eager would leave them. `opt.set_lr()` between calls
/// therefore needs no recompile. A replay checks that every state tensor still lives in the
/// same memory with the same requires_grad (`model->to()` or freezing a parameter retraces),
/// and a module's train()/eval(), new optimizer parameters or structural optimizer options
/// (momentum on or off, nesterov, amsgrad, maximize) retrace too. Host values the lambda
/// captures (a `float` scalar, a tensor built from host data inside it) are frozen into the
/// trace: one that changes between the traced calls is a graph break, one that changes only
/// later is not seen. Pass such values as arguments or keep them in a tensor.
///
/// **Graph breaks.** Reading tensor data on the host inside the function (`item()`,
/// `to_vector()`, `data_ptr()`, `to(cpu)` of a traced tensor), a random op on a non-default
/// generator, a result that still needs autograd when the function ran no backward, a frozen
/// constant that changes, or traces that never agree. With Options::fullgraph that raises
/// GraphBreakError naming the op, the reason and the call site; otherwise that signature runs
/// eagerly from then on and the break is logged once (`EMBER_LOGS=graph_breaks`).
///
/// **Results.** A Tensor, a std::tuple or std::pair of tensors, a std::vector<Tensor>, or
/// nothing. Returned tensors are fresh (a later call never overwrites them); a replay returns
/// them detached (a loss that required grad is fine once the function ran backward). A
/// gradient `p.grad()` after a replay is a buffer the executable reuses: clone it to keep it
/// past the next call.
///
/// **Logs.** `EMBER_LOGS=graph_breaks,recompiles,graph,fusion,code,cache,autotune,perf` (or
/// `all`) writes to stderr with an `[ember]` prefix (jit/log.h); explain() reports what
/// compiling a function would do.
///
/// **Threads.** Calls of one compiled function (and of its copies, which share its cache) are
/// serialised: a second thread waits until the first call returns. A call made from inside the
/// function's own body (recursion) runs the body directly, as plain eager code (inside a trace
/// it is traced inline, like any other code of the outer call).
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

/// How a compiled function's executables run (PyTorch's `mode=`).
enum class Mode {
  Default,  ///< the plan's kernels launched in order
  /// CUDA: after one plain replay, the replay is captured as a CUDA graph (per argument
  /// addresses) and replayed with one launch. Plans that cannot be captured (CPU tensors,
  /// non-contiguous arguments, several GPUs) run as in Default.
  ReduceOverhead,
  /// ReduceOverhead, and each GEMM times the top cuBLASLt algorithms on its real operands once
  /// and keeps the fastest (`EMBER_LOGS=autotune`).
  MaxAutotune,
};

/// Options of jit::compile, set with designated initializers:
/// `{.mode = jit::Mode::ReduceOverhead, .fullgraph = true}`.
struct Options {
  Mode mode = Mode::Default;  ///< how executables run
  /// true: a graph break raises GraphBreakError instead of running that signature eagerly
  /// (PyTorch's `fullgraph=True`).
  bool fullgraph = false;
  /// true: every dim of every (contiguous) argument is symbolic, one executable for all sizes;
  /// false: always specialize; unset (auto, the default): specialize first and make a dim
  /// symbolic, for good, the first time it changes. A size met before keeps the executable
  /// specialized for it; a symbolic signature serves every other size from one template,
  /// re-planning memory per size (up to 8 sizes kept).
  std::optional<bool> dynamic = std::nullopt;
  /// Signatures traced per function before new ones run eagerly (said once).
  int recompile_limit = 8;
  std::string name = "fn";  ///< the function's name in logs
};

/// What a compiled function did so far (Compiled::stats()).
struct CompileStats {
  int traces = 0;          ///< eager runs under the tracer
  int executables = 0;     ///< executables built (a dynamic template counts as one)
  int recompiles = 0;      ///< signature misses after the first signature, and retraces
  int replays = 0;         ///< calls served by an executable
  int graph_replays = 0;   ///< of those, launched as one captured CUDA graph
  int graph_captures = 0;  ///< CUDA graphs captured (one per addresses of the arguments)
  int eager_calls = 0;     ///< calls run eagerly, untraced (breaks, past the limit)
  int graph_breaks = 0;    ///< signatures that broke and run eagerly
};

/// What jit::explain() found: the graph before and after the passes, breaks, fusion, memory.
struct Explanation {
  bool captured = false;               ///< false: the function breaks (see breaks)
  std::vector<std::string> breaks;     ///< "item: reads tensor data ... (at file:line)"
  std::string traced_graph;            ///< text dump before the passes
  std::string optimized_graph;         ///< text dump after them (fused groups marked)
  std::string dot;                     ///< Graphviz of the optimized graph
  std::vector<std::string> passes;     ///< per pass, "dce: 120 -> 96 nodes"
  std::vector<std::string> groups;     ///< fused groups, "pointwise: 3 nodes (relu, mul, add)"
  std::vector<std::string> lowerings;  ///< how fused groups run on the device (CUDA)
  /// Nodes in the traced graph.
  int32_t nodes_traced = 0, nodes_optimized = 0;  ///< nodes after the passes
  int32_t kernels_per_replay = 0;                 ///< kernel calls per replay
  int64_t arena_bytes = 0;  ///< bytes of the memory plan's arena for intermediates
  /// The report as text (what explain() prints).
  std::string str() const;
  /// Writes the optimized graph as a picture: `<stem>.svg` rendered by Graphviz's `dot` when it
  /// is on the PATH (Debian's `graphviz`), else the Graphviz text as `<stem>.dot`, which any
  /// Graphviz viewer renders. Fused groups are boxed clusters, inputs and outputs ellipses.
  /// \return the path written.
  /// \throws ember::Error when the function broke (no graph), when the file cannot be written,
  /// or when `dot` fails; a failure leaves no partial `<stem>.svg` behind.
  std::string write_graph(const std::string& stem) const;
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

/// A compiled function, returned by jit::compile(); call it like the function it wraps.
///
/// Copies share the function and its cache of executables.
template <class F>
class Compiled {
 public:
  /// Wraps `fn`; prefer jit::compile().
  Compiled(F fn, Options options)
      : fn_(std::make_shared<F>(std::move(fn))),
        core_(std::make_shared<detail::CompiledCore>(std::move(options))) {}

  /// Calls the function: replays a cached executable whose signature fits, or runs the function
  /// eagerly (tracing it while the signature is new). Returns what the function returns.
  /// \throws GraphBreakError with Options::fullgraph, if the function cannot be captured whole.
  /// \throws ember::Error whatever the function throws, or if the plain arguments exceed 16
  ///         values or 240 bytes.
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

  /// What the function did so far: traces, executables, replays, breaks.
  const CompileStats& stats() const { return core_->stats(); }
  /// The optimized graph of the most recently built executable, as text (empty if none).
  std::string last_graph() const { return core_->last_graph(); }
  /// Drops every cached executable and signature (and the recompile-limit state); the next
  /// call traces afresh. stats() are kept.
  void reset() { core_->reset(); }

 private:
  std::shared_ptr<F> fn_;
  std::shared_ptr<detail::CompiledCore> core_;
  std::vector<Tensor> outputs_;
};

/// Runs `fn(args...)` once eagerly under the tracer and reports what compiling it would do
/// (PyTorch's `torch._dynamo.explain`); also prints the report to stderr.
///
/// Its effects happen, as in eager: explaining a training step takes one step. From one trace
/// it cannot see a frozen constant that changes between calls or traces that disagree; a break
/// is reported in Explanation::breaks, never thrown.
/// \code
/// jit::Explanation ex = jit::explain(step_fn, x, y);
/// std::cout << ex.kernels_per_replay << " kernels\n";
/// \endcode
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

/// Compiles `fn` (a lambda, function object or function pointer taking tensors and plain
/// values): nothing is traced until the first call. See jit/compile.h for the rules.
template <class F>
Compiled<std::decay_t<F>> compile(F&& fn, Options options = {}) {
  return Compiled<std::decay_t<F>>(std::forward<F>(fn), std::move(options));
}

}  // namespace ember::jit
