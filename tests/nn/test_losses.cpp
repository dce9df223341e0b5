// Losses against float64 references written here (plain loops), gradients against finite
// differences, reductions, ignore_index, label smoothing, and bad-input errors.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "nn/loss.h"
#include "nn_test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using nntest::f64;
using nntest::f64v;
using nntest::i64;
using nntest::Vec;
namespace F = ember::nn::functional;
using nn::Reduction;

namespace {

Tensor leaf(Tensor t) {
  t.requires_grad_(true);
  return t;
}

// x laid out [N, C, D] (D = 1 for [N, C]); targets [N, D]. Per-sample losses in (n, d) order.
Vec ce_ref(const Vec& x, const std::vector<int64_t>& t, int64_t C, int64_t D, int64_t ignore,
           double smoothing) {
  const int64_t N = static_cast<int64_t>(t.size()) / D;
  Vec per;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t target = t[n * D + d];
      if (target == ignore) {
        per.push_back(0);
        continue;
      }
      const auto at = [&](int64_t c) { return x[(n * C + c) * D + d]; };
      double mx = -INFINITY, s = 0, total = 0;
      for (int64_t c = 0; c < C; ++c) mx = std::max(mx, at(c));
      for (int64_t c = 0; c < C; ++c) s += std::exp(at(c) - mx), total += at(c);
      const double lse = mx + std::log(s);
      per.push_back(lse - (1 - smoothing) * at(target) - smoothing / C * total);
    }
  return per;
}

Vec nll_ref(const Vec& x, const std::vector<int64_t>& t, int64_t C, int64_t D, int64_t ignore) {
  const int64_t N = static_cast<int64_t>(t.size()) / D;
  Vec per;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t target = t[n * D + d];
      per.push_back(target == ignore ? 0 : -x[(n * C + target) * D + d]);
    }
  return per;
}

// Mean over the counted (non-ignored) entries, or the sum.
double reduce_ref(const Vec& per, const std::vector<int64_t>& t, int64_t ignore, Reduction r) {
  double s = 0;
  int64_t count = 0;
  for (size_t i = 0; i < per.size(); ++i) {
    s += per[i];
    count += t[i] != ignore;
  }
  return r == Reduction::Sum ? s : s / static_cast<double>(count);
}

double log1pexp_ref(double z) {  // log(1 + e^z), stable
  return std::max(z, 0.0) + std::log1p(std::exp(-std::fabs(z)));
}

}  // namespace

TEST_CASE("CrossEntropyLoss matches a float64 reference for every reduction",
          "[nn][loss][cross_entropy]") {
  const Tensor x = f64({5, 4}, 31, -3, 3);
  const std::vector<int64_t> tv = {0, 3, 1, 2, 3};
  const Tensor t = i64(tv, {5});
  const Vec per = ce_ref(test::read(x), tv, 4, 1, -100, 0);

  CHECK_VALUES(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().reduction(Reduction::None))(x, t),
               per, 1e-12, 1e-14);
  CHECK_VALUES(F::cross_entropy(x, t, nn::CrossEntropyLossOptions().reduction(Reduction::Sum)),
               Vec{reduce_ref(per, tv, -100, Reduction::Sum)}, 1e-12, 0);
  nn::CrossEntropyLoss criterion;
  const Tensor loss = criterion(x, t);
  CHECK(loss.dim() == 0);
  CHECK_VALUES(loss, Vec{reduce_ref(per, tv, -100, Reduction::Mean)}, 1e-12, 0);

  // float32 logits against the same reference.
  CHECK_VALUES(criterion(x.to(kFloat32), t), Vec{reduce_ref(per, tv, -100, Reduction::Mean)}, 1e-5,
               1e-6);
  // int32 targets are accepted.
  CHECK_VALUES(criterion(x, t.to(kInt32)), Vec{reduce_ref(per, tv, -100, Reduction::Mean)}, 1e-12,
               0);
}

TEST_CASE("CrossEntropyLoss: ignore_index and label smoothing", "[nn][loss][cross_entropy]") {
  const Tensor x = f64({6, 5}, 32, -2, 2);
  const Vec xv = test::read(x);
  for (const int64_t ignore : {int64_t{-100}, int64_t{2}}) {
    for (const double eps : {0.0, 0.1, 1.0}) {
      INFO("ignore_index " << ignore << ", label_smoothing " << eps);
      const std::vector<int64_t> tv = {1, ignore, 4, 0, ignore, 3};
      const Tensor t = i64(tv, {6});
      const Vec per = ce_ref(xv, tv, 5, 1, ignore, eps);
      auto opts = nn::CrossEntropyLossOptions().ignore_index(ignore).label_smoothing(eps);
      CHECK_VALUES(F::cross_entropy(x, t, opts.reduction(Reduction::None)), per, 1e-12, 1e-14);
      CHECK_VALUES(F::cross_entropy(x, t, opts.reduction(Reduction::Sum)),
                   Vec{reduce_ref(per, tv, ignore, Reduction::Sum)}, 1e-12, 0);
      // Mean divides by the 4 counted samples, not 6.
      CHECK_VALUES(F::cross_entropy(x, t, opts.reduction(Reduction::Mean)),
                   Vec{reduce_ref(per, tv, ignore, Reduction::Mean)}, 1e-12, 0);
      CHECK_GRADCHECK(
          [&](const std::vector<Tensor>& in) {
            return F::cross_entropy(in[0], t, opts.reduction(Reduction::Mean));
          },
          (std::vector<Tensor>{leaf(x.clone())}));
    }
  }
  // Every target ignored: the mean is 0/0 = NaN, as in PyTorch.
  const Tensor all_ignored = i64({-100, -100}, {2});
  CHECK(std::isnan(F::cross_entropy(f64({2, 3}, 1), all_ignored).item<double>()));
}

TEST_CASE("CrossEntropyLoss over [N, C, d] and [C] inputs", "[nn][loss][cross_entropy]") {
  // [N=2, C=3, D=4] with targets [2, 4]: the class dim is dim 1.
  const Tensor x = f64({2, 3, 4}, 33, -2, 2);
  const std::vector<int64_t> tv = {0, 2, 1, 1, 2, -100, 0, 1};
  const Tensor t = i64(tv, {2, 4});
  const Vec per = ce_ref(test::read(x), tv, 3, 4, -100, 0.2);
  const auto opts = nn::CrossEntropyLossOptions().label_smoothing(0.2);
  const Tensor none =
      F::cross_entropy(x, t, nn::CrossEntropyLossOptions(opts).reduction(Reduction::None));
  CHECK(none.sizes() == Shape{2, 4});
  CHECK_VALUES(none, per, 1e-12, 1e-14);
  CHECK_VALUES(F::cross_entropy(x, t, opts), Vec{reduce_ref(per, tv, -100, Reduction::Mean)}, 1e-12,
               0);
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], t, opts); },
                  (std::vector<Tensor>{leaf(x.clone())}));

  // A single sample: [C] logits, 0-dim target.
  const Tensor x1 = f64({4}, 34);
  const Tensor t1 = i64({2}, {});
  const Vec per1 = ce_ref(test::read(x1), {2}, 4, 1, -100, 0);
  const Tensor l1 =
      F::cross_entropy(x1, t1, nn::CrossEntropyLossOptions().reduction(Reduction::None));
  CHECK(l1.dim() == 0);
  CHECK_VALUES(l1, per1, 1e-12, 0);
  CHECK_VALUES(F::cross_entropy(x1, t1), per1, 1e-12, 0);
}

TEST_CASE("CrossEntropyLoss rejects bad input with the loss name and shapes",
          "[nn][loss][cross_entropy][errors]") {
  nn::CrossEntropyLoss criterion;
  const Tensor x = zeros({4, 5});
  CHECK_ERROR(criterion(x, zeros({4})),
              Contains("CrossEntropyLoss") && Contains("float32") && Contains("class indices"));
  CHECK_ERROR(criterion(x, i64({0, 1, 2}, {3})), Contains("CrossEntropyLoss") && Contains("[3]") &&
                                                     Contains("[4, 5]") && Contains("[4]"));
  CHECK_ERROR(criterion(x, i64({0, 1, 2, 3}, {2, 2})),
              Contains("CrossEntropyLoss") && Contains("[2, 2]"));
  CHECK_ERROR(criterion(zeros({4, 5}, kInt64), i64({0, 1, 2, 3}, {4})),
              Contains("CrossEntropyLoss") && Contains("int64") && Contains("floating"));
  CHECK_ERROR(criterion(x, i64({0, 1, 7, 3}, {4})), Contains("CrossEntropyLoss") && Contains("7"));
  CHECK_ERROR(criterion(x, i64({0, -1, 2, 3}, {4})), Contains("CrossEntropyLoss"));
  CHECK_ERROR(criterion(zeros({}), i64({0}, {})), Contains("CrossEntropyLoss"));
  CHECK_ERROR(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().label_smoothing(1.5)),
              Contains("CrossEntropyLoss") && Contains("1.5"));
  CHECK_ERROR(F::cross_entropy(x, zeros({4})), Contains("cross_entropy") && Contains("float32"));
}

TEST_CASE("NLLLoss matches a float64 reference and its gradients", "[nn][loss][nll]") {
  const Tensor x = f64({5, 4}, 41, -4, 0);  // log-probabilities need not be normalized here
  const Vec xv = test::read(x);
  const std::vector<int64_t> tv = {3, -100, 0, 2, 1};
  const Tensor t = i64(tv, {5});
  const Vec per = nll_ref(xv, tv, 4, 1, -100);
  CHECK_VALUES(F::nll_loss(x, t, nn::NLLLossOptions().reduction(Reduction::None)), per, 0, 0);
  CHECK_VALUES(F::nll_loss(x, t, nn::NLLLossOptions().reduction(Reduction::Sum)),
               Vec{reduce_ref(per, tv, -100, Reduction::Sum)}, 1e-14, 0);
  nn::NLLLoss criterion;
  CHECK_VALUES(criterion(x, t), Vec{reduce_ref(per, tv, -100, Reduction::Mean)}, 1e-14, 0);

  // Custom ignore_index and the [N, C, d] layout.
  const Tensor x3 = f64({2, 3, 2}, 42);
  const std::vector<int64_t> tv3 = {0, 2, 1, 1};
  const Tensor t3 = i64(tv3, {2, 2});
  const auto opts = nn::NLLLossOptions().ignore_index(1);
  const Vec per3 = nll_ref(test::read(x3), tv3, 3, 2, 1);
  CHECK_VALUES(F::nll_loss(x3, t3, opts), Vec{reduce_ref(per3, tv3, 1, Reduction::Mean)}, 1e-14, 0);

  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return criterion(in[0], t); },
                  (std::vector<Tensor>{leaf(x.clone())}));
  CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return F::nll_loss(in[0], t3, opts); },
                  (std::vector<Tensor>{leaf(x3.clone())}));

  // With log_softmax in front it is the cross entropy.
  const Tensor logits = f64({5, 4}, 43);
  CHECK(allclose(F::nll_loss(F::log_softmax(logits, 1), t), F::cross_entropy(logits, t), 1e-12,
                 1e-14));

  CHECK_ERROR(criterion(x, zeros({5})), Contains("NLLLoss") && Contains("float32"));
  CHECK_ERROR(criterion(x, i64({0, 1}, {2})),
              Contains("NLLLoss") && Contains("[2]") && Contains("[5, 4]"));
  CHECK_ERROR(criterion(x, i64({0, 1, 4, 0, 0}, {5})), Contains("NLLLoss"));
}

TEST_CASE("MSELoss matches a float64 reference and its gradients", "[nn][loss][mse]") {
  const Tensor a = f64({3, 4}, 51), b = f64({3, 4}, 52);
  const Vec av = test::read(a), bv = test::read(b);
  Vec sq;
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    sq.push_back((av[i] - bv[i]) * (av[i] - bv[i]));
    s += sq.back();
  }
  CHECK_VALUES(nn::MSELoss(Reduction::None)(a, b), sq, 1e-15, 0);
  CHECK_VALUES(nn::MSELoss(Reduction::Sum)(a, b), Vec{s}, 1e-14, 0);
  CHECK_VALUES(nn::MSELoss()(a, b), Vec{s / 12}, 1e-14, 0);
  CHECK_VALUES(F::mse_loss(a.to(kFloat32), b.to(kFloat32)), Vec{s / 12}, 1e-5, 1e-7);
  CHECK_GRADCHECK([](const std::vector<Tensor>& in) { return F::mse_loss(in[0], in[1]); },
                  (std::vector<Tensor>{leaf(a.clone()), leaf(b.clone())}));

  CHECK_ERROR(nn::MSELoss()(a, zeros({4}, kFloat64)),
              Contains("MSELoss") && Contains("[3, 4]") && Contains("[4]"));
  CHECK_ERROR(F::mse_loss(zeros({2}, kInt64), zeros({2}, kInt64)),
              Contains("mse_loss") && Contains("int64"));
}

TEST_CASE("BCEWithLogitsLoss is stable and matches a float64 reference", "[nn][loss][bce]") {
  const Vec xv = {-1000, -30, -2.5, -0.3, 0, 0.4, 3, 40, 1000, 0.01, -5, 7};
  const Vec yv = {0, 1, 0.2, 1, 0.5, 0, 1, 0, 1, 0.7, 0.3, 1};
  const Tensor x = f64v(xv, {3, 4}), y = f64v(yv, {3, 4});
  Vec per;
  for (size_t i = 0; i < xv.size(); ++i) per.push_back(log1pexp_ref(xv[i]) - xv[i] * yv[i]);
  // log(1 + e) instead of log1p(e) costs up to ~1e-16 absolute in float64.
  CHECK_VALUES(
      nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions().reduction(Reduction::None))(x, y), per,
      1e-12, 1e-15);
  double s = 0;
  for (double v : per) s += v;
  CHECK_VALUES(nn::BCEWithLogitsLoss()(x, y), Vec{s / 12}, 1e-12, 0);
  // Float32 stays finite at +-1000 and accurate.
  const Tensor l32 = F::binary_cross_entropy_with_logits(
      x.to(kFloat32), y.to(kFloat32), nn::BCEWithLogitsLossOptions().reduction(Reduction::None));
  CHECK_VALUES(l32, per, 1e-5, 1e-6);

  // pos_weight per class (last dim) and a per-element weight.
  const Tensor pw = f64v({0.5, 2, 3, 1}, {4});
  const Tensor w = f64v({1, 0.5, 2, 0}, {4});
  Vec perw;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double p = test::read(pw)[i % 4], ww = test::read(w)[i % 4];
    const double lw = 1 + (p - 1) * yv[i];
    perw.push_back(ww * ((1 - yv[i]) * xv[i] + lw * log1pexp_ref(-xv[i])));
  }
  nn::BCEWithLogitsLoss weighted(
      nn::BCEWithLogitsLossOptions().pos_weight(pw).weight(w).reduction(Reduction::None));
  CHECK(weighted->buffers().size() == 2);
  CHECK_VALUES(weighted(x, y), perw, 1e-12, 1e-13);

  // Gradients: smooth everywhere, logit 0 included (d/dx = sigmoid(x) - y there too).
  const Tensor xs = f64v({-3, -0.5, 0, 0.5, 2, 0}, {2, 3}),
               ys = f64v({0, 1, 0.3, 0.5, 1, 1}, {2, 3});
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return F::binary_cross_entropy_with_logits(in[0], in[1]);
      },
      (std::vector<Tensor>{leaf(xs.clone()), leaf(ys.clone())}));
  CHECK_GRADCHECK(
      [&](const std::vector<Tensor>& in) {
        return F::binary_cross_entropy_with_logits(
            in[0], ys, nn::BCEWithLogitsLossOptions().pos_weight(f64v({2, 0.5, 1}, {3})));
      },
      (std::vector<Tensor>{leaf(xs.clone())}));
  const Tensor z = leaf(zeros({4}, kFloat64));
  const Vec yz = {0, 0.25, 1, 0.5};
  F::binary_cross_entropy_with_logits(z, f64v(yz, {4}),
                                      nn::BCEWithLogitsLossOptions().reduction(Reduction::Sum))
      .backward();
  CHECK_VALUES(z.grad(), (Vec{0.5, 0.25, -0.5, 0}), 1e-15, 1e-15);

  CHECK_ERROR(nn::BCEWithLogitsLoss()(x, zeros({4}, kFloat64)),
              Contains("BCEWithLogitsLoss") && Contains("[3, 4]") && Contains("[4]"));
  CHECK_ERROR(nn::BCEWithLogitsLoss()(x, zeros({3, 4}, kInt64)),
              Contains("BCEWithLogitsLoss") && Contains("int64"));
  CHECK_ERROR(nn::BCEWithLogitsLoss(nn::BCEWithLogitsLossOptions().pos_weight(zeros({3})))(x, y),
              Contains("BCEWithLogitsLoss") && Contains("pos_weight") && Contains("[3]"));
}
