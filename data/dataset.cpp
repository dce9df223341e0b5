#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"

namespace ember::data {
namespace {

void check_index(const char* who, int64_t i, int64_t size) {
  EMBER_CHECK(i >= 0 && i < size, who, ": index ", i, " out of range for ", size, " samples");
}

Tensor index_tensor(const std::vector<int64_t>& idx, Device dev) {
  return from_vector<int64_t>(idx, {static_cast<int64_t>(idx.size())}, TensorOptions(kInt64))
      .to(dev);
}

}  // namespace

std::vector<Tensor> Dataset::get_batch(const std::vector<int64_t>& indices) const {
  EMBER_CHECK(!indices.empty(), "Dataset.get_batch: no indices");
  std::vector<std::vector<Tensor>> fields;
  for (int64_t i : indices) {
    std::vector<Tensor> s = get(i);
    if (fields.empty()) fields.resize(s.size());
    EMBER_CHECK(s.size() == fields.size(), "Dataset.get_batch: sample ", i, " has ", s.size(),
                " fields, the first had ", fields.size());
    for (size_t f = 0; f < s.size(); ++f) {
      Shape one;
      one.push_back(1);
      for (int64_t d : s[f].sizes()) one.push_back(d);
      fields[f].push_back(s[f].reshape(one));
    }
  }
  std::vector<Tensor> out;
  for (auto& f : fields) out.push_back(cat(f, 0));
  return out;
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  EMBER_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    EMBER_CHECK(t.defined() && t.dim() >= 1, "TensorDataset: tensor ", i,
                " needs a first (sample) dimension");
    EMBER_CHECK(t.size(0) == tensors_[0].size(0), "TensorDataset: tensor ", i, " has ", t.size(0),
                " samples (shape ", t.sizes(), ") but tensor 0 has ", tensors_[0].size(0));
    EMBER_CHECK(t.device() == tensors_[0].device(), "TensorDataset: tensor ", i, " is on ",
                t.device().str(), " but tensor 0 on ", tensors_[0].device().str());
  }
  size_ = tensors_[0].size(0);
}

std::vector<Tensor> TensorDataset::get(int64_t i) const {
  check_index("TensorDataset", i, size_);
  std::vector<Tensor> out;
  for (const Tensor& t : tensors_) out.push_back(t.select(0, i));
  return out;
}

std::vector<Tensor> TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  EMBER_CHECK(!indices.empty(), "TensorDataset.get_batch: no indices");
  for (int64_t i : indices) check_index("TensorDataset", i, size_);
  const Tensor idx = index_tensor(indices, tensors_[0].device());
  std::vector<Tensor> out;
  for (const Tensor& t : tensors_) out.push_back(index_select(t, 0, idx));
  return out;
}

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  EMBER_CHECK(base_ != nullptr, "Subset: no dataset");
  for (int64_t i : indices_) check_index("Subset", i, base_->size());
}

std::vector<Tensor> Subset::get(int64_t i) const {
  check_index("Subset", i, size());
  return base_->get(indices_[static_cast<size_t>(i)]);
}

std::vector<Tensor> Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) {
    check_index("Subset", i, size());
    mapped.push_back(indices_[static_cast<size_t>(i)]);
  }
  return base_->get_batch(mapped);
}

std::vector<int64_t> randperm(int64_t n, Generator* gen) {
  EMBER_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  if (n < 2) return idx;
  // float64 draws: 53 random bits each, so ties (broken by index) are vanishingly rare.
  const std::vector<double> keys =
      rand({n}, TensorOptions(kFloat64), gen).to_vector<double>();
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int64_t a, int64_t b) { return keys[a] < keys[b]; });
  return idx;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  Generator* gen) {
  EMBER_CHECK(dataset != nullptr, "random_split: no dataset");
  int64_t total = 0;
  for (int64_t l : lengths) {
    EMBER_CHECK(l >= 0, "random_split: a negative length ", l);
    total += l;
  }
  EMBER_CHECK(total == dataset->size(), "random_split: the lengths sum to ", total,
              " but the dataset has ", dataset->size(), " samples");
  const std::vector<int64_t> perm = randperm(total, gen);
  std::vector<std::shared_ptr<Subset>> out;
  int64_t at = 0;
  for (int64_t l : lengths) {
    out.push_back(std::make_shared<Subset>(
        dataset, std::vector<int64_t>(perm.begin() + at, perm.begin() + at + l)));
    at += l;
  }
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions,
                                                  Generator* gen) {
  EMBER_CHECK(dataset != nullptr, "random_split: no dataset");
  double sum = 0;
  for (double f : fractions) {
    EMBER_CHECK(f >= 0 && f <= 1, "random_split: fraction ", f, " is outside [0, 1]");
    sum += f;
  }
  EMBER_CHECK(std::abs(sum - 1) < 1e-9, "random_split: the fractions sum to ", sum,
              ", expected 1");
  const int64_t n = dataset->size();
  std::vector<int64_t> lengths;
  int64_t given = 0;
  for (double f : fractions) {
    lengths.push_back(static_cast<int64_t>(std::floor(n * f)));
    given += lengths.back();
  }
  for (size_t i = 0; given < n; i = (i + 1) % lengths.size(), ++given) ++lengths[i];
  return random_split(std::move(dataset), lengths, gen);
}

}  // namespace ember::data
