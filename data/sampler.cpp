#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/generator.h"
#include "data/dataset.h"
#include "distributed/process_group.h"

namespace ember::data {

DistributedSampler::DistributedSampler(DistributedSamplerOptions options)
    : options_(options),
      replicas_(options.num_replicas >= 0 ? options.num_replicas : distributed::get_world_size()),
      rank_(options.rank >= 0 ? options.rank : distributed::get_rank()) {
  EMBER_CHECK(replicas_ >= 1 && rank_ >= 0 && rank_ < replicas_, "DistributedSampler: rank ", rank_,
              " is not one of ", replicas_, " replicas");
}

int64_t DistributedSampler::length(int64_t n) const {
  return options_.drop_last ? n / replicas_ : (n + replicas_ - 1) / replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t n) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    // Every rank draws the same order from its own generator: nothing to communicate.
    Generator g(options_.seed + static_cast<uint64_t>(epoch_));
    order = randperm(n, &g);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
  }
  const int64_t per_rank = length(n);
  const int64_t total = per_rank * replicas_;
  if (total > n) {
    EMBER_CHECK(n > 0, "DistributedSampler: the dataset is empty");
    for (int64_t i = n; i < total; ++i) order.push_back(order[static_cast<size_t>(i % n)]);
  }
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = rank_; i < total; i += replicas_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace ember::data
