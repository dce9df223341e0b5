// Bad input of every class throws ember::Error (never crashes), and the message names the op and
// the offending shapes / dtypes / devices / values.
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

// The message of the ember::Error `f` throws; a failure (and "") if it throws nothing or
// something else.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a non-ember exception: " << e.what());
    return "";
  }
  FAIL_CHECK("did not throw");
  return "";
}

Tensor i64(const std::vector<double>& v, const Shape& s, Device d = Device::cpu()) {
  return test::make(v, s, kInt64, d);
}

}  // namespace

#define CHECK_ERROR(expr, matcher) CHECK_THAT(error_of([&] { (void)(expr); }), matcher)

TEST_CASE("shape mismatches name the op and both shapes", "[errors]") {
  const Tensor a = zeros({2, 3}), b = zeros({4});
  CHECK_ERROR(add(a, b), Contains("add") && Contains("[2, 3]") && Contains("[4]"));
  CHECK_ERROR(a + b, Contains("add") && Contains("[2, 3]") && Contains("[4]"));
  CHECK_ERROR(sub(a, b), Contains("sub") && Contains("[2, 3]"));
  CHECK_ERROR(mul(b, a), Contains("mul") && Contains("[2, 3]"));
  CHECK_ERROR(maximum(a, b), Contains("maximum"));
  CHECK_ERROR(lt(a, b), Contains("lt"));
  CHECK_ERROR(where(ones({3}, kBool), a, b), Contains("where"));
  CHECK_ERROR(mm(zeros({2, 3}), zeros({4, 5})),
              Contains("mm") && Contains("[2, 3]") && Contains("[4, 5]"));
  CHECK_ERROR(mm(zeros({3}), zeros({3, 2})), Contains("mm") && Contains("[3]"));
  CHECK_ERROR(bmm(zeros({2, 3, 4}), zeros({3, 4, 5})),
              Contains("bmm") && Contains("[2, 3, 4]") && Contains("[3, 4, 5]"));
  CHECK_ERROR(matmul(zeros({2, 3}), zeros({2, 3})), Contains("[2, 3]"));
  CHECK_ERROR(linear(zeros({2, 3}), zeros({4, 5})), Contains("[2, 3]") || Contains("[4, 5]"));
  CHECK_ERROR(cat({zeros({2, 3}), zeros({2, 4})}, 0),
              Contains("cat") && Contains("[2, 3]") && Contains("[2, 4]"));
  CHECK_ERROR(cat({zeros({2, 3}), zeros({3})}, 0), Contains("cat"));
  CHECK_ERROR(cat({}, 0), Contains("cat"));
  CHECK_ERROR(stack({zeros({2, 3}), zeros({3, 2})}), Contains("stack") || Contains("cat"));
  Tensor dst = zeros({2, 3});
  CHECK_ERROR(dst.copy_(zeros({4})), Contains("copy_") && Contains("[4]"));
  Tensor small = zeros({3});
  // In place: the broadcast result [2, 3] does not fit self [3].
  CHECK_ERROR(small.add_(zeros({2, 3})), Contains("add") && Contains("[2, 3]") && Contains("[3]"));
  CHECK_ERROR(cross_entropy_per_sample(zeros({4, 3}), i64({0, 1, 2}, {3})),
              Contains("cross_entropy") && Contains("[4, 3]") && Contains("[3]"));
  CHECK_ERROR(gather(zeros({3, 4}), 0, i64({0, 1}, {2})), Contains("gather"));
  CHECK_ERROR(index_select(zeros({3, 4}), 0, i64({0, 1, 2, 0}, {2, 2})),
              Contains("index_select") && Contains("[2, 2]"));
  CHECK_ERROR(allclose(zeros({2, 3}), zeros({4})), Contains("[2, 3]") && Contains("[4]"));
  CHECK_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), Contains("from_vector") && Contains("[2, 2]"));
}

TEST_CASE("matrix products refuse operands of two dtypes instead of promoting", "[errors]") {
  // As PyTorch: "expected both operands to have the same dtype"; no silent float64 product.
  const Tensor f = zeros({2, 3}), d = zeros({3, 2}, kFloat64);
  // A macro, not a variable: Catch2 v2's combined matchers keep references to their parts.
#define both (Contains("same dtype") && Contains("float32") && Contains("float64"))
  CHECK_ERROR(mm(f, d), Contains("mm") && both && Contains("[2, 3]") && Contains("[3, 2]"));
  CHECK_ERROR(mm(d, f), Contains("mm") && both);
  CHECK_ERROR(mm(f, zeros({3, 2}, kInt64)), Contains("mm") && Contains("int64"));
  CHECK_ERROR(bmm(zeros({2, 2, 3}), zeros({2, 3, 2}, kFloat64)), Contains("bmm") && both);
  CHECK_ERROR(matmul(zeros({3}), zeros({3}, kFloat64)), Contains("matmul") && both);
  CHECK_ERROR(matmul(zeros({4, 2, 3}), d), Contains("matmul") && both);
  CHECK_ERROR(matmul(zeros({4, 2, 3}), zeros({4, 3, 2}, kFloat64)), Contains("matmul") && both);
  CHECK_ERROR(f.matmul(d), Contains("matmul") && both);
  CHECK_ERROR(linear(zeros({2, 3}, kFloat64), zeros({4, 3})), Contains("linear") && both);
  // Same dtypes still multiply, in that dtype.
  CHECK(mm(d, zeros({2, 5}, kFloat64)).dtype() == kFloat64);
  CHECK(matmul(f, zeros({3, 4})).sizes() == Shape{2, 4});
#undef both
}

TEST_CASE("unsupported dtypes name the op and the dtype", "[errors]") {
  const Tensor b = ones({3}, kBool), i = ones({3}, kInt64), f = ones({3});
  CHECK_ERROR(neg(b), Contains("neg") && Contains("bool"));  // PyTorch refuses -bool too
  CHECK_ERROR(-b, Contains("neg") && Contains("bool"));
  CHECK_ERROR(mean(i), Contains("mean") && Contains("int64"));
  CHECK_ERROR(softmax(ones({2, 3}, kInt32), 1), Contains("softmax") && Contains("int32"));
  CHECK_ERROR(log_softmax(i, 0), Contains("log_softmax") && Contains("int64"));
  CHECK_ERROR(argmax(b), Contains("argmax") && Contains("bool"));
  CHECK_ERROR(amax(b), Contains("amax") && Contains("bool"));
  CHECK_ERROR(one_hot(f, 3), Contains("one_hot") && Contains("float32"));
  CHECK_ERROR(where(f, f, f), Contains("where") && Contains("bool"));
  CHECK_ERROR(cross_entropy_per_sample(zeros({2, 3}, kInt64), i64({0, 1}, {2})),
              Contains("cross_entropy") && Contains("int64"));
  CHECK_ERROR(gather(zeros({2, 3}), 1, zeros({2, 1})), Contains("gather") && Contains("float32"));
  CHECK_ERROR(index_select(zeros({2, 3}), 1, zeros({1})),
              Contains("index_select") && Contains("float32"));
  CHECK_ERROR(rand({2}, kInt64), Contains("rand") && Contains("int64"));
  CHECK_ERROR(randn({2}, kBool), Contains("randn") && Contains("bool"));
  CHECK_ERROR(f.data_ptr<int64_t>(), Contains("data_ptr") && Contains("float32"));
}

TEST_CASE("in-place ops refuse results that cannot be cast into self", "[errors]") {
  Tensor i = ones({3}, kInt32);
  CHECK_ERROR(i.add_(ones({3})), Contains("add_") && Contains("float32") && Contains("int32"));
  CHECK_ERROR(i.mul_(2.5), Contains("mul_") && Contains("float32") && Contains("int32"));
  Tensor b = ones({3}, kBool);
  CHECK_ERROR(b.add_(ones({3}, kInt64)), Contains("add_") && Contains("int64") && Contains("bool"));
  // Nothing was written by the failed calls.
  CHECK(test::read(i) == std::vector<double>({1, 1, 1}));
  CHECK(test::read(b) == std::vector<double>({1, 1, 1}));
}

TEST_CASE("out-of-range dims name the op and the dim", "[errors]") {
  const Tensor x = zeros({2, 3});
  CHECK_ERROR(sum(x, {2}), Contains("sum") && Contains("2"));
  CHECK_ERROR(sum(x, {-3}), Contains("sum") && Contains("-3"));
  CHECK_ERROR(sum(x, {0, 0}), Contains("sum"));
  CHECK_ERROR(mean(x, {5}), Contains("mean") && Contains("5"));
  CHECK_ERROR(argmax(x, 2), Contains("argmax") && Contains("2"));
  CHECK_ERROR(logsumexp(x, {7}), Contains("logsumexp") && Contains("7"));
  CHECK_ERROR(softmax(x, 2), Contains("softmax") && Contains("2"));
  CHECK_ERROR(log_softmax(x, -3), Contains("log_softmax") && Contains("-3"));
  CHECK_ERROR(x.transpose(0, 5), Contains("transpose") && Contains("5"));
  CHECK_ERROR(x.permute({0, 0}), Contains("permute"));
  CHECK_ERROR(x.permute({0}), Contains("permute"));
  CHECK_ERROR(x.size(4), Contains("4"));
  CHECK_ERROR(x.unsqueeze(4), Contains("unsqueeze") && Contains("4"));
  CHECK_ERROR(x.squeeze(2), Contains("squeeze") && Contains("2"));
  CHECK_ERROR(x.flatten(3), Contains("flatten") && Contains("3"));
  CHECK_ERROR(cat({x, x}, 2), Contains("cat") && Contains("2"));
  CHECK_ERROR(gather(x, 2, i64({0, 0, 0, 0, 0, 0}, {2, 3})), Contains("gather") && Contains("2"));
  CHECK_ERROR(index_select(x, -3, i64({0}, {1})), Contains("index_select") && Contains("-3"));
  CHECK_ERROR(x.t().t().select(2, 0), Contains("select") && Contains("2"));
}

TEST_CASE("invalid views, expands and slices", "[errors]") {
  const Tensor x = zeros({2, 3});
  CHECK_ERROR(x.view({4}), Contains("view") && Contains("[4]") && Contains("6"));
  CHECK_ERROR(x.view({-1, -1}), Contains("view"));
  CHECK_ERROR(x.view({4, -1}), Contains("view") && Contains("[4, -1]"));
  CHECK_ERROR(x.reshape({5}), Contains("reshape") && Contains("[5]"));
  // A transpose cannot be flattened without a copy: view says so and names the strides.
  CHECK_ERROR(x.t().view({6}), Contains("view") && Contains("[3, 2]") && Contains("[1, 3]"));
  CHECK_ERROR(zeros({3, 2}).expand({3, 4}),
              Contains("expand") && Contains("[3, 2]") && Contains("[3, 4]"));
  CHECK_ERROR(x.expand({3}), Contains("expand"));
  CHECK_ERROR(x.expand({-1, 2, 3}), Contains("expand"));
  CHECK_ERROR(x.narrow(1, 2, 2), Contains("narrow") && Contains("2"));
  CHECK_ERROR(x.narrow(0, -5, 1), Contains("narrow") && Contains("-5"));
  CHECK_ERROR(x.slice(1, 0, 3, 0), Contains("slice") && Contains("step"));
  CHECK_ERROR(x.slice(1, 0, 3, -1), Contains("slice") && Contains("step"));
  CHECK_ERROR(x.slice(2, 0, 1), Contains("slice") && Contains("2"));
  CHECK_ERROR(zeros({}).slice(0, 0, 1), Contains("slice"));
  CHECK_ERROR(x.select(1, 3), Contains("select") && Contains("3"));
  CHECK_ERROR(x.select(0, -3), Contains("select") && Contains("-3"));
  CHECK_ERROR(x.item<float>(), Contains("item") && Contains("[2, 3]"));
  CHECK_ERROR(zeros({2, -1}), Contains("-1"));
  CHECK_ERROR(zeros({2}).t().t().view({3}), Contains("view"));
}

TEST_CASE("out-of-range indices and classes", "[errors]") {
  const Tensor logits = zeros({2, 3});
  CHECK_ERROR(cross_entropy_per_sample(logits, i64({0, 7}, {2})),
              Contains("cross_entropy") && Contains("7"));
  CHECK_ERROR(cross_entropy_per_sample(logits, i64({-1, 0}, {2})),
              Contains("cross_entropy") && Contains("-1"));
  // ignore_index is only exempt when it is the ignore_index.
  CHECK_ERROR(cross_entropy_per_sample(logits, i64({-100, 0}, {2}), 1),
              Contains("cross_entropy") && Contains("-100"));
  CHECK_NOTHROW(cross_entropy_per_sample(logits, i64({-100, 0}, {2})));
  const Tensor x = zeros({3, 4});
  CHECK_ERROR(gather(x, 0, i64({0, 9}, {1, 2})), Contains("gather") && Contains("9"));
  CHECK_ERROR(gather(x, 1, i64({-1}, {1, 1})), Contains("gather") && Contains("-1"));
  CHECK_ERROR(index_select(x, 1, i64({0, 11}, {2})), Contains("index_select") && Contains("11"));
  CHECK_ERROR(index_select(x, 0, i64({-2}, {1})), Contains("index_select") && Contains("-2"));
  CHECK_ERROR(one_hot(i64({0, 5}, {2}), 3), Contains("one_hot") && Contains("5"));
  CHECK_ERROR(one_hot(i64({-2}, {1}), 3), Contains("one_hot") && Contains("-2"));
  CHECK_ERROR(one_hot(i64({1}, {1}), 0), Contains("one_hot") && Contains("0"));
}

TEST_CASE("bad factory arguments", "[errors]") {
  CHECK_ERROR(randint(5, 5, {3}), Contains("randint") && Contains("5"));
  CHECK_ERROR(randint(5, 2, {3}), Contains("randint"));
  CHECK_ERROR(arange(0, 5, 0), Contains("arange") && Contains("step"));
  CHECK_ERROR(arange(0, 5, -1), Contains("arange"));
  CHECK_ERROR(full({2, -3}, 1.0), Contains("-3"));
  CHECK_ERROR(clamp(zeros({2}), std::nullopt, std::nullopt), Contains("clamp"));
  CHECK_ERROR(Device::parse("gpu"), Contains("gpu"));
  CHECK_ERROR(Device::parse("cuda:x"), Contains("cuda:x"));
  CHECK_ERROR(add(Tensor(), zeros({2})), Contains("add") && Contains("undefined"));
}

TEST_CASE("more than 8 dims is an error, not a crash", "[errors]") {
  CHECK_ERROR(zeros(Shape(std::vector<int64_t>(9, 1))), Contains("8"));
  const Tensor x8 = zeros(Shape(std::vector<int64_t>(8, 1)));
  CHECK(x8.dim() == 8);
  CHECK_ERROR(x8.unsqueeze(0), Contains("unsqueeze") && Contains("8"));
  CHECK_ERROR(add(x8, zeros({2})).unsqueeze(-1), Contains("unsqueeze") && Contains("8"));
  Tensor z;
  CHECK_ERROR(z = stack({x8, x8}), Contains("stack") && Contains("8"));
}

TEST_CASE("CUDA use without a device is an error", "[errors]") {
  if (cuda::is_available()) {
    // A device index past the last device.
    const int n = cuda::device_count();
    CHECK_ERROR(zeros({2}, Device::cuda(n)), Contains("cuda:" + std::to_string(n)));
    return;
  }
  CHECK_ERROR(randn({2}, Device::cuda()), Contains("CUDA", Catch::CaseSensitive::No));
  CHECK_ERROR(zeros({2}, Device::cuda()), Contains("CUDA", Catch::CaseSensitive::No));
  CHECK_ERROR(ones({2}).cuda(), Contains("CUDA", Catch::CaseSensitive::No));
  CHECK_ERROR(to_device(ones({2}), Device::cuda()), Contains("CUDA", Catch::CaseSensitive::No));
  CHECK_ERROR(randint(0, 3, {2}, Device::cuda()), Contains("CUDA", Catch::CaseSensitive::No));
}

TEST_CASE("mixing devices names both devices", "[errors][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Tensor c = ones({3}), g = ones({3}, TensorOptions().device(Device::cuda()));
  CHECK_ERROR(add(c, g), Contains("add") && Contains("cpu") && Contains("cuda:0"));
  CHECK_ERROR(mul(g, c), Contains("mul") && Contains("cpu") && Contains("cuda:0"));
  CHECK_ERROR(mm(zeros({2, 3}), zeros({3, 2}, TensorOptions().device(Device::cuda()))),
              Contains("mm") && Contains("cpu") && Contains("cuda:0"));
  CHECK_ERROR(cat({c, g}), Contains("cat") && Contains("cuda:0"));
  CHECK_ERROR(where(ones({3}, kBool), c, g), Contains("where") && Contains("cuda:0"));
  CHECK_ERROR(gather(g, 0, i64({0}, {1})), Contains("gather") && Contains("cuda:0"));
  // A 0-dim host tensor may join a device op, like a Python number.
  CHECK(test::read(add(g, scalar_tensor(2.0))) == std::vector<double>({3, 3, 3}));
}

TEST_CASE("device-side index errors surface as ember::Error and the context survives",
          "[errors][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device d = Device::cuda();
  const Tensor logits = zeros({4, 3}, TensorOptions().device(d));
  CHECK_ERROR(
      [&] {
        const Tensor l = cross_entropy_per_sample(logits, i64({0, 1, 7, 2}, {4}, d));
        cuda::synchronize();
        return l.cpu();
      }(),
      Contains("cross_entropy"));
  CHECK_ERROR(
      [&] {
        const Tensor r =
            gather(zeros({3, 4}, TensorOptions().device(d)), 0, i64({0, 9}, {1, 2}, d));
        cuda::synchronize();
        return r.cpu();
      }(),
      Contains("gather"));
  CHECK_ERROR(
      [&] {
        const Tensor r = one_hot(i64({0, 5}, {2}, d), 3);
        cuda::synchronize();
        return r.cpu();
      }(),
      Contains("one_hot"));
  // The device still works afterwards.
  const Tensor ok = add(ones({3}, TensorOptions().device(d)), ones({3}, TensorOptions().device(d)));
  CHECK(test::read(ok) == std::vector<double>({2, 2, 2}));
  CHECK(test::read(cross_entropy_per_sample(logits, i64({0, 1, 2, 1}, {4}, d))).size() == 4);
}
