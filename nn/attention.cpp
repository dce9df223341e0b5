#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace ember::nn {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Scores are q k^T * scale over the last two dims; `keep_causal` limits query i to keys j <= i;
// `additive` (float, broadcast to the scores) is added. Returns softmax(scores) (after dropout
// when p > 0) times v, and the weights through `weights` when asked.
// The fused rows (core/ops.yaml "fused attention") where they apply: no explicit mask, no
// dropout, no weights asked for, one head size for queries, keys and values (on CUDA float32,
// float16 or bfloat16 and at most kMaxFusedHead). On the CPU only when asked (SdpBackend::Fused):
// there the composition runs on the BLAS.
constexpr int64_t kMaxFusedHead = 128;

thread_local functional::SdpBackend tls_backend = functional::SdpBackend::Auto;

bool fused_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& additive,
                   double p, const Tensor* weights) {
  const functional::SdpBackend b = tls_backend;
  const bool device_ok = b == functional::SdpBackend::Fused ||
                         (b == functional::SdpBackend::Auto && q.device().is_cuda());
  return device_ok && !additive.defined() && p == 0 && !weights && q.size(-1) == v.size(-1) &&
         q.size(-2) > 0 && k.size(-2) > 0 &&
         (!q.device().is_cuda() || (q.dtype() != kFloat64 && q.size(-1) <= kMaxFusedHead));
}

// Broadcasts the batch dims, folds them into at most two and runs the rows. With `interleaved`
// (4-D inputs [B1, B2, len, E]) the result is [B1, L, B2, E], as the rows lay it out.
Tensor fused(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
             bool interleaved = false) {
  auto lead = [](const Tensor& t) {
    Shape s = t.sizes();
    s.resize(s.size() - 2);
    return s;
  };
  const Shape batch =
      broadcast_shapes(lead(q), broadcast_shapes(lead(k), lead(v), "attention"), "attention");
  EMBER_CHECK(!interleaved || batch.size() == 2, "attention: interleaved needs 4-D inputs");
  auto fit = [&](const Tensor& t) {
    Shape s = batch;
    s.push_back(t.size(-2));
    s.push_back(t.size(-1));
    Tensor e = t.expand(s);
    if (batch.size() > 2 || batch.empty()) e = e.reshape({-1, t.size(-2), t.size(-1)});
    return e.stride(-1) == 1 ? e : e.contiguous();
  };
  Attrs a;
  a.attn_scale = scale;
  a.causal = causal;
  a.interleaved = interleaved;
  Tensor o = dispatch(OpId::attention, {fit(q), fit(k), fit(v)}, a);
  if (interleaved) return o;
  Shape out = batch;
  out.push_back(q.size(-2));
  out.push_back(v.size(-1));
  return o.reshape(out);
}

Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& additive,
              bool causal, double scale, double p, Generator* gen, Tensor* weights) {
  if (fused_applies(q, k, v, additive, p, weights)) return fused(q, k, v, causal, scale);
  Tensor scores = matmul(q * scale, k.transpose(-2, -1));
  if (causal) {
    const int64_t L = q.size(-2), S = k.size(-2);
    const TensorOptions o = TensorOptions(kInt64).device(q.device());
    const Tensor after =
        gt(sub(arange(S, o).view({1, S}), arange(L, o).view({L, 1})), zeros({}, o));  // j > i
    scores = masked_fill(scores, after, kNegInf);
  }
  if (additive.defined()) scores = add(scores, additive);
  Tensor attn = softmax(scores, -1);
  if (p > 0) attn = functional::dropout(attn, p, true, gen);
  if (weights) *weights = attn;
  return matmul(attn, v);
}

// A float mask with -inf where the bool `disallowed` is true (0 elsewhere), or a float mask as
// it is.
Tensor additive_of(const Tensor& m, const Tensor& like, bool true_means_disallowed) {
  if (!m.defined()) return {};
  if (m.dtype() != kBool) return m.to(like.dtype());
  const Tensor zero = zeros({}, TensorOptions(like.dtype()).device(like.device()));
  return true_means_disallowed ? masked_fill(zero.expand(m.sizes()), m, kNegInf)
                               : where(m, zero, Scalar(kNegInf));
}

void check_float(const Tensor& t, const char* what, const char* who) {
  EMBER_CHECK(t.defined(), who, ": ", what, " is undefined");
  EMBER_CHECK(is_floating(t.dtype()), who, ": ", what, " must be floating point, got ",
              dtype_name(t.dtype()));
}

}  // namespace

functional::SdpBackend functional::sdp_backend() { return tls_backend; }
functional::SdpBackendGuard::SdpBackendGuard(SdpBackend b) : prev_(tls_backend) { tls_backend = b; }
functional::SdpBackendGuard::~SdpBackendGuard() { tls_backend = prev_; }

Tensor functional::scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& attn_mask, double dropout_p,
                                                bool is_causal, std::optional<double> scale,
                                                Generator* gen) {
  const char* who = "scaled_dot_product_attention";
  check_float(q, "query", who);
  check_float(k, "key", who);
  check_float(v, "value", who);
  EMBER_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, who,
              ": query, key and value need at least 2 dims, got ", q.sizes(), ", ", k.sizes(), ", ",
              v.sizes());
  EMBER_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2), who, ": query ", q.sizes(),
              ", key ", k.sizes(), " and value ", v.sizes(),
              " do not fit ([..., L, E], [..., S, E], [..., S, Ev])");
  EMBER_CHECK(q.dtype() == k.dtype() && k.dtype() == v.dtype(), who,
              ": query, key and value must share a dtype, got ", dtype_name(q.dtype()), ", ",
              dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  EMBER_CHECK(q.device() == k.device() && k.device() == v.device(), who,
              ": query, key and value must be on one device");
  EMBER_CHECK(dropout_p >= 0 && dropout_p < 1, who, ": dropout_p must be in [0, 1), got ",
              dropout_p);
  EMBER_CHECK(!(is_causal && attn_mask.defined()), who,
              ": is_causal and an explicit attn_mask cannot both be given");
  if (attn_mask.defined()) {
    // The scores' shape: the broadcast batch dims, then [L, S].
    Shape qs = q.sizes(), ks = k.sizes();
    qs[qs.size() - 1] = k.size(-2);  // [..., L, S] against [..., S, S]: only the batch dims
    ks[ks.size() - 2] = q.size(-2);  // and [L, S] survive the broadcast
    ks[ks.size() - 1] = k.size(-2);
    const Shape want = broadcast_shapes(qs, ks, who);
    EMBER_CHECK(broadcast_shapes(want, attn_mask.sizes(), who) == want, who,
                ": attn_mask of shape ", attn_mask.sizes(), " does not broadcast to the scores ",
                want);
  }
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return attend(q, k, v, additive_of(attn_mask, q, false), is_causal, s, dropout_p, gen, nullptr);
}

MultiheadAttentionImpl::MultiheadAttentionImpl(const MultiheadAttentionOptions& o) : options(o) {
  const int64_t E = o.embed_dim(), H = o.num_heads();
  EMBER_CHECK(E > 0 && H > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ",
              E, " and ", H);
  EMBER_CHECK(E % H == 0, "MultiheadAttention: embed_dim ", E, " is not divisible by num_heads ",
              H);
  EMBER_CHECK(o.dropout() >= 0 && o.dropout() < 1,
              "MultiheadAttention: dropout must be in [0, 1), got ", o.dropout());
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
  if (o.bias()) in_proj_bias = register_parameter("in_proj_bias", empty({3 * E}));
  out_proj = register_module("out_proj", Linear(LinearOptions(E, E).bias(o.bias())));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  out_proj->reset_parameters();
  if (out_proj->bias.defined()) init::zeros_(out_proj->bias);
}

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask,
    bool need_weights, const Tensor& attn_mask, bool average_attn_weights, bool is_causal) {
  const char* who = "MultiheadAttention";
  const int64_t E = options.embed_dim(), H = options.num_heads(), hd = E / H;
  check_float(query, "query", who);
  check_float(key, "key", who);
  check_float(value, "value", who);
  const bool unbatched = query.dim() == 2;
  EMBER_CHECK(
      (query.dim() == 3 || unbatched) && key.dim() == query.dim() && value.dim() == query.dim(),
      who, ": query, key and value must all be ", options.batch_first() ? "[N, L, E]" : "[L, N, E]",
      " (or unbatched [L, E]), got ", query.sizes(), ", ", key.sizes(), ", ", value.sizes());
  EMBER_CHECK(query.size(-1) == E && key.size(-1) == E && value.size(-1) == E, who,
              ": embed_dim is ", E, ", got query ", query.sizes(), ", key ", key.sizes(),
              ", value ", value.sizes());
  // Inputs in their own layout, [N, len, E] (batch_first, or unbatched made a batch of one) or
  // [len, N, E]: the projections are row-wise, so they run on it without a transposing copy.
  const bool bf = options.batch_first() || unbatched;
  const Tensor qx = unbatched ? query.unsqueeze(0) : query;
  const Tensor kx = unbatched ? key.unsqueeze(0) : key;
  const Tensor vx = unbatched ? value.unsqueeze(0) : value;
  const int64_t L = qx.size(bf ? 1 : 0), N = qx.size(bf ? 0 : 1), S = kx.size(bf ? 1 : 0);
  EMBER_CHECK(kx.size(bf ? 0 : 1) == N && vx.size(bf ? 0 : 1) == N && vx.size(bf ? 1 : 0) == S, who,
              ": key and value must share their length and batch with each other and the batch "
              "with query, got query ",
              query.sizes(), ", key ", key.sizes(), ", value ", value.sizes());
  // The projections: one product when query, key and value are the same tensor (self-attention).
  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    const std::vector<Tensor> qkv =
        chunk(functional::linear(qx, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    const std::vector<Tensor> w = chunk(in_proj_weight, 3, 0);
    const std::vector<Tensor> b =
        in_proj_bias.defined() ? chunk(in_proj_bias, 3, 0) : std::vector<Tensor>(3);
    q = functional::linear(qx, w[0], b[0]);
    k = functional::linear(kx, w[1], b[1]);
    v = functional::linear(vx, w[2], b[2]);
  }
  const double p = is_training() ? options.dropout() : 0.0;
  // Heads as [N, H, len, hd] views of the projections (the last dim split, then permuted: no
  // copy), which the fused kernels take as they are.
  auto heads4 = [&](const Tensor& t, int64_t len) {
    const Tensor split = t.view(bf ? Shape({N, len, H, hd}) : Shape({len, N, H, hd}));
    return bf ? split.permute({0, 2, 1, 3}) : split.permute({1, 2, 0, 3});
  };
  if (!need_weights && !attn_mask.defined() && !key_padding_mask.defined()) {
    // Asked of the heads, not of the projections: the kernels' limit is on the head size.
    const Tensor qh = heads4(q, L), kh = heads4(k, S), vh = heads4(v, S);
    if (fused_applies(qh, kh, vh, Tensor(), p, nullptr)) {
      // [N, L, H, hd]: the heads merge back into [N, L, E] as a view.
      const Tensor o = fused(qh, kh, vh, is_causal, 1.0 / std::sqrt(static_cast<double>(hd)),
                             /*interleaved=*/true);
      Tensor out = bf ? o.reshape({N, L, E}) : o.transpose(0, 1).reshape({L, N, E});
      out = out_proj->forward(out);
      return {unbatched ? out.squeeze(0) : out, Tensor()};
    }
  }
  auto seq_first = [&](const Tensor& t) { return bf ? t.transpose(0, 1) : t; };
  q = seq_first(q);
  k = seq_first(k);
  v = seq_first(v);
  // [len, N, E] -> [N * H, len, hd]
  auto heads = [&](const Tensor& t, int64_t len) {
    return t.reshape({len, N * H, hd}).transpose(0, 1);
  };
  q = heads(q, L);
  k = heads(k, S);
  v = heads(v, S);
  // The masks, as one additive float mask broadcast to [N * H, L, S].
  Tensor mask;
  if (attn_mask.defined()) {
    const bool fits =
        attn_mask.sizes() == Shape({L, S}) || attn_mask.sizes() == Shape({N * H, L, S});
    EMBER_CHECK(fits, who, ": attn_mask must be [", L, ", ", S, "] or [", N * H, ", ", L, ", ", S,
                "], got ", attn_mask.sizes());
    mask = additive_of(attn_mask, q, true);
  }
  if (key_padding_mask.defined()) {
    const Shape want = unbatched ? Shape({S}) : Shape({N, S});
    EMBER_CHECK(key_padding_mask.sizes() == want, who, ": key_padding_mask must be ", want,
                ", got ", key_padding_mask.sizes());
    const Tensor kpm = additive_of(key_padding_mask, q, true)
                           .reshape({N, 1, 1, S})
                           .expand({N, H, 1, S})
                           .reshape({N * H, 1, S});
    mask = mask.defined() ? add(mask, kpm) : kpm;
  }
  Tensor weights;
  Tensor out = attend(q, k, v, mask, is_causal && !attn_mask.defined(),
                      1.0 / std::sqrt(static_cast<double>(hd)), p, nullptr,
                      need_weights ? &weights : nullptr);
  out = out_proj->forward(out.transpose(0, 1).reshape({L, N, E}));
  out = unbatched ? out.squeeze(1) : options.batch_first() ? out.transpose(0, 1) : out;
  if (need_weights) {
    weights = weights.reshape({N, H, L, S});
    if (average_attn_weights) weights = mean(weights, {1});
    if (unbatched) weights = weights.squeeze(0);
  }
  return {out, weights};
}

void MultiheadAttentionImpl::pretty_print(std::ostream& os) const {
  os << "MultiheadAttention(" << options.embed_dim() << ", num_heads=" << options.num_heads();
  if (options.dropout() > 0) os << ", dropout=" << options.dropout();
  if (!options.bias()) os << ", bias=false";
  if (options.batch_first()) os << ", batch_first=true";
  os << ")";
}

}  // namespace ember::nn
