// Layers against float64 references written here, gradients against finite differences,
// Linear's initialization statistics, Dropout's mask, and bad-input errors.
#include <cmath>
#include <sstream>
#include <numbers>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn_test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using nntest::f64;
using nntest::f64v;
using nntest::i64;
using nntest::Vec;
namespace F = ember::nn::functional;

namespace {

// y[n, o] = sum_i x[n, i] w[o, i] + b[o]
Vec linear_ref(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(rows * out));
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[n * in + i] * w[o * in + i];
      y[n * out + o] = acc;
    }
  return y;
}

Tensor leaf(Tensor t) {
  t.requires_grad_(true);
  return t;
}

struct Stats {
  double mean = 0, var = 0, lo = INFINITY, hi = -INFINITY;
};
Stats stats_of(const Vec& v) {
  Stats s;
  for (double x : v) {
    s.mean += x;
    s.lo = std::min(s.lo, x);
    s.hi = std::max(s.hi, x);
  }
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.var += (x - s.mean) * (x - s.mean);
  s.var /= static_cast<double>(v.size());
  return s;
}

}  // namespace

TEST_CASE("Linear matches a float64 reference and its gradients", "[nn][layers][linear]") {
  nn::Linear lin(4, 3);
  lin->to(kFloat64);
  const Tensor x = f64({5, 4}, 1);
  const Vec ref =
      linear_ref(test::read(x), test::read(lin->weight), test::read(lin->bias), 5, 4, 3);
  CHECK_VALUES(lin(x), ref, 1e-12, 1e-12);

  // Leading batch dims: [2, 5, 4] -> [2, 5, 3].
  const Tensor x3 = f64({2, 5, 4}, 2);
  const Tensor y3 = lin(x3);
  CHECK(y3.sizes() == Shape{2, 5, 3});
  CHECK_VALUES(y3,
               linear_ref(test::read(x3), test::read(lin->weight), test::read(lin->bias), 10, 4, 3),
               1e-12, 1e-12);

  // No bias.
  nn::Linear nob(nn::LinearOptions(4, 2).bias(false));
  CHECK_FALSE(nob->bias.defined());
  CHECK(nob->parameters().size() == 1);
  nob->to(kFloat64);
  CHECK_VALUES(nob(x), linear_ref(test::read(x), test::read(nob->weight), {}, 5, 4, 2), 1e-12,
               1e-12);

  // Gradients with respect to the input, the weight and the bias.
  const Tensor xg = leaf(f64({3, 4}, 3));
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return lin(in[0]); },
                  (std::vector<Tensor>{xg, lin->weight, lin->bias}));
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) { return F::linear(in[0], in[1], in[2]); },
      (std::vector<Tensor>{leaf(f64({2, 3, 4}, 4)), leaf(f64({2, 4}, 5)), leaf(f64({2}, 6))}));
}

TEST_CASE("Linear's default init follows PyTorch: U(-1/sqrt(in), 1/sqrt(in))",
          "[nn][layers][linear][init]") {
  manual_seed(1234);
  const int64_t in = 256, out = 400;
  nn::Linear lin(in, out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  CHECK(lin->weight.sizes() == Shape{out, in});
  CHECK(lin->weight.dtype() == kFloat32);

  const Stats w = stats_of(test::read(lin->weight));
  CHECK(w.lo >= -bound);
  CHECK(w.hi <= bound);
  CHECK(w.lo < -0.999 * bound);  // the whole interval is used
  CHECK(w.hi > 0.999 * bound);
  // n = 102400 draws of U(-b, b): mean sd = b / sqrt(3n), var = b^2/3 within ~0.3% (1 sd).
  CHECK(std::fabs(w.mean) < 5 * bound / std::sqrt(3.0 * in * out));
  CHECK(w.var == Approx(bound * bound / 3).epsilon(0.02));

  const Stats b = stats_of(test::read(lin->bias));
  CHECK(b.lo >= -bound);
  CHECK(b.hi <= bound);
  CHECK(std::fabs(b.mean) < 5 * bound / std::sqrt(3.0 * out));
  CHECK(b.var == Approx(bound * bound / 3).epsilon(0.25));

  // The draws come from the Philox generator: the same seed gives the same weights, and a
  // second layer gets different ones.
  manual_seed(1234);
  nn::Linear again(in, out);
  CHECK(equal(again->weight, lin->weight));
  CHECK(equal(again->bias, lin->bias));
  nn::Linear other(in, out);
  CHECK_FALSE(equal(other->weight, lin->weight));

  // Initialization records no graph: parameters stay leaves.
  CHECK(lin->weight.is_leaf());
  CHECK(lin->weight.grad_fn() == nullptr);
}

TEST_CASE("Linear rejects bad input with the layer name and shapes", "[nn][layers][errors]") {
  nn::Linear lin(4, 3);
  CHECK_ERROR(lin(zeros({2, 5})),
              Contains("Linear") && Contains("[2, 5]") && Contains("in_features = 4"));
  CHECK_ERROR(lin(zeros({2, 4}, kFloat64)),
              Contains("Linear") && Contains("float64") && Contains("float32"));
  CHECK_ERROR(lin(zeros({2, 4}, kInt64)), Contains("Linear") && Contains("int64"));
  CHECK_ERROR(lin(zeros({}, kFloat32)), Contains("Linear") && Contains("[]"));
  CHECK_ERROR(lin(Tensor()), Contains("Linear") && Contains("undefined"));
  CHECK_ERROR(nn::Linear(-1, 3), Contains("Linear") && Contains("-1"));
  CHECK_ERROR(F::linear(zeros({2, 4}), zeros({3, 4}), zeros({2})),
              Contains("linear") && Contains("bias") && Contains("[2]"));
}

TEST_CASE("activations match float64 references and gradients", "[nn][layers][activation]") {
  const Vec xv = {-3.0, -1.5, -0.5, -0.01, 0.02, 0.7, 1.3, 2.9};
  const Tensor x = f64v(xv, {2, 4});
  Vec relu_ref, sig_ref, tanh_ref, gelu_ref, gelu_tanh_ref;
  for (double v : xv) {
    relu_ref.push_back(v > 0 ? v : 0);
    sig_ref.push_back(1 / (1 + std::exp(-v)));
    tanh_ref.push_back(std::tanh(v));
    gelu_ref.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    const double k = std::sqrt(2 / std::numbers::pi);
    gelu_tanh_ref.push_back(0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v))));
  }
  CHECK_VALUES(nn::ReLU()(x), relu_ref, 1e-15, 0);
  CHECK_VALUES(nn::Sigmoid()(x), sig_ref, 1e-13, 1e-15);
  CHECK_VALUES(nn::Tanh()(x), tanh_ref, 1e-13, 1e-15);
  CHECK_VALUES(nn::GELU()(x), gelu_ref, 1e-12, 1e-15);
  CHECK_VALUES(nn::GELU(nn::GELUOptions().approximate("tanh"))(x), gelu_tanh_ref, 1e-12, 1e-15);
  // Float32 against the same reference.
  CHECK_VALUES(nn::GELU()(x.to(kFloat32)), gelu_ref, 1e-5, 1e-6);

  const std::vector<Tensor> in = {leaf(f64({2, 4}, 11, -2, 2))};
  CHECK_GRADCHECK([](const std::vector<Tensor>& t) { return nn::Sigmoid()(t[0]); }, in);
  CHECK_GRADCHECK([](const std::vector<Tensor>& t) { return nn::Tanh()(t[0]); }, in);
  CHECK_GRADCHECK([](const std::vector<Tensor>& t) { return nn::GELU()(t[0]); }, in);
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return nn::GELU(nn::GELUOptions().approximate("tanh"))(t[0]);
      },
      in);
  // ReLU away from its kink.
  CHECK_GRADCHECK([](const std::vector<Tensor>& t) { return nn::ReLU()(t[0]); },
                  (std::vector<Tensor>{leaf(f64v(xv, {2, 4}))}));

  CHECK_ERROR(nn::GELU(nn::GELUOptions().approximate("fast")),
              Contains("GELU") && Contains("fast"));
}

TEST_CASE("Dropout drops at rate p, scales by 1/(1-p), and is the identity in eval",
          "[nn][layers][dropout]") {
  manual_seed(99);
  const double p = 0.3;
  nn::Dropout drop(p);
  const int64_t n = 200000;
  const Tensor x = ones({n});
  const Vec y = test::read(drop(x));
  const double scale = static_cast<float>(1.0 / (1.0 - p));
  int64_t zeros_seen = 0, badly_scaled = 0;
  for (double v : y) {
    if (v == 0)
      ++zeros_seen;
    else if (std::fabs(v - scale) > 1e-6 * scale)
      ++badly_scaled;
  }
  CHECK(badly_scaled == 0);
  // Binomial(n, p): sd of the rate = sqrt(p (1-p) / n) ~ 0.001.
  CHECK(std::fabs(static_cast<double>(zeros_seen) / n - p) < 0.006);

  // The same seed gives the same mask; a new draw gives another.
  manual_seed(99);
  const Tensor again = drop(x);
  CHECK(test::read(again) == y);
  CHECK_FALSE(test::read(drop(x)) == y);

  // Gradient: the mask times the scale (y / x for nonzero x).
  const Tensor xs = leaf(f64({6, 7}, 5, 0.5, 2.0));
  const Tensor ys = drop(xs);
  ys.sum().backward();
  const Vec xv = test::read(xs), yv = test::read(ys), gv = test::read(xs.grad());
  for (size_t i = 0; i < xv.size(); ++i) CHECK(gv[i] == Approx(yv[i] / xv[i]).epsilon(1e-12));

  drop->eval();
  CHECK(drop(x).is_same(x));
  drop->train();
  CHECK(equal(nn::Dropout(0.0)(x), x));
  CHECK(test::read(nn::Dropout(1.0)(x)) == Vec(static_cast<size_t>(n), 0.0));
  CHECK(F::dropout(x, 0.5, /*training=*/false).is_same(x));
  // Half-precision inputs work and keep their dtype.
  CHECK(F::dropout(ones({8}, kFloat16), 0.5).dtype() == kFloat16);

  CHECK_ERROR(nn::Dropout(1.5), Contains("Dropout") && Contains("1.5"));
  CHECK_ERROR(F::dropout(x, -0.1), Contains("dropout") && Contains("-0.1"));
  CHECK_ERROR(F::dropout(ones({3}, kInt64), 0.5), Contains("dropout") && Contains("int64"));
}

TEST_CASE("Flatten merges the requested dims", "[nn][layers][flatten]") {
  const Tensor x = f64({2, 3, 4, 5}, 3);
  const Tensor a = nn::Flatten()(x);
  CHECK(a.sizes() == Shape{2, 60});
  CHECK(test::read(a) == test::read(x));
  CHECK(nn::Flatten(1, 2)(x).sizes() == Shape{2, 12, 5});
  CHECK(nn::Flatten(nn::FlattenOptions().start_dim(0).end_dim(1))(x).sizes() == Shape{6, 4, 5});
  CHECK(F::flatten(x).sizes() == Shape{120});
  // Gradient flows back through the view.
  CHECK_GRADCHECK([](const std::vector<Tensor>& t) { return nn::Flatten()(t[0]) * 2.0; },
                  (std::vector<Tensor>{leaf(f64({2, 2, 3}, 4))}));
  CHECK_ERROR(nn::Flatten(3, 1)(x), Contains("Flatten") && Contains("[2, 3, 4, 5]"));
  CHECK_ERROR(nn::Flatten(1, 7)(x), Contains("Flatten"));
}

TEST_CASE("LayerNorm matches a float64 reference and its gradients", "[nn][layers][layernorm]") {
  // Reference: over the trailing `inner` elements of each row.
  const auto ref = [](const Vec& x, const Vec& w, const Vec& b, int64_t inner, double eps) {
    Vec y(x.size());
    for (size_t r = 0; r < x.size() / inner; ++r) {
      double mu = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mu += x[r * inner + i];
      mu /= inner;
      for (int64_t i = 0; i < inner; ++i) var += (x[r * inner + i] - mu) * (x[r * inner + i] - mu);
      var /= inner;
      for (int64_t i = 0; i < inner; ++i) {
        double v = (x[r * inner + i] - mu) / std::sqrt(var + eps);
        if (!w.empty()) v = v * w[i] + b[i];
        y[r * inner + i] = v;
      }
    }
    return y;
  };
  const Tensor x = f64({3, 4, 5}, 8, -2, 3);

  nn::LayerNorm ln(5);
  ln->to(kFloat64);
  CHECK(test::read(ln->weight) == Vec(5, 1.0));
  CHECK(test::read(ln->bias) == Vec(5, 0.0));
  {
    NoGradGuard g;
    ln->weight.copy_(f64({5}, 9));
    ln->bias.copy_(f64({5}, 10));
  }
  CHECK_VALUES(ln(x), ref(test::read(x), test::read(ln->weight), test::read(ln->bias), 5, 1e-5),
               1e-10, 1e-12);

  // Two normalized dims, no affine parameters, another eps.
  nn::LayerNorm ln2(nn::LayerNormOptions({4, 5}).eps(1e-3).elementwise_affine(false));
  CHECK(ln2->parameters().empty());
  CHECK_VALUES(ln2(x), ref(test::read(x), {}, {}, 20, 1e-3), 1e-10, 1e-12);
  CHECK_VALUES(ln2(x.to(kFloat32)), ref(test::read(x), {}, {}, 20, 1e-3), 1e-4, 1e-5);

  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& t) { return F::layer_norm(t[0], {4}, t[1], t[2], 1e-5); },
      (std::vector<Tensor>{leaf(f64({3, 4}, 12)), leaf(f64({4}, 13)), leaf(f64({4}, 14))}));
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return F::layer_norm(t[0], {2, 3});
      },
      (std::vector<Tensor>{leaf(f64({2, 2, 3}, 15))}));

  CHECK_ERROR(ln(f64({3, 4}, 1)), Contains("LayerNorm") && Contains("[3, 4]") && Contains("[5]"));
  CHECK_ERROR(ln(zeros({2, 5}, kInt64)), Contains("LayerNorm") && Contains("int64"));
  CHECK_ERROR(F::layer_norm(x, {5}, zeros({4}, kFloat64)),
              Contains("layer_norm") && Contains("weight") && Contains("[4]"));
  CHECK_ERROR(nn::LayerNorm(nn::LayerNormOptions({0})), Contains("LayerNorm"));
}

TEST_CASE("Embedding picks rows and accumulates gradients into them", "[nn][layers][embedding]") {
  nn::Embedding emb(6, 3);
  CHECK(emb->weight.sizes() == Shape{6, 3});
  emb->to(kFloat64);
  const std::vector<int64_t> idx = {5, 0, 2, 2, 5, 5};
  const Tensor indices = i64(idx, {2, 3});
  const Tensor y = emb(indices);
  REQUIRE(y.sizes() == Shape{2, 3, 3});
  const Vec w = test::read(emb->weight);
  Vec ref;
  for (int64_t i : idx)
    for (int d = 0; d < 3; ++d) ref.push_back(w[i * 3 + d]);
  CHECK(test::read(y) == ref);

  // Repeated indices add up: d(sum y)/dW[row] = count(row).
  y.sum().backward();
  const Vec g = test::read(emb->weight.grad());
  const double counts[6] = {1, 0, 2, 0, 0, 3};
  for (int r = 0; r < 6; ++r)
    for (int d = 0; d < 3; ++d) CHECK(g[r * 3 + d] == counts[r]);

  CHECK_GRADCHECK([&](const std::vector<Tensor>& t) { return F::embedding(indices, t[0]) * 1.5; },
                  (std::vector<Tensor>{leaf(f64({6, 3}, 21))}));
  // int32 indices and 0-dim indices.
  CHECK(test::read(emb(indices.to(kInt32))) == ref);
  CHECK(emb(i64({4}, {})).sizes() == Shape{3});

  CHECK_ERROR(emb(zeros({2})), Contains("Embedding") && Contains("float32") && Contains("[2]"));
  CHECK_ERROR(emb(i64({1, 6}, {2})), Contains("Embedding"));
  CHECK_ERROR(emb(i64({-1}, {1})), Contains("Embedding"));
}

TEST_CASE("Embedding padding_idx: a zero row at init that never receives a gradient",
          "[nn][layers][embedding]") {
  nn::Embedding emb(nn::EmbeddingOptions(5, 3).padding_idx(-1));  // row 4
  emb->to(kFloat64);
  CHECK(test::read(emb->weight.select(0, 4)) == Vec(3, 0.0));
  CHECK(test::read(emb->weight.select(0, 1)) != Vec(3, 0.0));
  {
    NoGradGuard no_grad;  // as in PyTorch, the row is looked up as it is, whatever it holds
    emb->weight.select(0, 4).fill_(2.0);
  }
  const Tensor indices = i64({4, 1, 4, 3}, {2, 2});
  const Tensor y = emb(indices);
  const Vec w = test::read(emb->weight);
  Vec ref;
  for (int64_t i : {4, 1, 4, 3})
    for (int d = 0; d < 3; ++d) ref.push_back(w[i * 3 + d]);
  CHECK(test::read(y) == ref);
  y.sum().backward();
  const Vec g = test::read(emb->weight.grad());
  const double counts[5] = {0, 1, 0, 1, 0};  // row 4 was read twice, but gets nothing
  for (int r = 0; r < 5; ++r)
    for (int d = 0; d < 3; ++d) CHECK(g[r * 3 + d] == counts[r]);
  std::ostringstream os;
  os << *emb;
  CHECK(os.str() == "Embedding(5, 3, padding_idx=4)");
  CHECK_ERROR(nn::Embedding(nn::EmbeddingOptions(5, 3).padding_idx(5)),
              Contains("Embedding: padding_idx must be in [-5, 5)") && Contains("got 5"));
}

TEST_CASE("Embedding's default init is N(0, 1)", "[nn][layers][embedding][init]") {
  manual_seed(5);
  nn::Embedding emb(100, 100);
  const Stats s = stats_of(test::read(emb->weight));
  CHECK(std::fabs(s.mean) < 0.05);  // sd of the mean: 0.01
  CHECK(s.var == Approx(1.0).epsilon(0.05));
}

TEST_CASE("init functions fill in place with the documented bounds", "[nn][init]") {
  manual_seed(3);
  Tensor w = empty({200, 300});
  nn::init::xavier_uniform_(w);
  const double xb = std::sqrt(6.0 / 500);
  Stats s = stats_of(test::read(w));
  CHECK(s.lo >= -xb);
  CHECK(s.hi <= xb);
  CHECK(s.var == Approx(xb * xb / 3).epsilon(0.03));

  nn::init::kaiming_uniform_(w);  // a = 0: gain sqrt(2), bound sqrt(6 / fan_in)
  const double kb = std::sqrt(6.0 / 300);
  s = stats_of(test::read(w));
  CHECK(s.lo >= -kb);
  CHECK(s.hi <= kb);
  CHECK(s.hi > 0.99 * kb);

  nn::init::kaiming_normal_(w, 0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
  s = stats_of(test::read(w));
  CHECK(s.var == Approx(2.0 / 200).epsilon(0.03));

  nn::init::normal_(w, 2.0, 0.5);
  s = stats_of(test::read(w));
  CHECK(s.mean == Approx(2.0).epsilon(0.01));
  CHECK(s.var == Approx(0.25).epsilon(0.03));

  nn::init::uniform_(w, -3, -1);
  s = stats_of(test::read(w));
  CHECK(s.lo >= -3);
  CHECK(s.hi <= -1);

  nn::init::constant_(w, 0.25);
  CHECK(test::read(w) == Vec(60000, 0.25));
  nn::init::ones_(w);
  CHECK(test::read(w) == Vec(60000, 1.0));
  nn::init::zeros_(w);
  CHECK(test::read(w) == Vec(60000, 0.0));

  // Conv-like weights: fans include the receptive field.
  const auto [fan_in, fan_out] = nn::init::calculate_fan_in_and_fan_out(empty({8, 4, 3, 3}));
  CHECK(fan_in == 36);
  CHECK(fan_out == 72);
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::Tanh) == Approx(5.0 / 3));

  // A parameter stays a leaf after init, and init does not count as a use of it.
  Tensor p = empty({4, 4});
  p.requires_grad_(true);
  nn::init::xavier_uniform_(p);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());

  CHECK_ERROR(nn::init::xavier_uniform_(empty({5})), Contains("[5]"));
  CHECK_ERROR(nn::init::uniform_(empty({5}, kInt64)), Contains("uniform_") && Contains("int64"));
  CHECK_ERROR(nn::init::normal_(empty({5}), 0, -1), Contains("normal_"));
}
