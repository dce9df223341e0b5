#pragma once
/// \file
/// DataLoader: a dataset's samples in batches, as torch.utils.data.DataLoader gives them.
///
/// \code
/// auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
/// data::DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .device = Device::cuda(0)});
/// for (int epoch = 0; epoch < 10; ++epoch)
///   for (const std::vector<Tensor>& batch : loader) step(batch[0], batch[1]);
/// \endcode
///
/// Each pass (begin()) is one epoch: with shuffle, a new order drawn on the calling thread from
/// the generator (the default one unless given), so manual_seed fixes every epoch's order. The
/// last batch is short unless drop_last. With prefetch (the default) a background thread gathers
/// the next batches (up to two ahead) while the loop works on the current one; an error there
/// is rethrown by the loop's next step. For a CUDA `device` with pin_memory (the default), the
/// thread also stages each batch in page-locked host memory, so the loop's copy to the device is
/// queued and returns at once (the device reads the staging buffer in stream order; the thread
/// reuses a buffer only after that read is done). The copy is issued on the loop's thread, which
/// owns the device's stream and allocator (and may be capturing a CUDA graph on it).
///
/// There is one background thread at most (no num_workers), and batches are gathered under
/// NoGradGuard.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/generator.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace ember::data {

/// Options of DataLoader, an aggregate for designated initializers:
/// `{.batch_size = 64, .shuffle = true}`.
struct DataLoaderOptions {
  int64_t batch_size = 1;          ///< samples per batch (at least 1)
  bool shuffle = false;            ///< a new random order every epoch (else 0, 1, 2, ...)
  bool drop_last = false;          ///< drop the last batch when it is short
  std::optional<Device> device{};  ///< where batches go; unset: where the dataset's tensors are
  bool prefetch = true;            ///< gather the next batches on a background thread
  bool pin_memory = true;          ///< stage batches for a CUDA device in page-locked memory
  Generator* generator = nullptr;  ///< the shuffle's; null: the default generator
  /// The order of each epoch instead of 0..n-1 or a shuffle (then shuffle must be false), e.g.
  /// a DistributedSampler; batches cover sampler->length(n) samples.
  std::shared_ptr<Sampler> sampler{};
};

/// Iterates a dataset in batches, like `torch.utils.data.DataLoader` (map-style datasets,
/// default collation: each field stacked along a new first dimension).
///
/// A batch is a `std::vector<Tensor>`, one tensor per field of the dataset's samples, each
/// [batch, ...sample shape]. The loader shares the dataset and may be iterated any number of
/// times; each range-for is one epoch.
class DataLoader {
  struct Epoch;

 public:
  /// A loader over `dataset`.
  /// \throws ember::Error on a null dataset or batch_size < 1.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});

  /// Batches per epoch: ceil(size / batch_size), or floor with drop_last.
  int64_t size() const;
  /// The options the loader was built with.
  const DataLoaderOptions& options() const { return options_; }

  /// An input iterator over one epoch's batches; it holds the epoch (and its background
  /// thread) alive. Batches must be taken in order.
  class Iterator {
   public:
    /// The current batch, one tensor per field.
    const std::vector<Tensor>& operator*() const { return batch_; }
    /// The current batch, one tensor per field.
    const std::vector<Tensor>* operator->() const { return &batch_; }
    /// Moves to the next batch, waiting for it when prefetching.
    /// \throws ember::Error (or what the dataset threw) when gathering the batch failed.
    Iterator& operator++();
    /// Whether both point at the same batch index.
    bool operator==(const Iterator& o) const { return index_ == o.index_; }
    /// Whether they point at different batch indices.
    bool operator!=(const Iterator& o) const { return index_ != o.index_; }

   private:
    friend class DataLoader;
    Iterator(std::shared_ptr<Epoch> epoch, int64_t index);
    void load();
    std::shared_ptr<Epoch> epoch_;
    int64_t index_ = 0;
    std::vector<Tensor> batch_;
  };

  /// Starts an epoch (draws the order when shuffling, starts prefetching) and returns its first
  /// batch.
  Iterator begin();
  /// The end of an epoch.
  Iterator end();

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
};

}  // namespace ember::data
