#pragma once
/// \file
/// nn::Embedding: a lookup table [num_embeddings, embedding_dim] indexed by integer tensors
/// (like torch.nn.Embedding).
/// Initialized N(0, 1) like PyTorch. Its gradient accumulates into the rows that were read,
/// except the padding_idx row (zero at init), which never gets one.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// A lookup table of `num_embeddings` vectors of `embedding_dim` values, like
/// torch.nn.Embedding.
/// Parameter "weight" [num_embeddings, embedding_dim] (float32 on the CPU until moved),
/// ~ N(0, 1) with the padding_idx row zero. The gradient is dense (no sparse option) and
/// accumulates into the rows read, except the padding row. The same in training and eval.
class EmbeddingImpl : public Module {
 public:
  /// \throws ember::Error if a size is negative or padding_idx is outside
  /// [-num_embeddings, num_embeddings).
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  /// `Embedding(10000, 256)`: no padding row.
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  /// indices (int64/int32, any shape, on the weight's device) -> [*indices.shape,
  /// embedding_dim]. \throws ember::Error if indices are not integers, lie on another device
  /// or are out of range.
  Tensor forward(const Tensor& indices);
  /// Redraws weight ~ N(0, 1) from the default Philox generator, then zeroes the padding row.
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  /// The options the layer was built with.
  EmbeddingOptions options;
  Tensor weight;  ///< [num_embeddings, embedding_dim].

 private:
  int64_t padding_row_ = -1;  // padding_idx made non-negative; -1: none
};
/// The module holder of EmbeddingImpl: `nn::Embedding tok(vocab, dim); Tensor e = tok(ids);`.
EMBER_MODULE(Embedding);

}  // namespace ember::nn
