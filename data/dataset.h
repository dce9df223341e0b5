#pragma once
/// \file
/// Datasets, as torch.utils.data has them.
///
/// A Dataset is indexable samples, each a list of tensors (features, label, ...); TensorDataset
/// wraps tensors that share their first dimension; Subset is a view through a list of indices;
/// random_split cuts a dataset into disjoint subsets in a random order drawn from a generator
/// (the default one unless given), so manual_seed makes it reproducible. DataLoader
/// (data/dataloader.h) batches them.
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace ember::data {

/// A map-style dataset, like `torch.utils.data.Dataset`: `size()` samples, sample i from
/// `get(i)`.
///
/// Subclass it for your own data; DataLoader calls get_batch, from its background thread when
/// prefetching, so get / get_batch must be safe to call from another thread.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// The number of samples.
  virtual int64_t size() const = 0;
  /// Sample i: one tensor per field, without the batch dimension.
  virtual std::vector<Tensor> get(int64_t i) const = 0;
  /// Samples `indices` stacked along a new first dimension, one tensor per field. The default
  /// stacks get(i); TensorDataset gathers each field with one index_select.
  /// \throws ember::Error on no indices, or samples with different field counts.
  virtual std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const;
};

/// Samples taken along the first dimension of some tensors, like
/// `torch.utils.data.TensorDataset`: sample i is `{t[i] for each tensor t}`.
class TensorDataset final : public Dataset {
 public:
  /// Every tensor's first dimension is the sample index; they must agree (an ember::Error
  /// naming the sizes otherwise) and live on one device.
  explicit TensorDataset(std::vector<Tensor> tensors);
  /// The tensors' shared first dimension.
  int64_t size() const override { return size_; }
  /// `t.select(0, i)` of each tensor (views, no copy).
  /// \throws ember::Error when i is out of range.
  std::vector<Tensor> get(int64_t i) const override;
  /// One index_select per tensor, on the tensors' device.
  /// \throws ember::Error on no indices or an index out of range.
  std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const override;
  /// The wrapped tensors.
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

/// The samples of `base` at the given indices, like `torch.utils.data.Subset`: sample i is
/// `base->get(indices[i])`. Shares `base`; copies no data.
class Subset final : public Dataset {
 public:
  /// A view of `base` through `indices` (each in [0, base->size()), repeats allowed).
  /// \throws ember::Error on a null base or an index out of range.
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  /// The number of indices.
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  /// `base->get(indices()[i])`.
  std::vector<Tensor> get(int64_t i) const override;
  /// `base->get_batch` of the mapped indices.
  std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const override;
  /// The indices into the base dataset.
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

/// A permutation of 0..n-1 drawn from `gen` (the default generator if null): n uniform draws,
/// ranked. Not torch.randperm's sequence, but reproducible from manual_seed likewise.
std::vector<int64_t> randperm(int64_t n, Generator* gen = nullptr);

/// Disjoint subsets of the given sizes, in a random order, like
/// `torch.utils.data.random_split`.
/// \param dataset the dataset to split.
/// \param lengths sizes of the subsets, non-negative, summing to the dataset's size.
/// \param gen the generator of the permutation (randperm); null: the default generator.
/// \throws ember::Error when the lengths are negative or do not sum to the dataset's size.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  Generator* gen = nullptr);
/// Disjoint subsets of the given fractions of the dataset (each in [0, 1], summing to 1):
/// floor(n * f) samples each, the remainder going to the first subsets one each, as PyTorch
/// does.
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions,
                                                  Generator* gen = nullptr);
/// Sizes written in braces, `random_split(ds, {800, 200})` (which the two vector overloads
/// alone would find ambiguous).
template <std::integral T>
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  std::initializer_list<T> lengths,
                                                  Generator* gen = nullptr) {
  return random_split(std::move(dataset), std::vector<int64_t>(lengths.begin(), lengths.end()),
                      gen);
}
/// Fractions written in braces, `random_split(ds, {0.8, 0.2})`.
template <std::floating_point T>
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  std::initializer_list<T> fractions,
                                                  Generator* gen = nullptr) {
  return random_split(std::move(dataset), std::vector<double>(fractions.begin(), fractions.end()),
                      gen);
}

}  // namespace ember::data
