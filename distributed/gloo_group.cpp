// The Gloo backend: CPU tensors over TCP. Every collective first exchanges a small header (which
// collective, dtype, element count, root) so that ranks calling mismatched collectives get an
// error naming both sides, instead of Gloo reading one tensor's bytes into another's or waiting
// out its timeout.
#include "distributed/backends.h"

#include "core/error.h"

#if EMBER_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <sstream>
#include <thread>

#include "core/half.h"
#endif

namespace ember::distributed {

#if EMBER_HAVE_GLOO
namespace {

// Gloo meets its peers through its own store interface: ours behind it.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(distributed::Store& s) : s_(s) {}
  void set(const std::string& key, const std::vector<char>& data) override { s_.set(key, data); }
  std::vector<char> get(const std::string& key) override { return s_.get(key); }
  void wait(const std::vector<std::string>& keys) override { s_.wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    s_.wait(keys);
  }

 private:
  distributed::Store& s_;
};

template <typename T>
void combine(void* c, const void* a, const void* b, size_t n, ReduceOp op) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  // Half types add in float and round once per pair, as NCCL's reductions of them do.
  using Acc = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
  if (op == ReduceOp::Max) {
    for (size_t i = 0; i < n; ++i) out[i] = T(std::max(Acc(x[i]), Acc(y[i])));
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = T(Acc(x[i]) + Acc(y[i]));
  }
}

template <ReduceOp Op, typename T>
void combine_as(void* c, const void* a, const void* b, size_t n) {
  combine<T>(c, a, b, n, Op);
}

template <typename T>
void run_allreduce(const std::shared_ptr<gloo::Context>& ctx, void* data, size_t n, ReduceOp op,
                   uint32_t tag) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(static_cast<T*>(data), n);
  if (op == ReduceOp::Max)
    o.setReduceFunction(&combine_as<ReduceOp::Max, T>);
  else
    o.setReduceFunction(&combine_as<ReduceOp::Sum, T>);
  o.setTag(tag);
  gloo::allreduce(o);
}

// Avg divides the sum by the world size, on every rank alike.
template <typename T>
void divide(void* data, size_t n, int size) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<float>(p[i]) / static_cast<float>(size));
}
template <>
void divide<double>(void* data, size_t n, int size) {
  double* p = static_cast<double*>(data);
  for (size_t i = 0; i < n; ++i) p[i] /= size;
}

char* bytes_of(const Tensor& t) {
  return static_cast<char*>(t.impl()->storage->data) + t.storage_offset() * element_size(t.dtype());
}

enum class Collective : int64_t { AllReduce = 1, Broadcast, AllGather, Barrier, Words };

const char* name_of(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::AllGather:
      return "all_gather";
    case Collective::Barrier:
      return "barrier";
    case Collective::Words:
      return "jit::compile's trace check";
  }
  return "?";
}

// Runs the group's collectives in call order: the asynchronous ones on its own thread (the
// caller computes meanwhile), a blocking one on the caller's thread when nothing is queued
// (no hand-off on the common path), else after the queued ones.
class CommThread {
 public:
  CommThread() : thread_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();  // runs what is queued first
  }

  std::shared_future<void> post(std::function<void()> f) {
    std::packaged_task<void()> task(std::move(f));
    std::shared_future<void> done = task.get_future().share();
    {
      std::lock_guard lock(mu_);
      ++pending_;
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return done;
  }

  template <typename F>
  void run(F&& f) {
    {
      std::unique_lock lock(mu_);
      if (pending_ == 0) {
        f();  // holding mu_: nothing can be queued ahead of it meanwhile
        return;
      }
    }
    post(std::forward<F>(f)).get();
  }

 private:
  void loop() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // an exception lands in the task's future
      std::lock_guard lock(mu_);
      --pending_;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  int pending_ = 0;  // queued or running
  bool stop_ = false;
  std::thread thread_;
};

struct GlooWork final : Work {
  GlooWork(std::shared_future<void> d, Tensor t) : done(std::move(d)), tensor(std::move(t)) {}
  void wait() override { done.get(); }
  std::shared_future<void> done;
  Tensor tensor;  // alive until the reduction is
};

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(std::shared_ptr<Store> store, int rank, int size, const std::string& master_addr,
            std::chrono::milliseconds timeout)
      : ProcessGroup(Backend::Gloo, rank, size, timeout), store_(std::move(store)) {
    try {
      gloo::transport::tcp::attr attr;
      // Peers reach each other where they reach the store: loopback for a one-machine job.
      const bool loopback =
          master_addr == "127.0.0.1" || master_addr == "localhost" || master_addr == "::1";
      const char* host = std::getenv("EMBER_GLOO_HOSTNAME");
      attr.hostname = host && *host ? host : (loopback ? "127.0.0.1" : "");
      if (attr.hostname.empty()) {
        char name[256] = {0};
        ::gethostname(name, sizeof name - 1);
        attr.hostname = name;
      }
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
      ctx->setTimeout(timeout);
      StoreAdapter adapter(*store_);
      gloo::rendezvous::PrefixStore prefixed("gloo", adapter);
      ctx->connectFullMesh(prefixed, device);
      ctx_ = std::move(ctx);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      EMBER_FAIL("init_process_group: gloo rank ", rank, " of ", size,
                 " could not connect to its peers: ", e.what());
    }
  }

  Device device() const override { return Device::cpu(); }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    comm_.run([&] { reduce_now(t, op); });
  }

  std::shared_ptr<Work> start_all_reduce(const Tensor& t, ReduceOp op) override {
    return std::make_shared<GlooWork>(comm_.post([this, t, op] { reduce_now(t, op); }), t);
  }

  void broadcast(const Tensor& t, int src) override {
    comm_.run([&] { broadcast_now(t, src); });
  }
  void all_gather(const Tensor& out, const Tensor& in) override {
    comm_.run([&] { all_gather_now(out, in); });
  }
  void barrier() override {
    comm_.run([&] { barrier_now(); });
  }
  std::vector<uint64_t> all_gather_words(const std::vector<uint64_t>& mine) override {
    std::vector<uint64_t> all;
    comm_.run([&] { all = all_gather_words_now(mine); });
    return all;
  }

 private:
  void reduce_now(const Tensor& t, ReduceOp op) {
    check_usable("all_reduce");
    const size_t n = static_cast<size_t>(t.numel());
    match(Collective::AllReduce, t.dtype(), n, static_cast<int64_t>(op));
    if (n == 0) return;
    void* p = bytes_of(t);
    guarded("all_reduce", [&] {
      switch (t.dtype()) {
        case kFloat32:
          run_allreduce<float>(ctx_, p, n, op, next_tag());
          if (op == ReduceOp::Avg) divide<float>(p, n, size());
          break;
        case kFloat64:
          run_allreduce<double>(ctx_, p, n, op, next_tag());
          if (op == ReduceOp::Avg) divide<double>(p, n, size());
          break;
        case kFloat16:
          run_allreduce<Half>(ctx_, p, n, op, next_tag());
          if (op == ReduceOp::Avg) divide<Half>(p, n, size());
          break;
        case kBFloat16:
          run_allreduce<BFloat16>(ctx_, p, n, op, next_tag());
          if (op == ReduceOp::Avg) divide<BFloat16>(p, n, size());
          break;
        case kInt32:
          run_allreduce<int32_t>(ctx_, p, n, op, next_tag());
          break;
        case kInt64:
          run_allreduce<int64_t>(ctx_, p, n, op, next_tag());
          break;
        case kBool:
          EMBER_FAIL("distributed::all_reduce: bool tensors are not reduced");
      }
    });
  }

  void broadcast_now(const Tensor& t, int src) {
    check_usable("broadcast");
    check_cpu_contiguous("broadcast", t);
    const size_t nbytes = static_cast<size_t>(t.numel() * element_size(t.dtype()));
    match(Collective::Broadcast, t.dtype(), static_cast<size_t>(t.numel()), src);
    if (nbytes == 0) return;
    guarded("broadcast", [&] {
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(reinterpret_cast<uint8_t*>(bytes_of(t)), nbytes);
      o.setRoot(src);
      o.setTag(next_tag());
      gloo::broadcast(o);
    });
    bump_version(t);
  }

  void all_gather_now(const Tensor& out, const Tensor& in) {
    check_usable("all_gather");
    check_cpu_contiguous("all_gather", out);
    EMBER_CHECK(
        in.device().is_cpu() && in.dtype() == out.dtype() && out.numel() == in.numel() * size(),
        "distributed::all_gather: output of shape ", out.sizes(), " (", out.dtype(), ", ",
        out.device().str(), ") must hold ", size(), " copies of the input's ", in.numel(),
        " elements (", in.dtype(), ", ", in.device().str(), ")");
    const Tensor src = in.contiguous();
    const size_t nbytes = static_cast<size_t>(src.numel() * element_size(src.dtype()));
    match(Collective::AllGather, in.dtype(), static_cast<size_t>(in.numel()), 0);
    if (nbytes == 0) return;
    guarded("all_gather", [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(reinterpret_cast<uint8_t*>(bytes_of(src)), nbytes);
      o.setOutput(reinterpret_cast<uint8_t*>(bytes_of(out)), nbytes * size());
      o.setTag(next_tag());
      gloo::allgather(o);
    });
    bump_version(out);
  }

  void barrier_now() {
    check_usable("barrier");
    match(Collective::Barrier, kInt64, 0, 0);
    guarded("barrier", [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTag(next_tag());
      gloo::barrier(o);
    });
  }

  std::vector<uint64_t> all_gather_words_now(const std::vector<uint64_t>& mine) {
    check_usable("all_gather_words");
    match(Collective::Words, kInt64, mine.size(), 0);
    std::vector<uint64_t> all(mine.size() * size());
    guarded(name_of(Collective::Words), [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(const_cast<uint64_t*>(mine.data()), mine.size());
      o.setOutput(all.data(), all.size());
      o.setTag(next_tag());
      gloo::allgather(o);
    });
    return all;
  }

  uint32_t next_tag() { return tag_++; }

  static void check_cpu_contiguous(const char* op, const Tensor& t) {
    EMBER_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(), "distributed::", op,
                ": gloo needs a contiguous CPU tensor, got ",
                t.defined() ? t.device().str() : std::string("an undefined tensor"),
                t.defined() && !t.is_contiguous() ? " (not contiguous)" : "");
  }

  // Gloo's failures (a closed connection, a timeout) come as its own exceptions.
  template <typename F>
  void guarded(const char* op, F&& f) {
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::string why = e.what();
      if (why.find("Timed out") != std::string::npos || why.find("timed out") != std::string::npos)
        why = "no answer from a peer within " + std::to_string(timeout().count()) + " ms (" + why +
              ")";
      else
        why = "a peer is gone (" + why + ")";
      fail(op, why);
    }
  }

  // The header exchange: every rank learns what every other rank is about to do.
  void match(Collective what, DType dtype, size_t numel, int64_t extra) {
    const int64_t mine[4] = {static_cast<int64_t>(what), static_cast<int64_t>(dtype),
                             static_cast<int64_t>(numel), extra};
    std::vector<int64_t> all(4 * static_cast<size_t>(size()));
    guarded(name_of(what), [&] {
      gloo::AllgatherOptions o(ctx_);
      o.setInput(const_cast<int64_t*>(mine), 4);
      o.setOutput(all.data(), all.size());
      o.setTag(next_tag());
      gloo::allgather(o);
    });
    for (int r = 0; r < size(); ++r) {
      const int64_t* h = &all[4 * static_cast<size_t>(r)];
      if (std::equal(h, h + 4, all.data())) continue;
      std::ostringstream why;
      why << "the ranks called mismatched collectives: rank 0 " << describe_header(all.data())
          << ", rank " << r << " " << describe_header(h);
      fail(name_of(what), why.str());
    }
  }

  static std::string describe_header(const int64_t* h) {
    const auto c = static_cast<Collective>(h[0]);
    std::ostringstream s;
    s << "called " << name_of(c);
    if (c == Collective::AllReduce || c == Collective::Broadcast || c == Collective::AllGather)
      s << " on " << h[2] << " " << dtype_name(static_cast<DType>(h[1])) << " elements";
    if (c == Collective::AllReduce)
      s << " (" << (h[3] == 0 ? "sum" : h[3] == 1 ? "avg" : "max") << ")";
    if (c == Collective::Broadcast) s << " from rank " << h[3];
    return s.str();
  }

  // A write outside dispatch: autograd's saved-tensor check must see it.
  static void bump_version(const Tensor& t) { ++t.impl()->storage->version; }

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::Context> ctx_;
  uint32_t tag_ = 0;
  CommThread comm_;  // declared last: joined before the context goes
};

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& master_addr,
                                              std::chrono::milliseconds timeout) {
  return std::make_shared<GlooGroup>(std::move(store), rank, size, master_addr, timeout);
}

#else

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store>, int, int, const std::string&,
                                              std::chrono::milliseconds) {
  EMBER_FAIL("init_process_group: this build of Ember has no gloo backend");
}

#endif

}  // namespace ember::distributed
