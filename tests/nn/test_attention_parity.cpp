// Attention against PyTorch (tests/fixtures/attention_layers.safetensors, made by
// tools/make_attention_fixtures.py with PyTorch 1.13): MultiheadAttention (self and cross
// attention, bool and float masks, key padding, unbatched, per-head weights),
// TransformerEncoderLayer (post-norm relu, pre-norm gelu with a causal mask) and
// scaled_dot_product_attention: outputs, attention weights and the gradients of the inputs and
// every parameter, float64, within 1e-10 (relative above 1), on the CPU and on CUDA.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/serialize.h"
#include "nn/transformer.h"
#include "test_util.h"

using namespace ember;
using json = nlohmann::json;

namespace {

void check_case(const nn::TensorFile& fx, const std::string& name, const json& c, Device dev) {
  INFO(name << " on " << dev.str());
  auto get = [&](const std::string& k) -> Tensor {
    const auto it = fx.tensors.find(name + "." + k);
    return it == fx.tensors.end() ? Tensor() : it->second.to(dev);
  };
  auto close = [&](const Tensor& got, const std::string& key) {
    INFO(key);
    const Tensor want = get(key);
    REQUIRE(want.defined());
    REQUIRE(got.defined());
    REQUIRE(got.sizes() == want.sizes());
    const std::vector<double> g = test::read(got), e = test::read(want);
    size_t bad = 0;
    for (size_t i = 0; i < g.size(); ++i)
      bad += !(std::abs(g[i] - e[i]) <= 1e-10 * std::max(1.0, std::abs(e[i])));
    CHECK(bad == 0);
  };
  const std::string kind = c["kind"];
  const json& ctor = c["ctor"];
  const json& call = c["call"];
  const Tensor attn_mask = get("attn_mask"), kpm = get("key_padding_mask");
  std::shared_ptr<nn::Module> module;
  nn::MultiheadAttention mha{nullptr};
  nn::TransformerEncoderLayer layer{nullptr};
  if (kind == "MultiheadAttention") {
    mha = nn::MultiheadAttention(nn::MultiheadAttentionOptions(ctor["embed_dim"], ctor["num_heads"])
                                     .bias(ctor.value("bias", true))
                                     .batch_first(ctor.value("batch_first", false)));
    module = mha.ptr();
  } else if (kind == "TransformerEncoderLayer") {
    layer = nn::TransformerEncoderLayer(
        nn::TransformerEncoderLayerOptions(ctor["d_model"], ctor["nhead"])
            .dim_feedforward(ctor["dim_feedforward"])
            .dropout(ctor["dropout"])
            .activation(ctor.value("activation", std::string("relu")))
            .batch_first(ctor.value("batch_first", false))
            .norm_first(ctor.value("norm_first", false)));
    module = layer.ptr();
  }
  if (module) {
    module->to(dev, kFloat64);
    module->eval();
    NoGradGuard no_grad;
    int params = 0;
    for (auto& [pname, p] : module->named_parameters()) {
      INFO("parameter " << pname);
      const Tensor want = get("param." + pname);
      REQUIRE(want.defined());
      REQUIRE(want.sizes() == p.sizes());
      Tensor(p).copy_(want);
      ++params;
    }
    // Every PyTorch parameter has an Ember counterpart (same count, names checked above).
    int theirs = 0;
    for (const auto& [key, t] : fx.tensors) theirs += key.rfind(name + ".param.", 0) == 0;
    CHECK(params == theirs);
  }
  Tensor out, weights;
  std::vector<std::pair<std::string, Tensor>> inputs;
  if (kind == "sdpa") {
    Tensor q = get("q").requires_grad_(), k = get("k").requires_grad_(),
           v = get("v").requires_grad_();
    inputs = {{"q", q}, {"k", k}, {"v", v}};
    std::optional<double> scale;
    if (call.contains("scale")) scale = call["scale"].get<double>();
    out = nn::functional::scaled_dot_product_attention(q, k, v, attn_mask, 0.0,
                                                       call.value("is_causal", false), scale);
  } else if (kind == "MultiheadAttention") {
    Tensor q = get("q").requires_grad_();
    inputs = {{"q", q}};
    Tensor k = q, v = q;
    if (!call.value("self_attention", false)) {
      k = get("k").requires_grad_();
      v = get("v").requires_grad_();
      inputs.push_back({"k", k});
      inputs.push_back({"v", v});
    }
    std::tie(out, weights) = mha->forward(q, k, v, kpm, call.value("need_weights", true), attn_mask,
                                          call.value("average_attn_weights", true));
  } else {
    Tensor x = get("x").requires_grad_();
    inputs = {{"x", x}};
    out = layer->forward(x, attn_mask, kpm);
  }
  close(out, "out");
  if (get("weights").defined()) close(weights, "weights");
  sum(mul(out, get("grad_out"))).backward();
  for (auto& [n, t] : inputs) close(t.grad(), "grad_" + n);
  if (module)
    for (auto& [pname, p] : module->named_parameters()) close(p.grad(), "grad." + pname);
}

void check_all(Device dev) {
  const std::string path = std::string(EMBER_FIXTURE_DIR) + "/attention_layers.safetensors";
  if (!std::filesystem::exists(path))
    FAIL("missing " << path << "; make it with `python3 tools/make_attention_fixtures.py`");
  const nn::TensorFile fx = nn::load_tensor_file(path);
  int cases = 0;
  for (const auto& [key, value] : fx.metadata) {
    if (key == "torch_version" || key == "generator") continue;
    check_case(fx, key, json::parse(value), dev);
    ++cases;
  }
  CHECK(cases == 9);
}

}  // namespace

TEST_CASE("attention layers match PyTorch, float64 (CPU)", "[nn][attention][parity]") {
  check_all(Device::cpu());
}

TEST_CASE("attention layers match PyTorch, float64 (CUDA)", "[nn][attention][parity][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_all(Device::cuda(0));
}
