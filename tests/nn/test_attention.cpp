// Attention's building blocks: split/chunk, masked_fill, tril/triu against loops written here;
// scaled_dot_product_attention's gradients against finite differences; the errors bad shapes
// raise; a compiled transformer-block training step against eager.
#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "nn/transformer.h"
#include "optim/adam.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using Vec = std::vector<double>;

TEST_CASE("split, chunk: views of consecutive pieces", "[core][attention]") {
  const Tensor a = arange(0, 14, 1, TensorOptions(kFloat64)).view({2, 7});
  const std::vector<Tensor> s = split(a, 3, 1);
  REQUIRE(s.size() == 3);
  CHECK(s[0].sizes() == Shape({2, 3}));
  CHECK(s[2].sizes() == Shape({2, 1}));
  CHECK(test::read(s[2]) == Vec{6, 13});
  CHECK(test::read(s[1]) == Vec{3, 4, 5, 10, 11, 12});
  const std::vector<Tensor> w = split(a, std::vector<int64_t>{2, 0, 5}, 1);
  REQUIRE(w.size() == 3);
  CHECK(w[1].size(1) == 0);
  CHECK(test::read(w[2]) == Vec{2, 3, 4, 5, 6, 9, 10, 11, 12, 13});
  const std::vector<Tensor> c = chunk(a, 3, -1);  // ceil(7 / 3) = 3: pieces 3, 3, 1
  REQUIRE(c.size() == 3);
  CHECK(c[2].size(1) == 1);
  CHECK(chunk(a, 2, 0).size() == 2);
  CHECK_THROWS_WITH(split(a, std::vector<int64_t>{2, 2}, 1), Contains("sum to 4") && Contains("7"));
  CHECK_THROWS_WITH(chunk(a, 0, 0), Contains("chunks must be positive"));
  CHECK_THROWS_WITH(split(a, 2, 2), Contains("split: dim 2 is out of range"));
}

TEST_CASE("masked_fill, tril, triu", "[core][attention]") {
  const int64_t R = 3, C = 5;
  const Tensor a = add(arange(0, R * C, 1, TensorOptions(kFloat64)).view({R, C}), 1.0);
  for (int64_t d : {-1, 0, 2}) {
    const Vec lo = test::read(tril(a, d)), up = test::read(triu(a, d));
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < C; ++j) {
        const double v = static_cast<double>(i * C + j + 1);
        INFO("diagonal " << d << " at (" << i << ", " << j << ")");
        CHECK(lo[static_cast<size_t>(i * C + j)] == (j - i <= d ? v : 0.0));
        CHECK(up[static_cast<size_t>(i * C + j)] == (j - i >= d ? v : 0.0));
      }
  }
  // The dtype stays: a bool mask stays bool.
  const Tensor mask_lo = tril(ones({2, 3}, TensorOptions(kBool)));
  CHECK(mask_lo.dtype() == kBool);
  CHECK(test::read(mask_lo.to(kFloat64)) == Vec{1, 0, 0, 1, 1, 0});
  CHECK(triu(ones({2, 2}, TensorOptions(kInt32))).dtype() == kInt32);
  // Batched: the last two dims.
  CHECK(tril(ones({2, 2, 2})).sum().item<float>() == 6.0f);
  const Tensor mask = from_vector(std::vector<bool>{true, false, false, true, false}, {1, C});
  const Vec m = test::read(masked_fill(a, mask, -7.5));
  for (int64_t i = 0; i < R; ++i) {
    CHECK(m[static_cast<size_t>(i * C)] == -7.5);
    CHECK(m[static_cast<size_t>(i * C + 1)] == static_cast<double>(i * C + 2));
    CHECK(m[static_cast<size_t>(i * C + 3)] == -7.5);
  }
  CHECK_THROWS_WITH(masked_fill(a, ones({1, C}), 0.0), Contains("must be bool"));
  CHECK_THROWS_WITH(tril(ones({4})), Contains("tril: expected at least 2 dims"));
}

TEST_CASE("scaled_dot_product_attention: gradients against finite differences", "[nn][attention]") {
  manual_seed(31);
  const TensorOptions o(kFloat64);
  const Tensor q = randn({2, 3, 4}, o).requires_grad_(true);
  const Tensor k = randn({2, 5, 4}, o).requires_grad_(true);
  const Tensor v = randn({2, 5, 3}, o).requires_grad_(true);
  const Tensor bias = randn({3, 5}, o);
  namespace F = nn::functional;
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);
    const std::string report = autograd::gradcheck_report(
        [&](const std::vector<Tensor>& x) {
          if (variant == 0) return F::scaled_dot_product_attention(x[0], x[1], x[2]);
          if (variant == 1)
            return F::scaled_dot_product_attention(x[0], x[1], x[2], bias, 0.0, false, 0.7);
          // causal needs L == S: the first 3 keys
          return F::scaled_dot_product_attention(x[0], x[1].slice(1, 0, 3), x[2].slice(1, 0, 3), {},
                                                 0.0, true);
        },
        {q, k, v});
    CHECK(report.empty());
    if (!report.empty()) WARN(report);
  }
}

TEST_CASE("attention: errors name the layer and the shapes", "[nn][attention]") {
  namespace F = nn::functional;
  const Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 3});
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, randn({2, 5, 6}), v),
                    Contains("scaled_dot_product_attention") && Contains("[2, 5, 6]"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, k, v, ones({3, 5}).to(kBool), 0, true),
                    Contains("is_causal and an explicit attn_mask"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, k, v, ones({4, 5})),
                    Contains("scaled_dot_product_attention") && Contains("[4, 5]"));
  CHECK_THROWS_WITH(nn::MultiheadAttention(10, 3),
                    Contains("embed_dim 10 is not divisible by num_heads 3"));
  nn::MultiheadAttention mha(8, 2);
  const Tensor x = randn({5, 2, 8});
  CHECK_THROWS_WITH(mha->forward(x, x, randn({5, 2, 6})),
                    Contains("MultiheadAttention: embed_dim is 8") && Contains("[5, 2, 6]"));
  CHECK_THROWS_WITH(mha->forward(x, x, x, {}, true, ones({4, 5})),
                    Contains("attn_mask must be [5, 5] or [4, 5, 5], got [4, 5]"));
  CHECK_THROWS_WITH(mha->forward(x, x, x, ones({5, 2}).to(kBool)),
                    Contains("key_padding_mask must be [2, 5], got [5, 2]"));
  CHECK_THROWS_WITH(
      nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(8, 2).activation("swish")),
      Contains("activation must be \"relu\" or \"gelu\", got \"swish\""));
}

TEST_CASE("a compiled transformer-block training step equals eager", "[nn][attention][jit]") {
  auto run = [](bool compiled_run) {
    manual_seed(41);
    nn::TransformerEncoderLayer block(nn::TransformerEncoderLayerOptions(16, 4)
                                          .dim_feedforward(32)
                                          .dropout(0.0)
                                          .activation("gelu")
                                          .batch_first(true)
                                          .norm_first(true));
    nn::Linear head(16, 5);
    std::vector<Tensor> params = block->parameters();
    for (const Tensor& p : head->parameters()) params.push_back(p);
    optim::AdamW opt(params, optim::AdamWOptions(1e-2));
    nn::CrossEntropyLoss criterion;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      const Tensor h = block->forward(x, {}, {}, true);  // causal
      Tensor loss = criterion(head->forward(h.reshape({-1, 16})), y.reshape({-1}));
      loss.backward();
      opt.step();
      return loss;
    };
    auto compiled = jit::compile(step);
    std::vector<double> losses;
    for (int i = 0; i < 6; ++i) {
      const Tensor x = randn({3, 7, 16});
      const Tensor y = randint(0, 5, {3, 7});
      losses.push_back((compiled_run ? compiled(x, y) : step(x, y)).item<float>());
    }
    if (compiled_run) {
      CHECK(compiled.stats().eager_calls == 0);
      CHECK(compiled.stats().replays >= 2);
    }
    return losses;
  };
  const std::vector<double> eager = run(false), compiled = run(true);
  REQUIRE(eager.size() == compiled.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("step " << i);
    CHECK(std::abs(eager[i] - compiled[i]) <= 1e-5 * std::abs(eager[i]));
  }
  CHECK(eager.back() < eager.front());
}

TEST_CASE("tie_parameter: an output layer sharing the embedding's weight", "[nn][attention]") {
  manual_seed(51);
  nn::Embedding tok(11, 6);
  nn::Linear head(nn::LinearOptions(6, 11).bias(false));
  head->weight = head->tie_parameter("weight", tok->weight);
  CHECK(head->weight.is_same(tok->weight));
  nn::Sequential both(tok, head);
  CHECK(both->parameters().size() == 1);  // one tensor, listed once
  // One backward accumulates both uses: the lookup's gradient plus the output layer's.
  const Tensor idx = from_vector(std::vector<int64_t>{3, 7, 3}, {3});
  const Tensor g = randn({3, 11});
  sum(mul(head->forward(tok->forward(idx)), g)).backward();
  const Vec tied = test::read(tok->weight.grad());
  // The same sum from an untied copy of each use.
  const Tensor w1 = tok->weight.detach().clone().requires_grad_(true);
  const Tensor w2 = tok->weight.detach().clone().requires_grad_(true);
  sum(mul(nn::functional::linear(nn::functional::embedding(idx, w1), w2), g)).backward();
  const Vec a = test::read(w1.grad()), b = test::read(w2.grad());
  REQUIRE(tied.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(tied[i] == Approx(a[i] + b[i]).margin(1e-6));
  nn::Linear wrong(nn::LinearOptions(6, 10).bias(false));
  CHECK_THROWS_WITH(wrong->tie_parameter("weight", tok->weight),
                    Contains("tie_parameter: 'weight' is float32 [10, 6]") &&
                        Contains("the shared parameter float32 [11, 6]"));
  CHECK_THROWS_WITH(wrong->tie_parameter("bias", tok->weight), Contains("no parameter 'bias'"));
}
