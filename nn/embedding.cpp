#include "nn/embedding.h"

#include "core/factory.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace ember::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& opts) : options(opts) {
  EMBER_CHECK(options.num_embeddings() >= 0 && options.embedding_dim() >= 0,
              "Embedding: num_embeddings and embedding_dim must be non-negative, got ",
              options.num_embeddings(), " and ", options.embedding_dim());
  weight = register_parameter("weight", empty({options.num_embeddings(), options.embedding_dim()}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() { init::normal_(weight); }

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return detail::embedding(indices, weight, "Embedding");
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(" << options.num_embeddings() << ", " << options.embedding_dim() << ")";
}

}  // namespace ember::nn
