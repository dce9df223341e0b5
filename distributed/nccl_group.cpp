// The NCCL backend: CUDA tensors, one GPU per rank (LOCAL_RANK's). Collectives run on the
// group's own stream, forked from and joined back to Ember's stream of the device with events:
// the fork/join shape a CUDA graph captures, so a compiled step's all-reduces replay inside its
// graph. The communicator is non-blocking, so a peer that never arrives is a timeout here, not
// a hang inside NCCL; and a watchdog thread aborts the communicator when an issued collective
// has not finished within the timeout (a peer died or stopped calling collectives), which ends
// the NCCL kernels that would otherwise wait for it forever and fails the group.
#include "distributed/backends.h"

#include "core/error.h"

#if EMBER_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include "core/cuda_runtime.h"
#include "kernels/cuda/runtime.h"
#endif

namespace ember::distributed {

#if EMBER_HAVE_NCCL
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case kFloat32:
      return ncclFloat32;
    case kFloat64:
      return ncclFloat64;
    case kFloat16:
      return ncclFloat16;
    case kBFloat16:
      return ncclBfloat16;
    case kInt32:
      return ncclInt32;
    case kInt64:
      return ncclInt64;
    case kBool:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

void* data_of(const Tensor& t) {
  return static_cast<char*>(t.impl()->storage->data) + t.storage_offset() * element_size(t.dtype());
}

// The event the group's stream records after a collective: waiting makes Ember's stream wait.
struct NcclWork final : Work {
  NcclWork(int d, Tensor t) : dev(d), tensor(std::move(t)) {
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  ~NcclWork() override { cudaEventDestroy(done); }  // deferred by CUDA until it has fired
  void wait() override {
    kernels::cuda::DeviceGuard guard(dev);
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(kernels::cuda::stream(dev), done, 0));
  }
  int dev;
  Tensor tensor;  // alive until the stream that reads it waited
  cudaEvent_t done = nullptr;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout)
      : ProcessGroup(Backend::Nccl, rank, size, timeout), store_(std::move(store)) {
    const int count = ember::cuda::device_count();
    EMBER_CHECK(count > 0, "init_process_group: the nccl backend needs a CUDA device; none found");
    const char* local = std::getenv("LOCAL_RANK");
    const int local_rank = local && *local ? std::atoi(local) : rank;
    EMBER_CHECK(local_rank >= 0 && local_rank < count, "init_process_group: nccl rank ", rank,
                " (LOCAL_RANK ", local_rank, ") has no GPU of its own: ", count,
                " visible; start at most that many processes per machine");
    dev_ = local_rank;
    kernels::cuda::DeviceGuard guard(dev_);
    ncclUniqueId id;
    if (rank == 0) {
      check_init(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store_->set("nccl/id", std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      const std::vector<char> bytes = store_->get("nccl/id");
      EMBER_CHECK(bytes.size() == sizeof id.internal, "init_process_group: a malformed NCCL id");
      std::memcpy(id.internal, bytes.data(), sizeof id.internal);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) check_init(r, "ncclCommInitRankConfig");
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess) break;
      if (state != ncclInProgress || Clock::now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        EMBER_FAIL("init_process_group: nccl rank ", rank, " of ", size,
                   state == ncclInProgress
                       ? " did not meet its peers within " + std::to_string(timeout.count()) + " ms"
                       : std::string(": ") + ncclGetErrorString(state));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaMalloc(&words_, sizeof(uint64_t) * 64 * static_cast<size_t>(size + 1)));
    watchdog_ = std::thread([this] { watch_loop(); });
  }

  ~NcclGroup() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    watchdog_.join();
    kernels::cuda::DeviceGuard guard(dev_);
    if (comm_) {
      cudaStreamSynchronize(comm_stream_);
      ncclCommAbort(comm_);  // finalize would wait for peers that may be gone
    }
    for (const Watched& w : watched_) cudaEventDestroy(w.done);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    cudaFree(words_);
    cudaEventDestroy(forked_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(comm_stream_);
  }

  Device device() const override { return Device::cuda(dev_); }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check_usable("all_reduce");
    if (t.numel() == 0) return;
    on_comm_stream("all_reduce", [&] {
      return ncclAllReduce(data_of(t), data_of(t), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype()), nccl_op(op), comm_, comm_stream_);
    });
  }

  // Forked like all_reduce but not joined: Ember's stream goes on with the rest of backward while
  // the group's stream reduces.
  std::shared_ptr<Work> start_all_reduce(const Tensor& t, ReduceOp op) override {
    auto work = std::make_shared<NcclWork>(dev_, t);
    if (t.numel() == 0) return work;
    kernels::cuda::DeviceGuard guard(dev_);
    std::lock_guard lock(mu_);
    check_usable("all_reduce");
    cudaStream_t s = kernels::cuda::stream(dev_);
    EMBER_CUDA_CHECK(cudaEventRecord(forked_, s));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, forked_, 0));
    issue("all_reduce", ncclAllReduce(data_of(t), data_of(t), static_cast<size_t>(t.numel()),
                                      nccl_type(t.dtype()), nccl_op(op), comm_, comm_stream_));
    EMBER_CUDA_CHECK(cudaEventRecord(work->done, comm_stream_));
    watch("all_reduce");
    return work;
  }

  void broadcast(const Tensor& t, int src) override {
    check_usable("broadcast");
    check_tensor("broadcast", t);
    if (t.numel() == 0) return;
    on_comm_stream("broadcast", [&] {
      return ncclBroadcast(data_of(t), data_of(t), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype()), src, comm_, comm_stream_);
    });
    ++t.impl()->storage->version;
  }

  void all_gather(const Tensor& out, const Tensor& in) override {
    check_usable("all_gather");
    check_tensor("all_gather", out);
    EMBER_CHECK(
        in.device() == device() && in.dtype() == out.dtype() && out.numel() == in.numel() * size(),
        "distributed::all_gather: output of shape ", out.sizes(), " (", out.dtype(), ", ",
        out.device().str(), ") must hold ", size(), " copies of the input's ", in.numel(),
        " elements (", in.dtype(), ", ", in.device().str(), ")");
    const Tensor src = in.contiguous();
    if (src.numel() == 0) return;
    on_comm_stream("all_gather", [&] {
      return ncclAllGather(data_of(src), data_of(out), static_cast<size_t>(src.numel()),
                           nccl_type(src.dtype()), comm_, comm_stream_);
    });
    ++out.impl()->storage->version;
  }

  void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    check_usable("reduce_scatter");
    check_tensor("reduce_scatter", out);
    EMBER_CHECK(
        in.device() == device() && in.dtype() == out.dtype() && in.numel() == out.numel() * size(),
        "distributed::reduce_scatter: input of shape ", in.sizes(), " (", in.dtype(), ", ",
        in.device().str(), ") must hold ", size(), " blocks of the output's shape ", out.sizes(),
        " (", out.dtype(), ", ", out.device().str(), ")");
    const Tensor src = in.contiguous();
    if (out.numel() == 0) return;
    on_comm_stream("reduce_scatter", [&] {
      return ncclReduceScatter(data_of(src), data_of(out), static_cast<size_t>(out.numel()),
                               nccl_type(src.dtype()), nccl_op(op), comm_, comm_stream_);
    });
    ++out.impl()->storage->version;
  }

  void barrier() override {
    check_usable("barrier");
    kernels::cuda::DeviceGuard guard(dev_);
    on_comm_stream("barrier", [&] {
      return ncclAllReduce(words_, words_, 1, ncclUint64, ncclSum, comm_, comm_stream_);
    });
    wait_for("barrier", comm_stream_);
  }

  std::vector<uint64_t> all_gather_words(const std::vector<uint64_t>& mine) override {
    check_usable("all_gather_words");
    EMBER_CHECK(mine.size() <= 64, "all_gather_words: at most 64 words");
    kernels::cuda::DeviceGuard guard(dev_);
    uint64_t* in = static_cast<uint64_t*>(words_);
    uint64_t* out = in + 64;
    std::vector<uint64_t> all(mine.size() * size());
    {
      std::lock_guard lock(mu_);
      check_usable("all_gather_words");
      EMBER_CUDA_CHECK(cudaMemcpyAsync(in, mine.data(), mine.size() * sizeof(uint64_t),
                                       cudaMemcpyHostToDevice, comm_stream_));
      issue("all_gather_words",
            ncclAllGather(in, out, mine.size(), ncclUint64, comm_, comm_stream_));
      EMBER_CUDA_CHECK(cudaMemcpyAsync(all.data(), out, all.size() * sizeof(uint64_t),
                                       cudaMemcpyDeviceToHost, comm_stream_));
      watch("all_gather_words");
    }
    wait_for("all_gather_words", comm_stream_);
    return all;
  }

 private:
  void check_tensor(const char* op, const Tensor& t) const {
    EMBER_CHECK(t.defined() && t.device() == device() && t.is_contiguous(), "distributed::", op,
                ": ", describe(), " needs a contiguous tensor on ", device().str(), ", got ",
                t.defined() ? t.device().str() : std::string("an undefined tensor"),
                t.defined() && !t.is_contiguous() ? " (not contiguous)" : "");
  }

  void check_init(ncclResult_t r, const char* call) const {
    EMBER_CHECK(r == ncclSuccess, "init_process_group: ", call, " failed on nccl rank ", rank(),
                ": ", ncclGetErrorString(r));
  }

  // A non-blocking communicator may answer "in progress": the call is queued once the
  // communicator says so.
  void issue(const char* op, ncclResult_t r) {
    const auto deadline = Clock::now() + timeout();
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        fail(op,
             "NCCL did not accept the call within " + std::to_string(timeout().count()) + " ms");
      }
      std::this_thread::yield();
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess) fail(op, ncclGetErrorString(r));
  }

  // Forks the group's stream from Ember's, issues `call` on it and joins back: later work on
  // Ember's stream sees the result, and work queued before it is what the collective reads.
  template <typename F>
  void on_comm_stream(const char* op, F&& call) {
    kernels::cuda::DeviceGuard guard(dev_);
    std::lock_guard lock(mu_);
    check_usable(op);  // the watchdog may have failed the group since the caller checked
    cudaStream_t s = kernels::cuda::stream(dev_);
    EMBER_CUDA_CHECK(cudaEventRecord(forked_, s));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, forked_, 0));
    issue(op, call());
    EMBER_CUDA_CHECK(cudaEventRecord(done_, comm_stream_));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(s, done_, 0));
    watch(op);
  }

  // Under mu_, after a collective was queued on the group's stream: the watchdog's mark for it.
  // A CUDA-graph capture only records (its collectives run at the graph's launches), so it is
  // left alone.
  void watch(const char* op) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(comm_stream_, &capturing);
    if (capturing != cudaStreamCaptureStatusNone) return;
    cudaEvent_t e = nullptr;
    if (!spare_events_.empty()) {
      e = spare_events_.back();
      spare_events_.pop_back();
    } else {
      EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    EMBER_CUDA_CHECK(cudaEventRecord(e, comm_stream_));
    watched_.push_back({e, Clock::now(), op});
  }

  // The watchdog: retires finished marks, and aborts the communicator when the oldest has been
  // pending past the timeout or NCCL reports an error of its own.
  void watch_loop() {
    cudaSetDevice(dev_);
    const auto tick =
        std::clamp(timeout() / 20, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
    std::unique_lock lock(mu_);
    while (!stop_) {
      wake_.wait_for(lock, tick);
      while (!watched_.empty() && cudaEventQuery(watched_.front().done) == cudaSuccess) {
        spare_events_.push_back(watched_.front().done);
        watched_.pop_front();
      }
      if (!comm_) continue;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      std::string why;
      const char* op = "watchdog";
      if (async != ncclSuccess && async != ncclInProgress) {
        why = std::string("NCCL reported: ") + ncclGetErrorString(async);
      } else if (!watched_.empty() && Clock::now() - watched_.front().issued > timeout()) {
        op = watched_.front().op;
        why = "the collective did not finish within " + std::to_string(timeout().count()) +
              " ms (a peer died or stopped calling collectives); the communicator was aborted";
      }
      if (why.empty()) continue;
      ncclCommAbort(comm_);
      comm_ = nullptr;
      mark_failed(op, why);
      std::cerr << "ember: " << describe() << ": " << op << ": " << why << std::endl;
    }
  }

  // Waits for `s` on the host; the watchdog ends the wait (failing the group) when a peer does
  // not answer within the timeout.
  void wait_for(const char* op, cudaStream_t s) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) fail(op, cudaGetErrorString(e));
      check_usable(op);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::shared_ptr<Store> store_;
  int dev_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t forked_ = nullptr;
  cudaEvent_t done_ = nullptr;
  void* words_ = nullptr;
  // The watchdog's state, and comm_ (which it may abort), under mu_.
  struct Watched {
    cudaEvent_t done;
    Clock::time_point issued;
    const char* op;
  };
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Watched> watched_;
  std::vector<cudaEvent_t> spare_events_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size,
                                              std::chrono::milliseconds timeout) {
  return std::make_shared<NcclGroup>(std::move(store), rank, size, timeout);
}

#else

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store>, int, int,
                                              std::chrono::milliseconds) {
  EMBER_FAIL("init_process_group: this build of Ember has no nccl backend");
}

#endif

}  // namespace ember::distributed
