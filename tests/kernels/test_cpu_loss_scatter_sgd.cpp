// CPU behaviour of cross_entropy_backward, scatter_add and sgd_update beyond what the op-table
// sweep checks: out-of-range targets and indices throw naming the op and the value and leave the
// output untouched, scatter_add overwrites an output that already holds values, and sgd_update
// reads its hyperparameters and step count from their tensors on every call.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "test_util.h"

using Catch::Matchers::Contains;

namespace ember {
namespace {

using test::read;

Tensor int64s(const std::vector<int64_t>& v, const Shape& s) {
  return from_vector(v, s, TensorOptions(kInt64));
}

Attrs ce_attrs(int64_t ignore_index, double smoothing) {
  Attrs a;
  a.ignore_index = ignore_index;
  a.label_smoothing = smoothing;
  return a;
}

TEST_CASE("cross_entropy_backward rejects out-of-range targets before writing", "[loss]") {
  const Tensor x = randn({4, 5}), g = randn({4});
  const Tensor out = full({4, 5}, 3.0f);
  const Attrs a = ce_attrs(-100, 0.1);
  REQUIRE_THROWS_WITH(dispatch(OpId::cross_entropy_backward, {g, x, int64s({0, 5, 2, 1}, {4})}, a),
                      Contains("cross_entropy: target 5 (sample 1) is out of range for 5 classes"));
  REQUIRE_THROWS_WITH(
      dispatch(OpId::cross_entropy_backward, {g, x, int64s({0, 1, 2, -1}, {4})}, a, &out),
      Contains("cross_entropy: target -1 (sample 3)"));
  for (double v : read(out)) REQUIRE(v == 3.0);
  // The smoothed forward checks the same way.
  REQUIRE_THROWS_WITH(dispatch(OpId::cross_entropy, {x, int64s({0, 1, 7, 1}, {4})}, a),
                      Contains("cross_entropy: target 7"));
}

TEST_CASE("cross_entropy_backward zeroes ignored rows and sums to zero elsewhere", "[loss]") {
  // Each non-ignored row of (softmax - (1 - e) onehot - e/C) sums to 1 - (1 - e) - e = 0.
  const Tensor x = randn({5, 7}, TensorOptions(kFloat64)), g = randn({5}, TensorOptions(kFloat64));
  const Tensor t = int64s({3, 1, 3, 6, 0}, {5});
  const Tensor dx = dispatch(OpId::cross_entropy_backward, {g, x, t}, ce_attrs(3, 0.4));
  const std::vector<double> v = read(dx);
  for (int64_t i = 0; i < 5; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 7; ++j) {
      const double e = v[static_cast<size_t>(i * 7 + j)];
      if (i == 0 || i == 2) REQUIRE(e == 0.0);
      s += e;
    }
    REQUIRE(std::fabs(s) < 1e-12);
  }
}

TEST_CASE("cross_entropy_backward is the derivative of the smoothed forward", "[loss]") {
  // Central differences of sum_i grad_i loss_i in float64.
  const int64_t N = 3, C = 6;
  const Tensor x = randn({N, C}, TensorOptions(kFloat64)), g = randn({N}, TensorOptions(kFloat64));
  const Tensor t = int64s({4, 0, 5}, {N});
  const Attrs a = ce_attrs(-100, 0.15);
  const std::vector<double> dx = read(dispatch(OpId::cross_entropy_backward, {g, x, t}, a));
  const std::vector<double> xv = read(x), gv = read(g);
  auto f = [&](const std::vector<double>& xs) {
    const Tensor l = dispatch(OpId::cross_entropy, {test::make(xs, {N, C}, kFloat64), t}, a);
    const std::vector<double> lv = read(l);
    double s = 0;
    for (int64_t i = 0; i < N; ++i) s += gv[static_cast<size_t>(i)] * lv[static_cast<size_t>(i)];
    return s;
  };
  const double h = 1e-6;
  for (size_t k = 0; k < xv.size(); ++k) {
    std::vector<double> up = xv, dn = xv;
    up[k] += h;
    dn[k] -= h;
    const double fd = (f(up) - f(dn)) / (2 * h);
    INFO("element " << k);
    REQUIRE(std::fabs(fd - dx[k]) < 1e-7);
  }
}

TEST_CASE("scatter_add rejects out-of-range indices before writing", "[index]") {
  const Tensor src = randn({2, 3});
  const Tensor out = full({4, 3}, 2.0f);
  Attrs a;
  a.dim = 0;
  a.shape = {4, 3};
  REQUIRE_THROWS_WITH(dispatch(OpId::scatter_add, {src, int64s({0, 1, 4, 3, 3, 0}, {2, 3})}, a),
                      Contains("scatter_add: index 4 is out of range for dim 0 of size 4"));
  REQUIRE_THROWS_WITH(
      dispatch(OpId::scatter_add, {src, int64s({0, 1, 2, -1, 3, 0}, {2, 3})}, a, &out),
      Contains("scatter_add: index -1"));
  for (double v : read(out)) REQUIRE(v == 2.0);
}

TEST_CASE("scatter_add overwrites an output that holds values", "[index]") {
  const Tensor src = from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor idx = int64s({1, 0, 1, 1, 1, 0}, {2, 3});
  Attrs a;
  a.dim = 1;
  a.shape = {2, 2};
  const Tensor out = full({2, 2}, 100, TensorOptions(kInt32));
  dispatch(OpId::scatter_add, {src, idx}, a, &out);
  REQUIRE(read(out) == std::vector<double>{2, 4, 6, 9});
}

TEST_CASE("sgd_update reads its hyperparameters and step from their tensors each call", "[optim]") {
  const Tensor p = from_vector(std::vector<float>{1, -2}, {2});
  const Tensor g = from_vector(std::vector<float>{0.5f, 0.25f}, {2});
  const Tensor buf = from_vector(std::vector<float>{9, 9}, {2});
  const Tensor hyper = from_vector(std::vector<float>{0.5f, 0.5f, 0.0f, 0.0f}, {4});
  Tensor step = zeros({});
  Attrs a;
  a.num_tensors = 1;
  a.momentum_buffers = true;
  // step 0: buf = g; p -= 0.5 * buf.
  dispatch(OpId::sgd_update, {hyper, step, p, g, buf}, a);
  REQUIRE(read(buf) == std::vector<double>{0.5, 0.25});
  REQUIRE(read(p) == std::vector<double>{0.75, -2.125});
  // step 1 with lr changed in place to 0: the buffer moves, the parameter does not.
  step.fill_(1);
  hyper.narrow(0, 0, 1).fill_(0.0);
  dispatch(OpId::sgd_update, {hyper, step, p, g, buf}, a);
  REQUIRE(read(buf) == std::vector<double>{0.75, 0.375});
  REQUIRE(read(p) == std::vector<double>{0.75, -2.125});
}

}  // namespace
}  // namespace ember
