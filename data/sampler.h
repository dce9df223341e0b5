#pragma once
/// @file
/// Samplers: the order a DataLoader visits a dataset in, for orders other than its own (0..n-1
/// or a shuffle). `DistributedSampler` gives each rank of a data-parallel job its own share.
#include <cstdint>
#include <vector>

namespace ember::data {

/// Chooses which samples an epoch visits, and in what order (`torch.utils.data.Sampler`).
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of one epoch over a dataset of `dataset_size` samples.
  virtual std::vector<int64_t> indices(int64_t dataset_size) const = 0;
  /// How many indices indices(dataset_size) returns.
  virtual int64_t length(int64_t dataset_size) const = 0;
};

/// Options of DistributedSampler: `{.num_replicas = 4, .rank = 1}`.
struct DistributedSamplerOptions {
  int num_replicas = -1;  ///< ranks sharing the data; -1: distributed::get_world_size()
  int rank = -1;          ///< this rank; -1: distributed::get_rank()
  bool shuffle = true;    ///< a new order per epoch, the same on every rank (seed + epoch)
  uint64_t seed = 0;      ///< must be the same on every rank
  /// Drop the tail that does not divide evenly (else repeat samples from the start, so every
  /// rank gets the same number and the ranks' collectives stay matched).
  bool drop_last = false;
};

/// Splits a dataset across the ranks of a data-parallel job, like
/// `torch.utils.data.distributed.DistributedSampler`: every rank sees ceil(n / replicas)
/// samples (floor with drop_last), rank r the positions r, r + replicas, ... of the epoch's
/// order, and together the ranks cover the dataset once. Call set_epoch before each epoch to
/// draw a new order.
///
/// ```
/// auto sampler = std::make_shared<data::DistributedSampler>();
/// data::DataLoader loader(ds, {.batch_size = 32, .sampler = sampler});
/// for (int epoch = 0; epoch < 10; ++epoch) {
///   sampler->set_epoch(epoch);
///   for (auto& batch : loader) ...
/// }
/// ```
class DistributedSampler final : public Sampler {
 public:
  /// \throws ember::Error when rank is not in [0, num_replicas).
  explicit DistributedSampler(DistributedSamplerOptions options = {});
  std::vector<int64_t> indices(int64_t dataset_size) const override;
  int64_t length(int64_t dataset_size) const override;
  /// Selects the order of the next epochs (with shuffle).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  /// The number of ranks sharing the data.
  int num_replicas() const { return replicas_; }
  /// This rank.
  int rank() const { return rank_; }

 private:
  DistributedSamplerOptions options_;
  int replicas_;
  int rank_;
  int64_t epoch_ = 0;
};

}  // namespace ember::data
