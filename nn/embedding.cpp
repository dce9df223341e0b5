#include "nn/embedding.h"

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace ember::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& opts) : options(opts) {
  EMBER_CHECK(options.num_embeddings() >= 0 && options.embedding_dim() >= 0,
              "Embedding: num_embeddings and embedding_dim must be non-negative, got ",
              options.num_embeddings(), " and ", options.embedding_dim());
  if (const auto& p = options.padding_idx()) {
    const int64_t n = options.num_embeddings();
    EMBER_CHECK(*p >= -n && *p < n, "Embedding: padding_idx must be in [", -n, ", ", n,
                ") for num_embeddings = ", n, ", got ", *p);
    padding_row_ = *p < 0 ? *p + n : *p;
  }
  weight = register_parameter("weight", empty({options.num_embeddings(), options.embedding_dim()}));
  reset_parameters();
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (padding_row_ >= 0) {
    NoGradGuard no_grad;
    weight.select(0, padding_row_).fill_(0.0);
  }
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  const Tensor out = detail::embedding(indices, weight, "Embedding");
  if (padding_row_ < 0) return out;
  // The padding row's value as it is, but no gradient through it: where() takes the detached
  // lookup at the padding positions.
  const Tensor pad = full({}, Scalar(padding_row_),
                          TensorOptions(indices.dtype()).device(indices.device()));
  const Tensor at_padding = eq(indices, pad);
  return where(at_padding.unsqueeze(-1), out.detach(), out);
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(" << options.num_embeddings() << ", " << options.embedding_dim();
  if (padding_row_ >= 0) os << ", padding_idx=" << padding_row_;
  os << ")";
}

}  // namespace ember::nn
