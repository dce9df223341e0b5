// multi_norm beyond the op-table sweep (tests/core/op_trials_reduce.cpp): bad input, NaN, lists
// of mixed dtypes, and on CUDA results that do not depend on where a tensor lies in memory or
// on whether the step is compiled.
#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "test_util.h"
#include "core/host_values.h"

namespace ember {
namespace {

using Catch::Matchers::Contains;

double norm_of(const std::vector<double>& v, double p) {
  double acc = 0;
  for (double x : v) acc = std::isinf(p) ? std::max(acc, std::fabs(x)) : acc + std::pow(std::fabs(x), p);
  return std::isinf(p) ? acc : std::pow(acc, 1 / p);
}

}  // namespace

TEST_CASE("multi_norm rejects bad input, naming the op and what is wrong", "[core][multi_norm]") {
  const Tensor x = test::make({1, 2}, {2}, kFloat32);
  CHECK_THROWS_WITH(multi_norm({}, 2), Contains("multi_norm") && Contains("non-empty"));
  CHECK_THROWS_WITH(multi_norm({x}, 0.5), Contains("multi_norm") && Contains("norm_type") &&
                                              Contains("0.5"));
  CHECK_THROWS_WITH(multi_norm({x}, NAN), Contains("norm_type"));
  CHECK_THROWS_WITH(multi_norm({x}, -INFINITY), Contains("norm_type"));
  const Tensor ints = test::make({1, 2}, {2}, kInt64);
  CHECK_THROWS_WITH(multi_norm({x, ints}, 2),
                    Contains("multi_norm") && Contains("tensor 1") && Contains("int64"));
  CHECK_THROWS_WITH(multi_norm({x, Tensor()}, 2), Contains("multi_norm"));
}

TEST_CASE("multi_norm propagates NaN, widens to float64, and accepts any layout",
          "[core][multi_norm]") {
  const Tensor nan = test::make({1, NAN, 2}, {3}, kFloat32);
  for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
    INFO("p " << p);
    CHECK(std::isnan(test::read(multi_norm({nan}, p))[0]));
  }
  // An infinity gives an infinite norm (no NaN from inf - inf or inf / inf).
  const Tensor inf = test::make({1, INFINITY, -2}, {3}, kFloat32);
  CHECK(std::isinf(test::read(multi_norm({inf}, 2))[0]));
  CHECK(std::isinf(test::read(multi_norm({inf}, INFINITY))[0]));

  const std::vector<double> a = {0.5, -1.25, 3}, b = {1e-3, 2, -7, 0.25}, c = {4, -4};
  const Tensor ta = test::make(a, {3}, kBFloat16), tb = test::make(b, {2, 2}, kFloat64),
               tc = test::make(c, {2}, kFloat16);
  const Tensor n = multi_norm({ta, tb, tc}, 2);
  CHECK(n.dtype() == kFloat64);
  CHECK(n.sizes() == Shape{3});
  const std::vector<double> got = test::read(n);
  CHECK(got[0] == Approx(norm_of(a, 2)).epsilon(1e-15));
  CHECK(got[1] == Approx(norm_of(b, 2)).epsilon(1e-15));
  CHECK(got[2] == Approx(norm_of(c, 2)).epsilon(1e-15));
  CHECK(multi_norm({ta, tc}, 2).dtype() == kFloat32);

  // A 0-dim tensor is one element; an empty one has norm 0 for every p.
  const Tensor scalar = test::make({-3}, {}, kFloat32);
  const Tensor empty = test::make({}, {0, 4}, kFloat32);
  for (double p : {1.0, 2.0, 3.0, double(INFINITY)}) {
    INFO("p " << p);
    CHECK(test::read(multi_norm({scalar, empty}, p)) == std::vector<double>{3, 0});
  }

  // A transposed view: its norm is its elements', whatever the order.
  const Tensor m = test::make({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat32).t();
  CHECK(test::read(multi_norm({m}, 1))[0] == 21);
}

TEST_CASE("multi_norm on CUDA: the same bits wherever the tensor lies, eager and compiled",
          "[core][multi_norm][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  for (DType dt : {kFloat32, kBFloat16, kFloat64}) {
    INFO(dtype_name(dt));
    // Slices at element offsets 1 and 3 are contiguous but not 16-byte aligned: the kernel then
    // loads element by element, and must fold them in the same order as the vector loads.
    const Tensor base = randn({300007}, TensorOptions(kFloat32).device(dev)).to(dt);
    const Tensor small = randn({37, 5}, TensorOptions(kFloat32).device(dev)).to(dt);
    for (int64_t off : {1, 3}) {
      const Tensor view = base.slice(0, off, 300007);
      const Tensor copy = view.clone();
      REQUIRE(view.is_contiguous());
      for (double p : {2.0, 1.0, 3.0, double(INFINITY)}) {
        INFO("offset " << off << ", p " << p);
        const std::vector<double> v = test::read(multi_norm({view, small}, p));
        const std::vector<double> w = test::read(multi_norm({copy, small}, p));
        CHECK(v == w);
        // Against the CPU (another cut and order, also summed in float64).
        const std::vector<double> h = test::read(multi_norm({copy.to(Device::cpu()),
                                                             small.to(Device::cpu())}, p));
        CHECK(v[0] == Approx(h[0]).epsilon(dt == kFloat64 ? 1e-13 : 1e-6));
        CHECK(v[1] == Approx(h[1]).epsilon(dt == kFloat64 ? 1e-13 : 1e-6));
      }
    }
  }
  // Many tensors (two launches), compiled against eager, bit for bit, across replays.
  std::vector<Tensor> ts;
  for (int i = 0; i < 90; ++i)
    ts.push_back(randn({i % 9 + 1, 129}, TensorOptions(kFloat32).device(dev)));
  const std::vector<double> eager = test::read(multi_norm(ts, 2));
  auto norms = jit::compile([&](const Tensor& s) { return multi_norm(ts, 2) * s; },
                            {.mode = jit::Mode::ReduceOverhead, .fullgraph = true});
  const Tensor one = ones({1}, TensorOptions(kFloat32).device(dev));
  for (int r = 0; r < 4; ++r) CHECK(test::read(norms(one)) == eager);
}

}  // namespace ember
