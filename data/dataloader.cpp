#include "data/dataloader.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "autograd/grad_mode.h"
#include "core/cuda_runtime.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ember::data {

// One pass over the data: the batches' indices, and (with prefetch) the thread that gathers
// them ahead of the loop.
struct DataLoader::Epoch {
  static constexpr size_t kAhead = 2;
  // Staging buffers, used round robin: batch k in slot k % kSlots. The thread prepares batch k
  // only once k < taken + kAhead, so the batch that used the slot before has been taken and its
  // copies queued.
  static constexpr size_t kSlots = kAhead + 1;
  static constexpr size_t kAlign = 256;

  // A batch: its tensors on the host, or (staged) their shapes and where their bytes lie in the
  // slot's pinned buffer.
  struct Prepared {
    std::vector<Tensor> tensors;
    struct Piece {
      Shape shape;
      DType dtype;
      size_t offset, bytes;
    };
    std::vector<Piece> staged;
    size_t slot = 0;
  };
  struct Slot {
    void* host = nullptr;  // pinned
    size_t capacity = 0;
    std::vector<cuda::CopyEvent*> copies;  // queued reads of `host`, set by take()
  };

  std::shared_ptr<const Dataset> dataset;
  std::vector<std::vector<int64_t>> batches;
  std::optional<Device> device;
  bool prefetch = false;
  bool pin = false;
  Slot slots[kSlots];

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Prepared> ready;  // gathered, in order, not yet taken
  std::exception_ptr error;
  size_t taken = 0;
  bool stop = false;
  std::thread worker;

  ~Epoch() {
    {
      std::lock_guard<std::mutex> g(mu);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
    for (Slot& sl : slots) {
      for (cuda::CopyEvent* e : sl.copies) {
        try {
          cuda::wait_copy(e);
        } catch (...) {  // a failed device: nothing left to protect
        }
      }
      cuda::free_pinned(sl.host);
    }
  }

  // Batch k from the dataset, staged in its slot when pinning.
  Prepared prepare(size_t k) {
    NoGradGuard no_grad;
    Prepared p;
    p.tensors = dataset->get_batch(batches[k]);
    bool host = pin;
    for (const Tensor& t : p.tensors) host = host && t.device().is_cpu();
    if (!host) return p;
    p.slot = k % kSlots;
    Slot& sl = slots[p.slot];
    std::vector<cuda::CopyEvent*> earlier;
    {
      std::lock_guard<std::mutex> g(mu);
      earlier.swap(sl.copies);
    }
    for (cuda::CopyEvent* e : earlier) cuda::wait_copy(e);  // the device has read the slot
    size_t need = 0;
    for (const Tensor& t : p.tensors)
      need += (static_cast<size_t>(t.nbytes()) + kAlign - 1) / kAlign * kAlign;
    if (need > sl.capacity) {
      cuda::free_pinned(sl.host);
      sl.host = nullptr;
      sl.capacity = 0;
      sl.host = cuda::alloc_pinned(need);
      sl.capacity = need;
    }
    size_t at = 0;
    for (const Tensor& t : p.tensors) {
      const Tensor c = t.contiguous();
      const size_t n = static_cast<size_t>(c.nbytes());
      if (n) std::memcpy(static_cast<char*>(sl.host) + at, c.raw_data(), n);
      p.staged.push_back({c.sizes(), c.dtype(), at, n});
      at += (n + kAlign - 1) / kAlign * kAlign;
    }
    p.tensors.clear();
    return p;
  }

  void start() {
    if (!prefetch || batches.empty()) return;
    worker = std::thread([this] {
      for (size_t k = 0; k < batches.size(); ++k) {
        {
          std::unique_lock<std::mutex> g(mu);
          cv.wait(g, [&] { return stop || ready.size() < kAhead; });
          if (stop) return;
        }
        Prepared b;
        try {
          b = prepare(k);
        } catch (...) {
          std::lock_guard<std::mutex> g(mu);
          error = std::current_exception();
          cv.notify_all();
          return;
        }
        std::lock_guard<std::mutex> g(mu);
        ready.push_back(std::move(b));
        cv.notify_all();
      }
    });
  }

  // Batch k (the next one in order), on the requested device.
  std::vector<Tensor> take(size_t k) {
    Prepared b;
    if (!prefetch) {
      b = prepare(k);
    } else {
      std::unique_lock<std::mutex> g(mu);
      EMBER_CHECK(k == taken, "DataLoader: batches are taken in order");
      cv.wait(g, [&] { return !ready.empty() || error; });
      if (ready.empty()) std::rethrow_exception(error);
      b = std::move(ready.front());
      ready.pop_front();
      ++taken;
      cv.notify_all();
    }
    if (!b.staged.empty()) {
      std::vector<Tensor> out;
      std::vector<cuda::CopyEvent*> copies;
      const Slot& sl = slots[b.slot];
      try {
        for (const Prepared::Piece& piece : b.staged) {
          out.push_back(make_empty(piece.shape, piece.dtype, *device));
          copies.push_back(cuda::copy_pinned_to_device(
              out.back().raw_data(), static_cast<const char*>(sl.host) + piece.offset, piece.bytes,
              device->index));
        }
      } catch (...) {
        for (cuda::CopyEvent* e : copies) cuda::wait_copy(e);
        throw;
      }
      std::lock_guard<std::mutex> g(mu);
      slots[b.slot].copies = std::move(copies);
      return out;
    }
    if (device)
      for (Tensor& t : b.tensors)
        if (t.device() != *device) t = t.to(*device);
    return b.tensors;
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  EMBER_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be at least 1, got ",
              options_.batch_size);
  EMBER_CHECK(!(options_.sampler && options_.shuffle),
              "DataLoader: give either shuffle or a sampler (the sampler decides the order)");
}

int64_t DataLoader::size() const {
  const int64_t n =
      options_.sampler ? options_.sampler->length(dataset_->size()) : dataset_->size();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  auto e = std::make_shared<Epoch>();
  e->dataset = dataset_;
  e->device = options_.device;
  e->prefetch = options_.prefetch;
  e->pin = options_.pin_memory && options_.device && options_.device->is_cuda();
  std::vector<int64_t> order;
  if (options_.sampler) {
    order = options_.sampler->indices(dataset_->size());
    const int64_t size = dataset_->size();
    for (int64_t i : order)
      EMBER_CHECK(i >= 0 && i < size, "DataLoader: the sampler gave index ", i,
                  " for a dataset of ", size, " samples");
  } else if (options_.shuffle) {
    order = randperm(dataset_->size(), options_.generator);
  } else {
    order.resize(static_cast<size_t>(dataset_->size()));
    std::iota(order.begin(), order.end(), 0);
  }
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t batches = options_.drop_last ? n / options_.batch_size
                                             : (n + options_.batch_size - 1) / options_.batch_size;
  for (int64_t k = 0; k < batches; ++k) {
    const int64_t lo = k * options_.batch_size;
    const int64_t hi = std::min(n, lo + options_.batch_size);
    e->batches.emplace_back(order.begin() + lo, order.begin() + hi);
  }
  e->start();
  return Iterator(std::move(e), 0);
}

DataLoader::Iterator DataLoader::end() { return Iterator(nullptr, size()); }

DataLoader::Iterator::Iterator(std::shared_ptr<Epoch> epoch, int64_t index)
    : epoch_(std::move(epoch)), index_(index) {
  if (epoch_) load();
}

void DataLoader::Iterator::load() {
  if (index_ < static_cast<int64_t>(epoch_->batches.size()))
    batch_ = epoch_->take(static_cast<size_t>(index_));
  else
    batch_.clear();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  load();
  return *this;
}

}  // namespace ember::data
