#pragma once
/// @file
/// Data-parallel training across processes, like `torch.nn.parallel.DistributedDataParallel`.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace ember::nn::parallel {

/// Options of DistributedDataParallel: `{.bucket_cap_mb = 25}`.
struct DDPOptions {
  /// Gradients are all-reduced in buckets of about this many megabytes (one bucket never splits
  /// a parameter, so a bigger parameter has a bucket of its own).
  double bucket_cap_mb = 25.0;
  /// The group to average over; null: the default group.
  distributed::ProcessGroup* group = nullptr;
  /// Start each bucket's all-reduce while backward goes on (the default); false: reduce every
  /// bucket after backward has finished, which bench/ddp_overlap compares against.
  bool overlap_backward = true;
};

/// Keeps the replicas of `module` on every rank of a process group identical: at construction it
/// copies rank 0's parameters and buffers to every rank, and each backward afterwards leaves
/// every parameter's .grad() holding the average of the ranks' gradients, so every rank's
/// optimizer takes the same step.
///
/// The gradients are reduced in buckets in the reverse order of module.parameters() (roughly
/// the order backward produces them): each bucket is flattened and its all-reduce started as
/// soon as its last gradient has been accumulated, and runs while the rest of backward does (on
/// NCCL's stream, or Gloo's communication thread); the end of backward waits for all of them and
/// writes the averages back. Inside `jit::compile` the all-reduces are nodes of the traced step
/// like its other ops (replayed in order, each joined where it stands).
///
/// The module is used as before (`model->forward(x)`); the wrapper only has to stay alive.
/// Construct it after the module is on its device. Every rank must run the same backwards:
/// under no_sync() none of them communicates, and the next backward outside it reduces the
/// accumulated gradients.
///
/// ```
/// distributed::init_process_group({.backend = distributed::Backend::Gloo});
/// Net model;
/// nn::parallel::DistributedDataParallel ddp(model);
/// optim::SGD opt(model->parameters(), {.lr = 0.1});
/// ```
class DistributedDataParallel {
 public:
  /// Wraps `module`: broadcasts rank 0's parameters and buffers and installs the hooks.
  /// \throws ember::Error when there is no process group, a parameter is not on the group's
  ///   device, or the ranks' modules differ in their parameters' shapes or dtypes.
  explicit DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options = {});
  /// Wraps the module a holder (`Linear`, a TORCH_MODULE-style holder) holds.
  template <ModuleHolderLike H>
  explicit DistributedDataParallel(const H& holder, DDPOptions options = {})
      : DistributedDataParallel(std::shared_ptr<Module>(holder.ptr()), options) {}
  /// Removes the hooks: the module trains alone again.
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// The wrapped module.
  Module& module() const { return *module_; }
  /// Copies rank 0's buffers (BatchNorm's running statistics, say) to every rank. Buffers are
  /// not synchronized by the wrapper otherwise after construction.
  void sync_buffers();

  /// While alive, backward accumulates gradients locally without communicating (gradient
  /// accumulation: `{ auto guard = ddp.no_sync(); loss.backward(); }`).
  class NoSyncGuard {
   public:
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    DistributedDataParallel& ddp_;
    bool outer_;
  };
  /// See NoSyncGuard.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// The parameters of each bucket, by their names in module(), in the order the buckets are
  /// reduced.
  std::vector<std::vector<std::string>> buckets() const;

 private:
  struct Reducer;
  std::shared_ptr<Module> module_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace ember::nn::parallel
