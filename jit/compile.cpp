// The compiled function: signatures, the executable cache, tracing, recompiles and breaks.
//
// Why two traces: a C++ lambda's control flow and captured host values are invisible to the
// tracer, so one trace cannot show that the next call will do the same. Ember therefore compiles
// a signature when two consecutive traces agree exactly (ops, attributes, layouts, state
// identities, frozen constants). A training step needs two calls that agree, after one that
// creates state if it has any (momentum buffers). A host constant that changes
// between calls shows up as a difference and is a graph break.
#include "jit/compile.h"

#include <chrono>
#include <sstream>

#include "autograd/grad_mode.h"
#include "core/autocast.h"
#include "core/collective.h"
#include "core/config_epoch.h"
#include "core/cuda_runtime.h"
#include "jit/disk_store.h"
#include "jit/dynamic.h"
#include "jit/executor.h"
#include "jit/fingerprint.h"
#include "jit/log.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "jit/tracer.h"

namespace ember::jit {
namespace detail {

namespace {

constexpr int kMaxTracesPerSignature = 4;

struct Entry {
  enum class State { Tracing, Compiled, Eager };
  Signature sig;
  State state = State::Tracing;
  std::unique_ptr<Graph> prev;
  std::string prev_fp;
  int traces = 0;
  std::unique_ptr<Executor> exec;
  std::string eager_reason;
  uint64_t epoch = 0;  // config_epoch() when traced: train()/eval() and the like retrace
  // Dynamic shapes (sig.sym): an entry with dims allowed to vary matches whatever they are;
  // once two traces at different sizes agree it holds a template and instantiates an executor
  // per size it meets.
  std::unique_ptr<Graph> raw;  // the raw trace behind `exec`, for later generalization
  std::unique_ptr<SymbolicTemplate> tmpl;
  struct Instance {
    std::vector<int64_t> sizes;
    std::unique_ptr<Executor> exec;
  };
  std::vector<Instance> instances;
  // The gradients the executable (or template, or the last trace) read when a call began.
  std::vector<GradGuard> grads;
};

constexpr size_t kMaxInstances = 8;

std::vector<GradGuard> grad_guards(const Graph& g) {
  std::vector<GradGuard> out;
  for (const GradInput& gi : g.grad_inputs) {
    GradGuard x;
    x.param = g.state[gi.param];
    x.state = gi.param;
    x.defined = gi.defined;
    x.bound = gi.value != kNoValue;
    if (x.bound) {
      const Value& v = g.values[gi.value];
      x.sizes = v.shape;
      x.strides = v.strides;
      x.dtype = v.dtype;
      x.device = v.device;
    }
    out.push_back(std::move(x));
  }
  return out;
}

// Whether some argument's sizes differ between two traces: only then can they generalize.
bool sizes_differ(const Graph& a, const Graph& b) {
  if (a.inputs.size() != b.inputs.size()) return true;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.values[a.inputs[i]].shape != b.values[b.inputs[i]].shape) return true;
  return false;
}

}  // namespace

struct CompiledCore::Impl {
  Options options;
  CompileStats stats;
  std::vector<std::unique_ptr<Entry>> entries;
  Entry* last = nullptr;
  bool over_limit = false;
  std::string last_graph;
  // Every executable of this function keeps its intermediates in the same arenas (its calls
  // run one at a time): one per batch size would multiply the memory (jit/executor.h).
  std::shared_ptr<ArenaPool> arena_pool = std::make_shared<ArenaPool>();

  // ReduceOverhead and MaxAutotune replay CUDA executables as CUDA graphs.
  // MaxAutotune also times GEMM algorithms per call site (a process-wide switch the GEMM
  // lowering reads when it is built, which happens right after this).
  ExecutorOptions executor_options() const {
    ExecutorOptions o;
    o.cuda_graph = options.mode != Mode::Default;
    o.arena_pool = arena_pool;
    set_gemm_autotune(options.mode == Mode::MaxAutotune);
    return o;
  }

  void run_eager(EagerFn eager, void* ctx, std::vector<Tensor>& outputs) {
    outputs.clear();
    eager(ctx, outputs);
    ++stats.eager_calls;
  }

  void to_eager(Entry& e, const std::string& why) {
    e.state = Entry::State::Eager;
    e.eager_reason = why;
    e.prev.reset();
    ++stats.graph_breaks;
    log(Log::graph_breaks,
        options.name + ": graph break: " + why + "; this signature runs eagerly from now on");
  }

  void build(Entry& e, Graph g) {
    if (log_enabled(Log::graph)) log(Log::graph, options.name + ": traced graph\n" + g.str());
    if (!e.prev) e.prev = std::make_unique<Graph>(g);  // kept as the raw trace
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const std::vector<PassReport> reports = optimize(g);
    const auto t1 = Clock::now();
    if (log_enabled(Log::fusion)) {
      std::ostringstream os;
      os << options.name << ": passes";
      for (const PassReport& r : reports)
        os << " " << r.pass << " " << r.nodes_before << "->" << r.nodes_after;
      os << "; " << g.groups.size() << " fused groups";
      for (const Group& grp : g.groups)
        os << " [" << group_kind_name(grp.kind) << " x" << grp.nodes.size() << "]";
      log(Log::fusion, os.str());
    }
    last_graph = g.str();
    if (log_enabled(Log::graph)) log(Log::graph, options.name + ": optimized graph\n" + last_graph);
    e.grads = grad_guards(g);
    e.exec = std::make_unique<Executor>(std::move(g), executor_options());
    const auto t2 = Clock::now();
    e.state = Entry::State::Compiled;
    log(Log::cache, options.name + ": stored an executable (" + std::to_string(entries.size()) +
                        " signatures cached)");
    e.raw = std::move(e.prev);
    ++stats.executables;
    if (log_enabled(Log::perf)) {
      const auto ms = [](Clock::duration d) {
        return std::to_string(std::chrono::duration<double, std::milli>(d).count());
      };
      log(Log::perf, options.name + ": built in " + ms(t2 - t0) + " ms (passes " + ms(t1 - t0) +
                         " ms, memory plan + lowering " + ms(t2 - t1) + " ms)");
      const ExecutorStats& s = e.exec->stats();
      log(Log::perf, options.name + ": executable " + std::to_string(s.steps) + " steps, " +
                         std::to_string(s.kernels) + " kernel calls per replay, arena " +
                         std::to_string(s.arena_bytes) + " bytes (at most " +
                         std::to_string(s.arena_live_bound) + " live at one node)" +
                         (e.exec->graph_note().empty() ? "" : "; " + e.exec->graph_note()));
      for (const std::string& l : e.exec->lowerings()) log(Log::perf, options.name + ": " + l);
      for (const Tensor& st : e.exec->graph().state)
        if (st.is_cuda()) {
          const cuda::AllocatorStats m = cuda::memory_stats(st.device().index);
          log(Log::perf, options.name + ": device memory after building it: " +
                             std::to_string(m.allocated >> 10) + " KiB allocated, peak " +
                             std::to_string(m.peak_allocated >> 10) + " KiB");
          break;
        }
    }
  }

  // dynamic=true: every dim of every argument may vary. auto: the dims in which this signature
  // differs from an earlier one that is otherwise the same, seeded with that one's trace so the
  // next trace can generalize at once. Entries without such dims stay exact.
  void mark_symbolic(Entry& e, bool all) {
    Signature& sig = e.sig;
    if (all) {
      for (size_t i = 0; i < sig.args.size(); ++i)
        sig.sym[i] = static_cast<uint16_t>((1u << sig.args[i].sizes.size()) - 1);
    } else {
      for (auto& c : entries) {
        Entry& b = *c;
        if (&b == &e || b.sig.args.size() != sig.args.size() || b.sig.grad_mode != sig.grad_mode ||
            b.sig.autocast != sig.autocast || !(b.sig.plain == sig.plain))
          continue;
        const Graph* seed = b.raw ? b.raw.get() : b.prev.get();
        if (!seed) continue;
        bool same = true;
        std::vector<uint16_t> mask(sig.args.size(), 0);
        for (size_t i = 0; i < sig.args.size() && same; ++i) {
          const ArgSig& x = sig.args[i];
          const ArgSig& y = b.sig.args[i];
          same = x.sizes.size() == y.sizes.size() && x.dtype == y.dtype && x.device == y.device &&
                 x.requires_grad == y.requires_grad && x.alias == y.alias;
          for (int d = 0; same && d < x.sizes.size(); ++d)
            if (x.sizes[d] != y.sizes[d]) mask[i] |= static_cast<uint16_t>(1u << d);
          mask[i] |= b.sig.sym[i];
        }
        bool changed = false;
        for (uint16_t m : mask) changed = changed || m != 0;
        // Nothing to generalize over: the same sizes as an executable that did not fit (its
        // gradients were set differently, say) start a trace of their own.
        if (!same || !changed) continue;
        sig.sym = mask;
        e.epoch = b.epoch;  // the seed trace's settings
        e.prev = std::make_unique<Graph>(*seed);
        e.prev_fp = fingerprint(*seed);
        break;
      }
    }
    for (uint16_t m : sig.sym) sig.symbolic = sig.symbolic || m != 0;
    // A symbolic entry matches after the exact ones.
    if (sig.symbolic)
      for (size_t i = 0; i < entries.size(); ++i)
        if (entries[i].get() == &e) {
          std::unique_ptr<Entry> own = std::move(entries[i]);
          entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(i));
          entries.push_back(std::move(own));
          break;
        }
  }

  // Serves a call from a symbolic entry's template.
  enum class TemplateRun { Served, Disagree, Retrace };
  TemplateRun run_template(Entry& e, std::span<const Tensor> user_args,
                           std::vector<Tensor>& outputs) {
    std::vector<int64_t>& sv = scratch_sizes;
    if (!symbol_values(*e.tmpl, user_args, sv)) return TemplateRun::Disagree;
    const std::span<const Tensor> tensors = bind_args(e, user_args);
    Entry::Instance* inst = nullptr;
    for (auto& i : e.instances)
      if (i.sizes == sv) inst = &i;
    if (!inst) {
      Graph g;
      try {
        g = instantiate(*e.tmpl, tensors, sv);
      } catch (const Error& err) {
        // These sizes do not fit what the two traces showed (e.g. a size that only works for
        // some values): trace them as a signature of their own.
        log(Log::recompiles,
            options.name + ": dynamic: sizes do not fit the template (" + err.what() + ")");
        return TemplateRun::Disagree;
      }
      optimize(g);
      if (e.instances.size() >= kMaxInstances) e.instances.erase(e.instances.begin());
      e.instances.push_back({sv, std::make_unique<Executor>(std::move(g), executor_options())});
      inst = &e.instances.back();
      if (log_enabled(Log::perf)) {
        std::string sizes;
        for (int64_t v : sv) {
          if (!sizes.empty()) sizes += ',';
          sizes += std::to_string(v);
        }
        log(Log::perf, options.name + ": dynamic: planned sizes (" + sizes + ")");
      }
    }
    std::string stale = inst->exec->stale_reason();
    if (stale.empty() && e.epoch != config_epoch())
      stale = "host configuration changed since the trace (train()/eval(), optimizer options)";
    if (!stale.empty()) {
      log(Log::recompiles, options.name + ": recompiling: " + stale);
      ++stats.recompiles;
      e.tmpl.reset();
      e.grads.clear();
      e.instances.clear();
      e.traces = 0;
      return TemplateRun::Retrace;
    }
    last = &e;
    const int32_t captures = inst->exec->stats().graph_captures;
    inst->exec->run(tensors, outputs);
    ++stats.replays;
    if (inst->exec->stats().graph_nodes > 0) ++stats.graph_replays;
    stats.graph_captures += inst->exec->stats().graph_captures - captures;
    return TemplateRun::Served;
  }
  std::vector<int64_t> scratch_sizes;

  Entry* make_entry(std::span<const Tensor> tensors, const PlainKey& plain, bool grad_mode) {
    auto entry = std::make_unique<Entry>();
    entry->sig = Signature::of(tensors, plain, grad_mode);
    entry->epoch = config_epoch();
    // Exact entries go first so a size met before keeps its specialized executor.
    entries.insert(entries.begin(), std::move(entry));
    return entries.front().get();
  }

  // The entry serving this call. A specialized executable (or an exact signature that broke
  // and runs eagerly) comes first, so a size met before keeps what it had; then a template that
  // can serve any size; then entries still tracing. Allocates nothing.
  Entry* lookup(std::span<const Tensor> tensors, const PlainKey& plain, bool grad_mode) {
    auto serves = [&](const Entry& c) {
      return fits(c.sig, tensors, plain, grad_mode) && grads_fit(c.grads);
    };
    auto rank = [](const Entry& c) {
      if (!c.sig.symbolic && c.state != Entry::State::Tracing) return 0;
      return c.tmpl ? 1 : 2;
    };
    if (last && rank(*last) == 0 && serves(*last)) return last;
    Entry* best = nullptr;
    for (auto& c : entries) {
      if ((best && rank(*c) >= rank(*best)) || !serves(*c)) continue;
      best = c.get();
      if (rank(*best) == 0) break;
    }
    return best;
  }

  // Why no entry serves this call, for the log: the gradients of an entry whose arguments fit,
  // else the arguments against the last entry used.
  std::string why_missed(std::span<const Tensor> tensors, const PlainKey& plain, bool grad_mode) {
    std::string why;
    for (auto& c : entries)
      if (fits(c->sig, tensors, plain, grad_mode) && !grads_fit(c->grads, &why)) return why;
    if (last) fits(last->sig, tensors, plain, grad_mode, &why);
    return why;
  }

  // The executable's arguments: the call's tensors, then the gradients it reads (GradInput). A
  // gradient that an executable of this function left in the arenas they share is copied out
  // first (the parameter's .grad becomes the copy): this call's intermediates may reuse those
  // bytes. Valid until call_args is cleared after the run.
  std::span<const Tensor> bind_args(const Entry& e, std::span<const Tensor> tensors) {
    bool any = false;
    for (const GradGuard& g : e.grads) any = any || g.bound;
    if (!any) return tensors;
    call_args.assign(tensors.begin(), tensors.end());
    for (const GradGuard& g : e.grads) {
      if (!g.bound) continue;
      Tensor param = g.param, grad = param.grad();
      if (arena_pool->owns(grad.impl()->storage.get())) {
        grad = grad.clone();
        param.set_grad(grad);
      }
      call_args.push_back(std::move(grad));
    }
    return call_args;
  }
  std::vector<Tensor> call_args;

  // Every rank that ran a collective in this traced call compares its trace with the others'
  // (a collective itself, so all of them are here): one that broke makes all of them run the
  // call eagerly (a rank replaying a graph while another runs eagerly would still issue the same
  // collectives, but the graphs' guards could then part ways); ranks that traced different steps
  // are an error on every rank. Returns whether another rank broke.
  bool agree_across_ranks(const Tracer& tracer, const std::string& fp) {
    const TraceVerdict v = agree_on_trace(tracer.collective_group(), tracer.broken(), fp);
    if (v.different_rank >= 0)
      EMBER_FAIL(options.name, ": rank ", v.different_rank, " traced a different step from rank ",
                 v.reference_rank,
                 " (the ranks of a data-parallel job must run the same ops on the same shapes; "
                 "rank-dependent code belongs outside the compiled function)");
    if (v.broken_rank < 0 || tracer.broken()) return false;
    rank_break_ = "rank " + std::to_string(v.broken_rank);
    return true;
  }
  std::string rank_break_;

  void trace(Entry& e, std::span<const Tensor> tensors, const PlainKey& plain, bool grad_mode,
             EagerFn eager, void* ctx, std::vector<Tensor>& outputs) {
    // Before the first traced call runs eagerly: its GEMMs then already reuse the cuBLASLt
    // algorithms an earlier process stored in the disk cache (once per process; cheap after).
    install_kernel_stores();
    outputs.clear();
    if (e.prev && e.epoch != config_epoch()) {  // traced under other settings: start over
      e.prev.reset();
      e.traces = 0;
    }
    e.epoch = config_epoch();
    auto tracer = std::make_unique<Tracer>(options.fullgraph);
    for (size_t i = 0; i < tensors.size(); ++i)
      tracer->add_input(tensors[i], static_cast<int32_t>(i));
    // A parameter cast cached before the trace would enter it as a constant: every cast of the
    // traced step must be made (and recorded) inside it.
    autocast_detail::clear_cache();
    ++stats.traces;
    const auto start = std::chrono::steady_clock::now();
    eager(ctx, outputs);
    tracer->finish(outputs);
    if (log_enabled(Log::perf)) {
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      log(Log::perf, options.name + ": traced call " + std::to_string(stats.traces) + " took " +
                         std::to_string(ms) + " ms");
    }
    if (tracer->collective_group() >= 0 &&
        agree_across_ranks(*tracer,
                           tracer->broken() ? std::string() : fingerprint(tracer->graph(), true))) {
      to_eager(e, "another rank's trace of this call broke (" + rank_break_ +
                      "); every rank runs it eagerly, so their collectives stay matched");
      return;
    }
    if (tracer->broken()) {
      to_eager(e, tracer->break_info().str());
      return;
    }
    Graph g = std::move(tracer->graph());
    const bool ran_backward = tracer->ran_backward();
    tracer.reset();  // uninstall the hooks before anything else runs ops
    // Replays return plain tensors: an output still needing autograd after the call cannot be
    // served from an executable (after a backward, the graph behind it is spent anyway).
    if (!ran_backward)
      for (size_t i = 0; i < outputs.size(); ++i)
        if (outputs[i].requires_grad()) {
          const std::string why = "return: output " + std::to_string(i) +
                                  " requires grad but the function ran no backward; compile the "
                                  "whole step, or return a detached tensor";
          if (options.fullgraph) throw GraphBreakError(why);
          to_eager(e, why);
          return;
        }
    std::string fp = fingerprint(g);
    if (e.sig.symbolic && e.prev && !e.tmpl && fp != e.prev_fp && sizes_differ(*e.prev, g)) {
      std::string why;
      std::optional<SymbolicTemplate> t = generalize(*e.prev, g, e.sig.sym, &why);
      if (t) {
        e.tmpl = std::make_unique<SymbolicTemplate>(std::move(*t));
        e.grads = grad_guards(e.tmpl->graph);
        e.prev.reset();
        ++stats.executables;
        log(Log::recompiles, options.name + ": dynamic: one executable for " + e.tmpl->describe());
        return;
      }
      log(Log::recompiles, options.name + ": dynamic: cannot generalize yet (" + why + ")");
    }
    if (e.prev && fp == e.prev_fp) {
      if (e.sig.symbolic) {
        // Agreed at one size: a specialized executor for it, which serves this size from the
        // next call on; the symbolic entry keeps the trace to generalize from when another
        // size arrives.
        Entry* x = make_entry(tensors, plain, grad_mode);
        x->prev = std::make_unique<Graph>(g);
        build(*x, std::move(g));
        last = x;
        return;
      }
      build(e, std::move(g));
      return;
    }
    if (e.prev) {
      const std::string diff = first_difference(*e.prev, g);
      if (diff.rfind("host constant", 0) == 0) {
        if (options.fullgraph) throw GraphBreakError(diff);
        to_eager(e, diff);
        return;
      }
      log(Log::recompiles, options.name + ": trace " + std::to_string(e.traces + 1) +
                               " differs from the previous one (" + diff + "); tracing again");
    }
    if (++e.traces >= kMaxTracesPerSignature) {
      const std::string why =
          "the trace changed on each of " + std::to_string(e.traces) + " calls (last: " +
          (e.prev ? first_difference(*e.prev, g) : std::string("no earlier trace to compare")) +
          ")";
      if (options.fullgraph) throw GraphBreakError(why);
      to_eager(e, why);
      return;
    }
    e.prev = std::make_unique<Graph>(std::move(g));
    e.prev_fp = std::move(fp);
    // While it traces, the entry serves only calls whose gradients are set as in its last trace
    // (another setting, a gradient-accumulation loop's first micro-batch say, traces apart).
    e.grads = grad_guards(*e.prev);
  }
};

CompiledCore::CompiledCore(Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}
CompiledCore::~CompiledCore() = default;
const CompileStats& CompiledCore::stats() const { return impl_->stats; }
const Options& CompiledCore::options() const { return impl_->options; }
std::string CompiledCore::last_graph() const { return impl_->last_graph; }
void CompiledCore::reset() {
  impl_->entries.clear();
  impl_->last = nullptr;
  impl_->over_limit = false;
}

void CompiledCore::call(std::span<const Tensor> tensors, const PlainKey& plain, EagerFn eager,
                        void* ctx, std::vector<Tensor>& outputs) {
  Impl& m = *impl_;
  // The gradients bound for this call are let go when it returns, however it returns.
  struct ReleaseArgs {
    std::vector<Tensor>& args;
    ~ReleaseArgs() { args.clear(); }
  } release{m.call_args};
  const bool grad_mode = GradMode::is_enabled();
  Entry* e = m.lookup(tensors, plain, grad_mode);
  if (e && e->tmpl) {
    const auto r = m.run_template(*e, tensors, outputs);
    if (r == Impl::TemplateRun::Served) return;
    if (r == Impl::TemplateRun::Disagree) e = nullptr;  // a signature of its own
  }
  if (e && e->state == Entry::State::Compiled) {
    std::string stale = e->exec->stale_reason();
    if (stale.empty() && e->epoch != config_epoch())
      stale =
          "host configuration changed since the trace (a module's train()/eval(), or an "
          "optimizer's parameters or structural options)";
    if (stale.empty()) {
      m.last = e;
      const int32_t captures = e->exec->stats().graph_captures;
      e->exec->run(m.bind_args(*e, tensors), outputs);
      ++m.stats.replays;
      if (e->exec->stats().graph_nodes > 0) ++m.stats.graph_replays;
      m.stats.graph_captures += e->exec->stats().graph_captures - captures;
      return;
    }
    log(Log::recompiles, m.options.name + ": recompiling: " + stale);
    ++m.stats.recompiles;
    e->exec.reset();
    e->grads.clear();
    e->state = Entry::State::Tracing;
    e->traces = 0;
  }
  if (!e) {
    if (m.over_limit || static_cast<int>(m.entries.size()) >= m.options.recompile_limit) {
      if (!m.over_limit) {
        m.over_limit = true;
        const std::string msg = m.options.name + ": hit recompile_limit (" +
                                std::to_string(m.options.recompile_limit) +
                                " signatures); new signatures run eagerly";
        if (log_enabled(Log::recompiles))
          log(Log::recompiles, msg);
        else
          std::fprintf(stderr, "[ember] %s\n", msg.c_str());
      }
      m.run_eager(eager, ctx, outputs);
      return;
    }
    std::string reason;
    if (m.last) {
      ++m.stats.recompiles;
      reason = m.why_missed(tensors, plain, grad_mode);
    }
    e = m.make_entry(tensors, plain, grad_mode);
    if (log_enabled(Log::cache)) {
      std::ostringstream os;
      os << m.options.name << ": miss; new signature (";
      for (size_t i = 0; i < tensors.size(); ++i)
        os << (i ? ", " : "") << dtype_name(tensors[i].dtype()) << tensors[i].sizes() << "@"
           << tensors[i].device().str();
      os << ")";
      log(Log::cache, os.str());
    }
    const bool dyn_all = m.options.dynamic.value_or(false);
    const bool dyn_auto = !m.options.dynamic.has_value();
    if (dyn_all || dyn_auto) m.mark_symbolic(*e, dyn_all);
    if (!reason.empty()) {
      if (e->sig.symbolic && !dyn_all) reason += "; marking the changed dims dynamic";
      log(Log::recompiles, m.options.name + ": recompiling: " + reason);
    }
  }
  m.last = e;
  if (e->state == Entry::State::Eager) {
    m.run_eager(eager, ctx, outputs);
    return;
  }
  m.trace(*e, tensors, plain, grad_mode, eager, ctx, outputs);
}

}  // namespace detail
}  // namespace ember::jit
