#pragma once
// Datasets, as torch.utils.data has them: a Dataset is indexable samples, each a list of tensors
// (features, label, ...); TensorDataset wraps tensors that share their first dimension; Subset
// is a view through a list of indices; random_split cuts a dataset into disjoint subsets in a
// random order drawn from a generator (the default one unless given), so manual_seed makes it
// reproducible. DataLoader (data/dataloader.h) batches them.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace ember::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Sample i: one tensor per field, without the batch dimension.
  virtual std::vector<Tensor> get(int64_t i) const = 0;
  // Samples `indices` stacked along a new first dimension, one tensor per field. The default
  // stacks get(i); TensorDataset gathers each field with one index_select.
  virtual std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const;
};

class TensorDataset final : public Dataset {
 public:
  // Every tensor's first dimension is the sample index; they must agree (an ember::Error
  // naming the sizes otherwise) and live on one device.
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  std::vector<Tensor> get(int64_t i) const override;
  std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

class Subset final : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  std::vector<Tensor> get(int64_t i) const override;
  std::vector<Tensor> get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

// A permutation of 0..n-1 drawn from `gen` (the default generator if null): n uniform draws,
// ranked. Not torch.randperm's sequence, but reproducible from manual_seed likewise.
std::vector<int64_t> randperm(int64_t n, Generator* gen = nullptr);

// Disjoint subsets of the given sizes (summing to the dataset's size), or of the given
// fractions (summing to 1; the remainder goes to the first subsets one each, as PyTorch does).
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<int64_t>& lengths,
                                                  Generator* gen = nullptr);
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> dataset,
                                                  const std::vector<double>& fractions,
                                                  Generator* gen = nullptr);

}  // namespace ember::data
