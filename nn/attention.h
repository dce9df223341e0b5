#pragma once
/// \file
/// Attention: scaled_dot_product_attention and MultiheadAttention with PyTorch's semantics.
///
/// Two implementations: the fused attention rows (core/ops.yaml; on CUDA, flash-attention
/// kernels that never store the scores) and a composition of public ops (matmul, softmax,
/// where, dropout), which the CPU, explicit masks, dropout and asked-for weights take. The
/// fused rows on CUDA also need a float32, float16 or bfloat16 input whose value head size
/// equals the query's and is at most 128. SdpBackendGuard overrides the choice.
#include <optional>
#include <ostream>
#include <tuple>

#include "core/generator.h"
#include "nn/holder.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

namespace functional {
/// softmax(q k^T * scale + mask) v over the last two dims, as torch's
/// `F.scaled_dot_product_attention`.
///
/// A row with nothing to attend gives NaN, as PyTorch's.
/// \param q queries [..., L, E].
/// \param k keys [..., S, E].
/// \param v values [..., S, Ev]; q, k and v share one floating dtype and one device, and
///   their batch dims broadcast.
/// \param attn_mask broadcasts to [..., L, S]: bool, true where a position may be attended
///   (PyTorch's SDPA convention, the opposite of MultiheadAttention's), or float, added to the
///   scores; undefined: none.
/// \param dropout_p probability in [0, 1) of dropping an attention weight (kept ones scaled
///   by 1 / (1 - p)); applied whenever > 0, whatever the training mode, as in PyTorch.
/// \param is_causal query i attends keys j <= i only (no attn_mask then).
/// \param scale factor of q k^T; defaults to 1/sqrt(E).
/// \param gen the generator for dropout; null: the default generator.
/// \return [..., L, Ev].
/// \throws ember::Error on non-floating, mismatched or fewer-than-2-D inputs, a mask that does
///   not broadcast, dropout_p outside [0, 1), or is_causal with an attn_mask.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, double dropout_p = 0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr);

/// Which implementation attention takes, as torch.nn.attention.sdpa_kernel selects.
enum class SdpBackend {
  Auto,     ///< the fused rows on CUDA where they apply, the composition elsewhere (default)
  Fused,    ///< the rows wherever they apply (on the CPU too: their reference kernels)
  Composed  ///< always the composition of public ops
};
/// The backend selected for this thread (Auto unless an SdpBackendGuard is alive).
SdpBackend sdp_backend();
/// Sets the backend for this thread until the guard goes (guards nest).
/// \code
/// {
///   nn::functional::SdpBackendGuard g(nn::functional::SdpBackend::Composed);
///   y = nn::functional::scaled_dot_product_attention(q, k, v);
/// }
/// \endcode
class SdpBackendGuard {
 public:
  /// Selects `b` for this thread.
  explicit SdpBackendGuard(SdpBackend b);
  /// Restores the backend selected before.
  ~SdpBackendGuard();
  SdpBackendGuard(const SdpBackendGuard&) = delete;
  SdpBackendGuard& operator=(const SdpBackendGuard&) = delete;

 private:
  SdpBackend prev_;
};
}  // namespace functional

/// Multi-head attention, like torch.nn.MultiheadAttention (query, key and value all of
/// embed_dim features: no kdim / vdim, no add_bias_kv).
///
/// Parameters: in_proj_weight [3E, E] (q, k, v stacked), in_proj_bias [3E], out_proj (Linear
/// E -> E). Inputs [L, N, E] ([N, L, E] with batch_first, or unbatched [L, E]); key and value
/// [S, N, E] likewise. When query, key and value are one tensor the three projections are one
/// product. Dropout (options.dropout()) applies to the attention weights in training mode only.
/// The fused attention rows need need_weights = false and no masks (is_causal is fine).
/// \throws ember::Error from the constructor when num_heads does not divide embed_dim or
///   dropout is outside [0, 1).
class MultiheadAttentionImpl : public Module {
 public:
  /// E = embed_dim features in num_heads heads, with biases and no dropout.
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  /// Registers and initializes the parameters (see reset_parameters).
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  /// Attends from query to key / value.
  ///
  /// Masks follow nn.MultiheadAttention (not SDPA): true means NOT allowed.
  /// \param query [L, N, E] ([N, L, E] with batch_first, or unbatched [L, E]).
  /// \param key [S, N, E], laid out as query.
  /// \param value [S, N, E], laid out as query.
  /// \param key_padding_mask [N, S] (unbatched: [S]): bool, true = ignore that key, or float,
  ///   added to the scores; undefined: none.
  /// \param need_weights also return the attention weights (takes the composed path).
  /// \param attn_mask [L, S] or [N * num_heads, L, S]: bool, true where attention is NOT
  ///   allowed, or float, added to the scores; undefined: none.
  /// \param average_attn_weights average the returned weights over the heads.
  /// \param is_causal query i attends keys j <= i only; ignored when attn_mask is given.
  /// \return (output, weights): output shaped like query; weights [N, L, S] averaged over
  ///   heads (or [N, num_heads, L, S]; unbatched without N) with need_weights, else an
  ///   undefined tensor.
  /// \throws ember::Error on non-floating inputs, shapes that do not match embed_dim or each
  ///   other, or badly shaped masks.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);
  /// xavier_uniform_ in_proj_weight, zero biases, out_proj's Linear init for its weight (as
  /// PyTorch).
  void reset_parameters();
  /// Prints e.g. `MultiheadAttention(512, num_heads=8)`.
  void pretty_print(std::ostream& os) const override;

  MultiheadAttentionOptions options;  ///< the options the module was built with
  Tensor in_proj_weight;              ///< [3E, E]: the q, k and v projections stacked
  Tensor in_proj_bias;                ///< [3E], undefined with bias(false)
  Linear out_proj{nullptr};           ///< the output projection, E -> E
};
/// The module holder of MultiheadAttentionImpl, like `torch::nn::MultiheadAttention`.
EMBER_MODULE(MultiheadAttention);

}  // namespace ember::nn
