// The default group, torchrun's environment, and the collectives' front doors. The backends
// live in gloo_group.cpp and nccl_group.cpp; this file needs neither library.
#include "distributed/process_group.h"

#include <cstdlib>
#include <mutex>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/trace_hooks.h"
#include "distributed/backends.h"
#include "distributed/store.h"

namespace ember::distributed {
namespace {

struct DefaultGroup {
  std::mutex mu;
  std::shared_ptr<ProcessGroup> group;
};

DefaultGroup& default_slot() {
  static DefaultGroup* g = new DefaultGroup;  // outlives static destructors
  return *g;
}

int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    EMBER_CHECK(!required, "init_process_group: ", name,
                " is not set (start the ranks with ember-run, or give rank and world_size)");
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  EMBER_CHECK(errno == 0 && end != v && *end == 0 && x >= 0 && x <= (1 << 24),
              "init_process_group: ", name, "='", v, "' is not a non-negative integer");
  return static_cast<int>(x);
}

std::string env_str(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}

const char* backend_name(Backend b) { return b == Backend::Gloo ? "gloo" : "nccl"; }

ProcessGroup* resolve(ProcessGroup* group, const char* op) {
  if (group) return group;
  std::lock_guard lock(default_slot().mu);
  EMBER_CHECK(default_slot().group != nullptr, "distributed::", op,
              ": no process group (call distributed::init_process_group first)");
  return default_slot().group.get();
}

// Collectives other than all_reduce are not ops of the table: inside jit::compile they end the
// trace (a graph break), so the call runs eagerly on every rank and nothing is replayed
// without it.
void leave_trace(const char* op) {
  if (const TraceHooks* h = trace_hooks(); h && h->on_untraceable)
    h->on_untraceable(op,
                      "is a collective outside the op table (only all_reduce is traced), so a "
                      "replay would skip it",
                      std::source_location::current());
}

}  // namespace

std::string ProcessGroup::describe() const {
  return std::string(backend_name(backend_)) + " rank " + std::to_string(rank_) + " of " +
         std::to_string(size_);
}

void ProcessGroup::check_usable(const char* op) const {
  std::lock_guard lock(error_mu_);
  EMBER_CHECK(error_.empty(), "distributed::", op, ": ", describe(),
              " is unusable after an earlier error: ", error_);
}

void ProcessGroup::fail(const char* op, const std::string& why) {
  mark_failed(op, why);
  EMBER_FAIL("distributed::", op, ": ", describe(), ": ", why);
}

void ProcessGroup::mark_failed(const char* op, const std::string& why) {
  std::lock_guard lock(error_mu_);
  if (error_.empty()) error_ = std::string(op) + ": " + why;
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& t, ReduceOp op) {
  check_usable("all_reduce");
  EMBER_CHECK(t.defined() && t.device() == device() && t.is_contiguous(),
              "distributed::all_reduce: ", describe(), " needs a contiguous tensor on ",
              device().str(), ", got ", t.defined() ? t.device().str() : std::string("none"),
              t.defined() && !t.is_contiguous() ? " (not contiguous)" : "");
  EMBER_CHECK(t.dtype() != kBool && (op != ReduceOp::Avg || is_floating(t.dtype())),
              "distributed::all_reduce: cannot reduce a ", t.dtype(), " tensor",
              op == ReduceOp::Avg ? " by Avg" : "");
  ++t.impl()->storage->version;  // written behind dispatch's back: saved-tensor checks see it
  return start_all_reduce(t, op);
}

void ProcessGroup::reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) {
  // Reduce everything, keep this rank's block: size() times the bytes of a ring reduce-scatter,
  // for backends without one.
  check_usable("reduce_scatter");
  EMBER_CHECK(
      in.dtype() == out.dtype() && in.device() == out.device() && in.numel() == out.numel() * size_,
      "distributed::reduce_scatter: input of shape ", in.sizes(), " (", in.dtype(), ", ",
      in.device().str(), ") must hold ", size_, " blocks of the output's shape ", out.sizes(), " (",
      out.dtype(), ", ", out.device().str(), ")");
  EMBER_CHECK(out.is_contiguous(), "distributed::reduce_scatter: the output of shape ", out.sizes(),
              " must be contiguous");
  Tensor all = in.contiguous().clone();
  all_reduce(all, op);
  Tensor dst = out;
  dst.copy_(all.reshape({-1}).narrow(0, rank_ * out.numel(), out.numel()).view(out.sizes()));
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  const int rank = options.rank >= 0 ? options.rank : env_int("RANK", 0, true);
  const int size = options.world_size >= 0 ? options.world_size : env_int("WORLD_SIZE", 1, true);
  EMBER_CHECK(size >= 1 && rank < size, "init_process_group: rank ", rank,
              " is outside a world of size ", size);
  EMBER_CHECK(options.timeout.count() > 0, "init_process_group: the timeout must be positive, got ",
              options.timeout.count(), " ms");
  EMBER_CHECK(is_available(options.backend), "init_process_group: this build of Ember has no ",
              backend_name(options.backend), " backend (",
              options.backend == Backend::Nccl ? "built without CUDA or without NCCL"
                                               : "built without libgloo-dev",
              ")");
  {
    std::lock_guard lock(default_slot().mu);
    EMBER_CHECK(default_slot().group == nullptr,
                "init_process_group: a default group exists already (",
                default_slot().group->describe(), "); destroy_process_group() first");
  }
  std::shared_ptr<Store> store;
  std::string master_addr = "127.0.0.1";
  if (options.init == "env://") {
    master_addr = env_str("MASTER_ADDR", "127.0.0.1");
    const int port = env_int("MASTER_PORT", 29500, false);
    store = make_tcp_store(master_addr, port, rank == 0, options.timeout);
  } else if (options.init.rfind("file://", 0) == 0 && options.init.size() > 7) {
    store = make_file_store(options.init.substr(7), options.timeout);
  } else {
    EMBER_FAIL("init_process_group: init must be \"env://\" or \"file:///a/dir\", got \"",
               options.init, "\"");
  }
  std::shared_ptr<ProcessGroup> group =
      options.backend == Backend::Gloo
          ? make_gloo_group(std::move(store), rank, size, master_addr, options.timeout)
          : make_nccl_group(std::move(store), rank, size, options.timeout);
  group->id_ = register_communicator(group);
  std::lock_guard lock(default_slot().mu);
  default_slot().group = group;
  return group;
}

bool is_initialized() {
  std::lock_guard lock(default_slot().mu);
  return default_slot().group != nullptr;
}

ProcessGroup& default_group() { return *resolve(nullptr, "default_group"); }

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> g;
  {
    std::lock_guard lock(default_slot().mu);
    g = std::move(default_slot().group);
  }
  if (g) unregister_communicator(g->id());
}

int get_rank() {
  std::lock_guard lock(default_slot().mu);
  return default_slot().group ? default_slot().group->rank() : 0;
}

int get_world_size() {
  std::lock_guard lock(default_slot().mu);
  return default_slot().group ? default_slot().group->size() : 1;
}

bool is_available(Backend backend) {
#if EMBER_HAVE_GLOO
  if (backend == Backend::Gloo) return true;
#endif
#if EMBER_HAVE_NCCL
  if (backend == Backend::Nccl) return true;
#endif
  return false;
}

void all_reduce(const Tensor& t, ReduceOp op, ProcessGroup* group) {
  ProcessGroup* g = resolve(group, "all_reduce");
  Attrs a;
  a.group = g->id();
  a.reduce_op = op;
  dispatch(OpId::all_reduce, {t}, a, &t);
}

void broadcast(const Tensor& t, int src, ProcessGroup* group) {
  ProcessGroup* g = resolve(group, "broadcast");
  leave_trace("broadcast");
  EMBER_CHECK(src >= 0 && src < g->size(), "distributed::broadcast: src ", src,
              " is not a rank of ", g->describe());
  g->broadcast(t, src);
}

void all_gather(const Tensor& out, const Tensor& in, ProcessGroup* group) {
  ProcessGroup* g = resolve(group, "all_gather");
  leave_trace("all_gather");
  g->all_gather(out, in);
}

void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op, ProcessGroup* group) {
  ProcessGroup* g = resolve(group, "reduce_scatter");
  leave_trace("reduce_scatter");
  g->reduce_scatter(out, in, op);
}

void barrier(ProcessGroup* group) {
  ProcessGroup* g = resolve(group, "barrier");
  if (const TraceHooks* h = trace_hooks(); h && h->on_untraceable)
    h->on_untraceable("barrier", "waits for the other ranks, which a replay would not do",
                      std::source_location::current());
  g->barrier();
}

}  // namespace ember::distributed
