// The fused attention rows (core/ops.yaml "fused attention"). On the CPU their kernels and
// backward formula against the composed matmul-softmax-matmul in float64 and against finite
// differences; on CUDA scaled_dot_product_attention (which takes the fused kernels there)
// against the CPU composition in float64, on sequence lengths and head sizes that do not fill
// the kernels' tiles, causal or not, heads split out of a projection by strides; and a compiled
// step that goes through the rows against eager.
#include <cmath>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using Vec = std::vector<double>;
namespace F = nn::functional;

namespace {

Tensor fused_rows(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  Attrs a;
  a.attn_scale = scale;
  a.causal = causal;
  return dispatch(OpId::attention, {q, k, v}, a);
}

// Largest |a - b| / (atol + rtol |b|) over the elements; <= 1 passes.
double worst(const Vec& a, const Vec& b, double atol, double rtol) {
  REQUIRE(a.size() == b.size());
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]) / (atol + rtol * std::abs(b[i]));
    w = std::isnan(e) ? 1e30 : std::max(w, e);
  }
  return w;
}

// The gradients of sum(out * g) with respect to xs, which are left without one.
std::vector<Tensor> grads_of(const Tensor& out, const std::vector<Tensor>& xs, const Tensor& g) {
  sum(out * g).backward();
  std::vector<Tensor> r;
  for (Tensor x : xs) {  // a handle: set_grad changes the shared tensor
    r.push_back(x.grad());
    x.set_grad(Tensor());
  }
  return r;
}

struct Case {
  int64_t batch, heads, L, S, E;
  bool causal;
};

// q, k, v as heads split out of [batch, len, heads * E] projections: [batch, heads, len, E]
// views whose rows are heads * E apart.
std::vector<Tensor> heads_of(const Case& c, const TensorOptions& o) {
  auto split = [&](int64_t len) { return randn({c.batch, len, c.heads, c.E}, o).transpose(1, 2); };
  return {split(c.L), split(c.S), split(c.S)};
}

}  // namespace

TEST_CASE("attention rows: forward and gradients equal the composition (CPU, float64)",
          "[nn][attention]") {
  manual_seed(61);
  const TensorOptions o(kFloat64);
  for (const Case c :
       {Case{2, 3, 7, 11, 5, false}, Case{2, 2, 9, 9, 4, true}, Case{1, 3, 5, 8, 6, true},
        Case{2, 1, 8, 5, 3, true}, Case{1, 1, 1, 1, 2, false}}) {
    INFO("L " << c.L << " S " << c.S << " E " << c.E << (c.causal ? " causal" : ""));
    std::vector<Tensor> x = heads_of(c, o);
    for (Tensor& t : x) t.requires_grad_(true);
    const double scale = 0.4;
    const Tensor fused = fused_rows(x[0], x[1], x[2], c.causal, scale);
    // The composed reference: is_causal means keys j <= i, for L != S too.
    Tensor mask;
    if (c.causal) mask = tril(ones({c.L, c.S}, TensorOptions(kBool)));
    const Tensor ref = F::scaled_dot_product_attention(x[0], x[1], x[2], mask, 0.0, false, scale);
    CHECK(fused.sizes() == ref.sizes());
    CHECK(worst(test::read(fused), test::read(ref), 1e-12, 1e-10) <= 1);
    {  // interleaved results: the same numbers laid out [B1, L, B2, E]
      Attrs a;
      a.attn_scale = scale;
      a.causal = c.causal;
      a.interleaved = true;
      const Tensor il = dispatch(OpId::attention, {x[0], x[1], x[2]}, a);
      CHECK(il.sizes() == Shape({c.batch, c.L, c.heads, c.E}));
      CHECK(il.is_contiguous());
      CHECK(test::read(il.permute({0, 2, 1, 3})) == test::read(fused));
      const Tensor gl = randn(il.sizes(), o);
      const std::vector<Tensor> gi = grads_of(il, x, gl);
      const std::vector<Tensor> gs =
          grads_of(fused_rows(x[0], x[1], x[2], c.causal, scale), x, gl.permute({0, 2, 1, 3}));
      for (size_t i = 0; i < 3; ++i) CHECK(test::read(gi[i]) == test::read(gs[i]));
    }
    // Gradients for a non-contiguous upstream gradient.
    const Tensor g = randn({c.batch, c.L, c.heads, c.E}, o).transpose(1, 2);
    const std::vector<Tensor> gf = grads_of(fused, x, g);
    const std::vector<Tensor> gr = grads_of(ref, x, g);
    for (size_t i = 0; i < 3; ++i) {
      INFO("gradient of input " << i);
      CHECK(gf[i].sizes() == x[i].sizes());
      CHECK(worst(test::read(gf[i]), test::read(gr[i]), 1e-11, 1e-9) <= 1);
    }
  }
}

TEST_CASE("attention rows: gradients against finite differences", "[nn][attention]") {
  manual_seed(62);
  const TensorOptions o(kFloat64);
  const Tensor q = randn({2, 4, 3}, o).requires_grad_(true);
  const Tensor k = randn({2, 6, 3}, o).requires_grad_(true);
  const Tensor v = randn({2, 6, 3}, o).requires_grad_(true);
  for (bool causal : {false, true}) {
    INFO((causal ? "causal" : "full"));
    const std::string report = autograd::gradcheck_report(
        [&](const std::vector<Tensor>& x) { return fused_rows(x[0], x[1], x[2], causal, 0.8); },
        {q, k, v});
    CHECK(report.empty());
    if (!report.empty()) WARN(report);
  }
}

TEST_CASE("attention rows: bad input names the row and the shapes", "[nn][attention]") {
  const Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 4});
  CHECK_THROWS_WITH(fused_rows(q, randn({2, 5, 6}), v, false, 1),
                    Contains("attention") && Contains("[2, 5, 6]"));
  CHECK_THROWS_WITH(fused_rows(q, k, randn({2, 4, 4}), false, 1),
                    Contains("attention") && Contains("as many rows"));
  CHECK_THROWS_WITH(fused_rows(q, k, v.to(kFloat64), false, 1),
                    Contains("attention") && Contains("float64"));
  CHECK_THROWS_WITH(fused_rows(randn({3, 4}), randn({5, 4}), randn({5, 4}), false, 1),
                    Contains("attention: expected [B, L, E] or [B1, B2, L, E]"));
  CHECK_THROWS_WITH(fused_rows(q, randn({4, 2, 5}).transpose(0, 2).transpose(0, 1), v, false, 1),
                    Contains("last dim must be contiguous"));
  Attrs a;
  CHECK_THROWS_WITH(
      dispatch(OpId::attention_backward_query,
               {randn({2, 3, 4}), q, k, v, zeros({2, 3}), zeros({2, 4})}, a),
      Contains("attention_backward_query") && Contains("delta") && Contains("[2, 3]"));
}

TEST_CASE("MultiheadAttention and encoder layers: the fused rows equal the composition (CPU)",
          "[nn][attention]") {
  manual_seed(65);
  const TensorOptions o(kFloat64);
  for (int variant = 0; variant < 4; ++variant) {
    const bool batch_first = variant != 1, self = variant != 2, unbatched = variant == 3;
    INFO("variant " << variant);
    nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(12, 3).batch_first(batch_first));
    mha->to(kFloat64);
    const Shape qs = unbatched     ? Shape({5, 12})
                     : batch_first ? Shape({2, 5, 12})
                                   : Shape({5, 2, 12});
    const Shape ks = unbatched     ? Shape({7, 12})
                     : batch_first ? Shape({2, 7, 12})
                                   : Shape({7, 2, 12});
    const Tensor x = randn(qs, o), mem = randn(ks, o);
    const Tensor g = randn(qs, o);
    std::vector<Vec> results[2];
    for (int fused = 0; fused < 2; ++fused) {
      F::SdpBackendGuard backend(fused ? F::SdpBackend::Fused : F::SdpBackend::Composed);
      const Tensor out = self ? std::get<0>(mha->forward(x, x, x, {}, false, {}, true, true))
                              : std::get<0>(mha->forward(x, mem, mem, {}, false));
      sum(out * g).backward();
      results[fused].push_back(test::read(out));
      for (Tensor p : mha->parameters()) {
        results[fused].push_back(test::read(p.grad()));
        p.set_grad(Tensor());
      }
    }
    REQUIRE(results[0].size() == results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
      INFO("result " << i << " (0: the output, then the parameters' gradients)");
      CHECK(worst(results[1][i], results[0][i], 1e-11, 1e-9) <= 1);
    }
  }
}

namespace {

// Ops a forward dispatches, through the (thread-local) trace observer.
int g_attention_rows = 0, g_copies = 0;
void count_attention_op(OpId op, std::span<const Tensor>, const Attrs&, const Tensor&, bool) {
  if (op == OpId::attention) ++g_attention_rows;
  if (op == OpId::cast) ++g_copies;
}

// The kernels' limit is on the head size (128): an embedding of 384 in 6 heads of 64 (gpt_base)
// must reach them with its heads as strided views, not through the composed path's copies, and
// so must 260 in 4 heads of 65 (an odd head size).
void check_mha_takes_fused_rows(Device dev) {
  manual_seed(66);
  for (const auto& [E, H] : std::vector<std::pair<int64_t, int64_t>>{{64, 2}, {384, 6}, {260, 4}}) {
    INFO("embed " << E << ", heads " << H);
    nn::MultiheadAttention mha(nn::MultiheadAttentionOptions(E, H).batch_first(true));
    mha->to(dev);
    const Tensor x = randn({2, 5, E}, dev);
    g_attention_rows = g_copies = 0;
    const OpObserver prev = trace_observer();
    set_trace_observer(&count_attention_op);
    Tensor out;
    try {
      out = std::get<0>(mha->forward(x, x, x, {}, false, {}, true, true));
    } catch (...) {
      set_trace_observer(prev);
      throw;
    }
    set_trace_observer(prev);
    CHECK(g_attention_rows == 1);
    CHECK(g_copies == 0);
    CHECK(out.sizes() == Shape({2, 5, E}));
  }
}

}  // namespace

TEST_CASE("MultiheadAttention takes the fused rows when its heads fit, whatever its width (CPU)",
          "[nn][attention]") {
  F::SdpBackendGuard backend(F::SdpBackend::Fused);
  check_mha_takes_fused_rows(Device::cpu());
}

TEST_CASE("MultiheadAttention takes the fused rows when its heads fit, whatever its width (CUDA)",
          "[nn][attention][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_mha_takes_fused_rows(Device::cuda(0));
}

TEST_CASE("scaled_dot_product_attention on CUDA (fused) equals the CPU composition",
          "[nn][attention][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(63);
  const TensorOptions o(kFloat64);
  const Device gpu = Device::cuda(0);
  // 16-bit storage takes the tensor-core rows: products of operands rounded to the storage
  // type (the probabilities too) with float accumulation, hence the wider tolerances.
  for (const DType dt : {kFloat32, kBFloat16, kFloat16}) {
    const bool low = dt != kFloat32;
    for (const Case c :
         {Case{2, 3, 37, 53, 24, false}, Case{1, 2, 130, 130, 64, true},
          Case{2, 2, 1, 70, 32, false}, Case{1, 2, 200, 77, 128, true}, Case{3, 1, 65, 65, 8, true},
          Case{1, 4, 64, 64, 80, false}, Case{1, 1, 77, 200, 40, true},
          Case{2, 3, 33, 45, 17, true}}) {  // rows 51 apart: no 16-byte loads
      INFO(dtype_name(dt) << " L " << c.L << " S " << c.S << " E " << c.E
                          << (c.causal ? " causal" : ""));
      std::vector<Tensor> x = heads_of(c, o), xd;
      for (Tensor& t : x) {
        t = t.to(dt).to(kFloat64);  // inputs the low-precision run holds exactly
        xd.push_back(t.to(gpu).to(dt).detach().requires_grad_(true));
        t.requires_grad_(true);
      }
      const Tensor ref = F::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, c.causal);
      const Tensor out = F::scaled_dot_product_attention(xd[0], xd[1], xd[2], {}, 0.0, c.causal);
      const double atol = low ? 2e-2 : 2e-5, rtol = low ? 2e-2 : 1e-4;
      CHECK(worst(test::read(out.to(kFloat64)), test::read(ref), atol, rtol) <= 1);
      const Tensor g = randn(ref.sizes(), o).to(dt).to(kFloat64);
      const std::vector<Tensor> gr = grads_of(ref, x, g);
      const std::vector<Tensor> gd = grads_of(out, xd, g.to(gpu).to(dt));
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient of input " << i);
        const Vec want = test::read(gr[i]);
        double scale = 0;  // errors relative to the gradient's size, which cancels in sums
        for (double w : want) scale = std::max(scale, std::abs(w));
        CHECK(worst(test::read(gd[i].to(kFloat64)), want, (low ? 3e-2 : 5e-5) * scale,
                    low ? 3e-2 : 1e-4) <= 1);
      }
    }
  }
}

TEST_CASE("a compiled step through the fused attention rows equals eager (CUDA)",
          "[nn][attention][jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const TensorOptions o = TensorOptions(kFloat32).device(Device::cuda(0));
  auto run = [&](bool compiled_run) {
    manual_seed(64);
    const Tensor wq = (randn({32, 32}, o) * 0.2).requires_grad_(true);
    const Tensor wkv = (randn({64, 32}, o) * 0.2).requires_grad_(true);
    auto step = [&](const Tensor& x) {
      const Tensor q = F::linear(x, wq).view({2, 19, 4, 8}).transpose(1, 2);
      const std::vector<Tensor> kv = chunk(F::linear(x, wkv), 2, -1);
      const Tensor k = kv[0].reshape({2, 19, 4, 8}).transpose(1, 2);
      const Tensor v = kv[1].reshape({2, 19, 4, 8}).transpose(1, 2);
      const Tensor y = F::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
      Tensor loss = sum(y * y);
      loss.backward();
      return loss;
    };
    auto compiled = jit::compile(step);
    std::vector<double> out;
    for (int i = 0; i < 4; ++i) {
      const Tensor x = randn({2, 19, 32}, o);
      out.push_back((compiled_run ? compiled(x) : step(x)).item<float>());
    }
    for (const Tensor& w : {wq, wkv})
      for (double e : test::read(w.grad())) out.push_back(e);
    if (compiled_run) CHECK(compiled.stats().eager_calls == 0);
    return out;
  };
  const Vec eager = run(false), compiled = run(true);
  CHECK(worst(compiled, eager, 1e-5, 1e-5) <= 1);
}

TEST_CASE("MultiheadAttention on CUDA (fused) equals the CPU composition in float64",
          "[nn][attention][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(66);
  for (const bool batch_first : {true, false}) {
    const Shape s = batch_first ? Shape({3, 70, 48}) : Shape({70, 3, 48});
    const Tensor x = randn(s, TensorOptions(kFloat64)), g = randn(s, TensorOptions(kFloat64));
    INFO((batch_first ? "batch_first" : "sequence first"));
    manual_seed(67);  // the same float32 initial weights for both
    nn::MultiheadAttention ref(nn::MultiheadAttentionOptions(48, 4).batch_first(batch_first));
    ref->to(kFloat64);
    manual_seed(67);
    nn::MultiheadAttention gpu(nn::MultiheadAttentionOptions(48, 4).batch_first(batch_first));
    gpu->to(Device::cuda(0), kFloat32);
    const Tensor xd = x.to(kFloat32).to(Device::cuda(0));
    sum(std::get<0>(ref->forward(x, x, x, {}, false, {}, true, true)) * g).backward();
    const Tensor out = std::get<0>(gpu->forward(xd, xd, xd, {}, false, {}, true, true));
    sum(out * g.to(kFloat32).to(Device::cuda(0))).backward();
    const std::vector<Tensor> pr = ref->parameters(), pg = gpu->parameters();
    REQUIRE(pr.size() == pg.size());
    for (size_t i = 0; i < pr.size(); ++i) {
      INFO("gradient of parameter " << i);
      const Vec want = test::read(pr[i].grad());
      double scale = 0;
      for (double w : want) scale = std::max(scale, std::abs(w));
      CHECK(worst(test::read(pg[i].grad().to(kFloat64)), want, 1e-4 * scale, 1e-4) <= 1);
    }
  }
}
