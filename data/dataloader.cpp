#include "data/dataloader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>

#include "autograd/grad_mode.h"
#include "core/error.h"

namespace ember::data {

// One pass over the data: the batches' indices, and (with prefetch) the thread that gathers
// them ahead of the loop.
struct DataLoader::Epoch {
  static constexpr size_t kAhead = 2;

  std::shared_ptr<const Dataset> dataset;
  std::vector<std::vector<int64_t>> batches;
  std::optional<Device> device;
  bool prefetch = false;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<Tensor>> ready;  // gathered, in order, not yet taken
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
  }

  std::vector<Tensor> gather(size_t k) const {
    NoGradGuard no_grad;
    return dataset->get_batch(batches[k]);
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
        std::vector<Tensor> b;
        try {
          b = gather(k);
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
    std::vector<Tensor> b;
    if (!prefetch) {
      b = gather(k);
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
    if (device)
      for (Tensor& t : b)
        if (t.device() != *device) t = t.to(*device);
    return b;
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  EMBER_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be at least 1, got ",
              options_.batch_size);
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  auto e = std::make_shared<Epoch>();
  e->dataset = dataset_;
  e->device = options_.device;
  e->prefetch = options_.prefetch;
  const int64_t n = dataset_->size();
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = randperm(n, options_.generator);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
  }
  const int64_t batches = size();
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
