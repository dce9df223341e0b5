#pragma once
// Attention: scaled_dot_product_attention and MultiheadAttention with PyTorch's semantics. Two
// implementations: the fused attention rows (core/ops.yaml; on CUDA, flash-attention kernels
// that never store the scores) and a composition of public ops (matmul, softmax, where,
// dropout), which the CPU, explicit masks, dropout and asked-for weights take.
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
// softmax(q k^T * scale + mask) v over the last two dims, as torch's F.scaled_dot_product_
// attention: q [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast). attn_mask
// broadcasts to [..., L, S]: bool, true where a position may be attended (PyTorch's SDPA
// convention), or float, added to the scores. is_causal: query i attends keys j <= i (no
// attn_mask then). scale defaults to 1/sqrt(E). dropout_p > 0 drops attention weights (from
// `gen` or the default generator). A row with nothing to attend gives NaN, as PyTorch's.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, double dropout_p = 0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    Generator* gen = nullptr);

// Which implementation attention takes, as torch.nn.attention.sdpa_kernel selects: Auto is the
// fused rows on CUDA where they apply, the composition elsewhere; Fused takes the rows wherever
// they apply (on the CPU too: their reference kernels, for checking); Composed never does.
enum class SdpBackend { Auto, Fused, Composed };
SdpBackend sdp_backend();
// Sets the backend for this thread until the guard goes.
class SdpBackendGuard {
 public:
  explicit SdpBackendGuard(SdpBackend b);
  ~SdpBackendGuard();
  SdpBackendGuard(const SdpBackendGuard&) = delete;
  SdpBackendGuard& operator=(const SdpBackendGuard&) = delete;

 private:
  SdpBackend prev_;
};
}  // namespace functional

// torch.nn.MultiheadAttention: in_proj_weight [3E, E] (q, k, v stacked), in_proj_bias [3E],
// out_proj (Linear E -> E). Inputs [L, N, E] ([N, L, E] with batch_first, or unbatched [L, E]).
// Masks follow nn.MultiheadAttention (not SDPA): a bool attn_mask [L, S] or [N * H, L, S] is
// true where attention is NOT allowed, a float one is added; key_padding_mask [N, S] (bool, true
// = ignore that key, or float, added). Returns the output and, with need_weights, the attention
// weights [N, L, S] averaged over heads (or [N, H, L, S]); else an undefined tensor.
class MultiheadAttentionImpl : public Module {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttentionImpl(MultiheadAttentionOptions(embed_dim, num_heads)) {}
  explicit MultiheadAttentionImpl(const MultiheadAttentionOptions& options);
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true,
                                     bool is_causal = false);
  // xavier_uniform_ in_proj_weight, zero biases, out_proj's Linear init for its weight.
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  MultiheadAttentionOptions options;
  Tensor in_proj_weight;  // [3E, E]
  Tensor in_proj_bias;    // [3E], undefined with bias(false)
  Linear out_proj{nullptr};
};
EMBER_MODULE(MultiheadAttention);

}  // namespace ember::nn
