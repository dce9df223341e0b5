#pragma once
// Embedding: a lookup table [num_embeddings, embedding_dim] indexed by integer tensors,
// initialized N(0, 1) like PyTorch. Its gradient accumulates into the rows that were read, except
// the padding_idx row (zero at init), which never gets one.
#include <ostream>

#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

class EmbeddingImpl : public Module {
 public:
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions(num_embeddings, embedding_dim)) {}
  // indices (int64/int32, any shape) -> [..., embedding_dim].
  Tensor forward(const Tensor& indices);
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  EmbeddingOptions options;
  Tensor weight;  // [num_embeddings, embedding_dim]

 private:
  int64_t padding_row_ = -1;  // padding_idx made non-negative; -1: none
};
EMBER_MODULE(Embedding);

}  // namespace ember::nn
