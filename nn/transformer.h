#pragma once
// TransformerEncoderLayer as torch.nn's: self-attention and a feed-forward block, each with a
// residual connection and LayerNorm, after the block (post-norm, the default) or before it
// (norm_first). PyTorch's submodule names (self_attn, linear1, linear2, norm1, norm2), so
// weights load from PyTorch through safetensors.
#include <ostream>

#include "nn/attention.h"
#include "nn/holder.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

class TransformerEncoderLayerImpl : public Module {
 public:
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  // src [S, N, E] ([N, S, E] with batch_first); src_mask and src_key_padding_mask as
  // MultiheadAttention's attn_mask and key_padding_mask; is_causal masks later positions.
  Tensor forward(const Tensor& src, const Tensor& src_mask = {},
                 const Tensor& src_key_padding_mask = {}, bool is_causal = false);
  void pretty_print(std::ostream& os) const override;

  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn{nullptr};
  Linear linear1{nullptr}, linear2{nullptr};
  LayerNorm norm1{nullptr}, norm2{nullptr};
};
EMBER_MODULE(TransformerEncoderLayer);

}  // namespace ember::nn
