#pragma once
/// \file
/// TransformerEncoderLayer as torch.nn's: self-attention and a feed-forward block, each with a
/// residual connection and LayerNorm.
///
/// The LayerNorm comes after the residual addition (post-norm, the default) or before the block
/// (norm_first). PyTorch's submodule names (self_attn, linear1, linear2, norm1, norm2), so
/// weights load from PyTorch through safetensors.
#include <ostream>

#include "nn/attention.h"
#include "nn/holder.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

/// One encoder layer, like torch.nn.TransformerEncoderLayer.
///
/// Post-norm: `x = norm1(x + sa(x)); x = norm2(x + ff(x))`; with norm_first:
/// `x = x + sa(norm1(x)); x = x + ff(norm2(x))`, where sa is self-attention and ff is
/// `linear2(dropout(activation(linear1(x))))`, each followed by dropout. Dropout (in attention
/// too) runs in training mode only. Submodules keep their own initializations (Linear,
/// LayerNorm, MultiheadAttention).
/// \throws ember::Error from the constructor on an activation other than "relu" / "gelu",
///   dim_feedforward <= 0, dropout outside [0, 1), or nhead not dividing d_model.
class TransformerEncoderLayerImpl : public Module {
 public:
  /// A layer with the default options (dim_feedforward 2048, dropout 0.1, relu, post-norm).
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead)
      : TransformerEncoderLayerImpl(TransformerEncoderLayerOptions(d_model, nhead)) {}
  /// Builds and registers the submodules.
  explicit TransformerEncoderLayerImpl(const TransformerEncoderLayerOptions& options);
  /// Runs the layer on `src`.
  /// \param src [S, N, E] ([N, S, E] with batch_first, or unbatched [S, E]).
  /// \param src_mask as MultiheadAttention's attn_mask ([S, S] or [N * nhead, S, S]; bool true
  ///   = not allowed, or float, added).
  /// \param src_key_padding_mask as MultiheadAttention's key_padding_mask ([N, S]).
  /// \param is_causal masks later positions (when src_mask is not given).
  /// \return shaped like src.
  Tensor forward(const Tensor& src, const Tensor& src_mask = {},
                 const Tensor& src_key_padding_mask = {}, bool is_causal = false);
  /// Prints the options, e.g. `TransformerEncoderLayer(d_model=512, nhead=8, ...)`.
  void pretty_print(std::ostream& os) const override;

  TransformerEncoderLayerOptions options;  ///< the options the layer was built with
  MultiheadAttention self_attn{nullptr};   ///< self-attention, d_model in nhead heads
  /// The feed-forward block's first Linear, d_model -> dim_feedforward.
  Linear linear1{nullptr}, linear2{nullptr};
  /// The LayerNorm around self-attention.
  LayerNorm norm1{nullptr}, norm2{nullptr};
  /// \var linear2
  /// The feed-forward block's second Linear, dim_feedforward -> d_model.
  /// \var norm2
  /// The LayerNorm around the feed-forward block.
};
/// The module holder of TransformerEncoderLayerImpl, like `torch::nn::TransformerEncoderLayer`.
EMBER_MODULE(TransformerEncoderLayer);

}  // namespace ember::nn
