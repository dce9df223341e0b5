#pragma once
/// @file
/// Process groups and the collectives across them, like `torch.distributed`: NCCL between GPUs,
/// Gloo between CPU processes. One process per rank, started by `ember-run` (torchrun's
/// environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
///
/// Every collective is issued by every rank of the group in the same order with tensors of the
/// same shape and dtype. A rank that breaks this, a peer that dies, or a wait that outlasts the
/// group's timeout is an ember::Error on the ranks that notice it (never a hang past the
/// timeout), and the group is unusable from then on: every later call raises the first error.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/collective.h"
#include "core/tensor.h"

namespace ember::distributed {

/// Which library moves the bytes.
enum class Backend {
  Gloo,  ///< CPU tensors over TCP (Debian's libgloo).
  Nccl,  ///< CUDA tensors on the ranks' GPUs (NVIDIA's NCCL).
};

/// How `init_process_group` finds the other ranks.
struct InitOptions {
  /// The library: Gloo for CPU tensors, NCCL for CUDA ones.
  Backend backend = Backend::Gloo;
  /// This process's rank, or -1 to read RANK from the environment.
  int rank = -1;
  /// The number of ranks, or -1 to read WORLD_SIZE from the environment.
  int world_size = -1;
  /// "env://" (a TCP store that rank 0 serves on MASTER_ADDR:MASTER_PORT, default
  /// 127.0.0.1:29500) or "file:///a/dir" (a directory every rank sees; a fresh one per job).
  std::string init = "env://";
  /// How long any wait may last (meeting the other ranks, a collective) before it is an error.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

/// A collective in flight (ProcessGroup::all_reduce_async): wait() returns once the result may
/// be used (for Gloo when it is in the tensor; for NCCL once work queued on the current CUDA
/// stream after the call will see it).
using Work = CollectiveWork;

/// A set of ranks that communicate. Collectives are blocking on the host for Gloo; for NCCL they
/// are queued on the current CUDA stream (later work on it sees the result).
class ProcessGroup : public Communicator {
 public:
  /// This process's rank in the group, 0..size()-1.
  int rank() const override { return rank_; }
  /// The number of ranks.
  int size() const override { return size_; }
  /// The id the op table's `all_reduce` row names this group by (the same on every rank).
  int64_t id() const { return id_; }
  /// The library the group communicates through.
  Backend backend() const { return backend_; }
  std::string describe() const override;
  /// How long a collective may wait for the other ranks (InitOptions::timeout).
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Copies rank `src`'s `t` into `t` on every rank.
  virtual void broadcast(const Tensor& t, int src) = 0;
  /// Writes every rank's `in` into `out`, rank r's at row block r: `out` holds size() * in.numel()
  /// elements of in's dtype (shape [size() * in.size(0), ...] or any shape of that many).
  virtual void all_gather(const Tensor& out, const Tensor& in) = 0;
  /// Combines every rank's `in` by `op` and keeps rank r's r-th block of the result in `out`:
  /// `in` holds size() * out.numel() elements.
  virtual void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op);
  /// Returns once every rank has called it.
  virtual void barrier() = 0;
  /// all_reduce that returns before it is done, so the caller can go on computing (DDP's buckets
  /// during backward): `t` must not be read or written until the Work's wait() returned.
  /// Collectives still run in the order they were called, the asynchronous ones included. Not
  /// traced by jit::compile (the op-table all_reduce is what a compiled step records).
  /// \throws ember::Error when `t` is not a contiguous tensor on device() or the group failed.
  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op);

 protected:
  /// For the backends: this rank of `size`, communicating through `backend`.
  ProcessGroup(Backend backend, int rank, int size, std::chrono::milliseconds timeout)
      : backend_(backend), rank_(rank), size_(size), timeout_(timeout) {}
  /// Raises the group's first error again, if it had one.
  void check_usable(const char* op) const;
  /// Records `why` as the group's error and raises it.
  [[noreturn]] void fail(const char* op, const std::string& why);
  /// Records `why` as the group's error without raising it (a backend's watchdog thread): the
  /// next call raises it.
  void mark_failed(const char* op, const std::string& why);

 private:
  friend std::shared_ptr<ProcessGroup> init_process_group(const InitOptions&);
  Backend backend_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  int64_t id_ = -1;
  mutable std::mutex error_mu_;  // a backend's communication thread may fail the group
  std::string error_;
};

/// Joins the ranks into the default group (every rank calls it; it returns once all have).
/// Raises ember::Error when the options or the environment are wrong, a backend is missing
/// from this build, a group exists already, or the others do not arrive within the timeout.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
/// Whether a default group exists.
bool is_initialized();
/// The default group; ember::Error when there is none.
ProcessGroup& default_group();
/// Leaves the default group (its id is then unusable: a compiled step naming it raises).
void destroy_process_group();
/// default_group().rank(), or 0 when there is no group (a single process is rank 0).
int get_rank();
/// default_group().size(), or 1 when there is no group.
int get_world_size();
/// Whether this build has the backend.
bool is_available(Backend backend);

/// Combines `t` across the default group (or `group`) by `op`, in place. An op of the op table:
/// inside `jit::compile` it is a node of the traced step, replayed (and captured into a CUDA
/// graph) with the rest of it.
void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
/// ProcessGroup::broadcast on the default group (or `group`).
void broadcast(const Tensor& t, int src = 0, ProcessGroup* group = nullptr);
/// ProcessGroup::all_gather on the default group (or `group`).
void all_gather(const Tensor& out, const Tensor& in, ProcessGroup* group = nullptr);
/// ProcessGroup::reduce_scatter on the default group (or `group`).
void reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum,
                    ProcessGroup* group = nullptr);
/// ProcessGroup::barrier on the default group (or `group`).
void barrier(ProcessGroup* group = nullptr);

}  // namespace ember::distributed
