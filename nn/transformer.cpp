#include "nn/transformer.h"

#include "core/error.h"
#include "core/ops.h"
#include "nn/functional.h"

namespace ember::nn {

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& o)
    : options(o) {
  EMBER_CHECK(o.activation() == "relu" || o.activation() == "gelu",
              "TransformerEncoderLayer: activation must be \"relu\" or \"gelu\", got \"",
              o.activation(), "\"");
  EMBER_CHECK(o.dim_feedforward() > 0,
              "TransformerEncoderLayer: dim_feedforward must be "
              "positive, got ",
              o.dim_feedforward());
  EMBER_CHECK(o.dropout() >= 0 && o.dropout() < 1,
              "TransformerEncoderLayer: dropout must be in [0, 1), got ", o.dropout());
  self_attn = register_module("self_attn",
                              MultiheadAttention(MultiheadAttentionOptions(o.d_model(), o.nhead())
                                                     .dropout(o.dropout())
                                                     .batch_first(o.batch_first())));
  linear1 = register_module("linear1", Linear(o.d_model(), o.dim_feedforward()));
  linear2 = register_module("linear2", Linear(o.dim_feedforward(), o.d_model()));
  norm1 =
      register_module("norm1", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps())));
  norm2 =
      register_module("norm2", LayerNorm(LayerNormOptions({o.d_model()}).eps(o.layer_norm_eps())));
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask, bool is_causal) {
  const double p = is_training() ? options.dropout() : 0.0;
  auto drop = [&](const Tensor& t) { return p > 0 ? functional::dropout(t, p, true) : t; };
  auto attention = [&](const Tensor& x) {
    return drop(std::get<0>(
        self_attn->forward(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal)));
  };
  auto feed_forward = [&](const Tensor& x) {
    const Tensor h = linear1->forward(x);
    return drop(linear2->forward(
        drop(options.activation() == "gelu" ? functional::gelu(h) : functional::relu(h))));
  };
  Tensor x = src;
  if (options.norm_first()) {
    x = x + attention(norm1->forward(x));
    x = x + feed_forward(norm2->forward(x));
  } else {
    x = norm1->forward(x + attention(x));
    x = norm2->forward(x + feed_forward(x));
  }
  return x;
}

void TransformerEncoderLayerImpl::pretty_print(std::ostream& os) const {
  os << "TransformerEncoderLayer(d_model=" << options.d_model() << ", nhead=" << options.nhead()
     << ", dim_feedforward=" << options.dim_feedforward() << ", dropout=" << options.dropout()
     << ", activation=" << options.activation();
  if (options.batch_first()) os << ", batch_first=true";
  if (options.norm_first()) os << ", norm_first=true";
  os << ")";
}

}  // namespace ember::nn
