#pragma once
// DataLoader: a dataset's samples in batches, as torch.utils.data.DataLoader gives them.
//
//   auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
//   data::DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .device = Device::cuda(0)});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (const std::vector<Tensor>& batch : loader) step(batch[0], batch[1]);
//
// Each pass (begin()) is one epoch: with shuffle, a new order drawn on the calling thread from
// the generator (the default one unless given), so manual_seed fixes every epoch's order. The
// last batch is short unless drop_last. With prefetch (the default) a background thread gathers
// the next batches (up to two ahead) while the loop works on the current one; an error there
// is rethrown by the loop's next step. For a CUDA `device` with pin_memory (the default), the
// thread also stages each batch in page-locked host memory, so the loop's copy to the device is
// queued and returns at once (the device reads the staging buffer in stream order; the thread
// reuses a buffer only after that read is done). The copy is issued on the loop's thread, which
// owns the device's stream and allocator (and may be capturing a CUDA graph on it).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/device.h"
#include "core/generator.h"
#include "data/dataset.h"

namespace ember::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  std::optional<Device> device{};  // where batches go; unset: where the dataset's tensors are
  bool prefetch = true;
  bool pin_memory = true;  // stage batches for a CUDA device in page-locked memory
  Generator* generator = nullptr;  // the shuffle's; null: the default generator
};

class DataLoader {
  struct Epoch;

 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});

  // Batches per epoch.
  int64_t size() const;
  const DataLoaderOptions& options() const { return options_; }

  class Iterator {
   public:
    const std::vector<Tensor>& operator*() const { return batch_; }
    const std::vector<Tensor>* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return index_ == o.index_; }
    bool operator!=(const Iterator& o) const { return index_ != o.index_; }

   private:
    friend class DataLoader;
    Iterator(std::shared_ptr<Epoch> epoch, int64_t index);
    void load();
    std::shared_ptr<Epoch> epoch_;
    int64_t index_ = 0;
    std::vector<Tensor> batch_;
  };

  Iterator begin();  // starts an epoch
  Iterator end();

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
};

}  // namespace ember::data
