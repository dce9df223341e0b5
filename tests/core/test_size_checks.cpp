// Sizes a user passes in are checked before anything multiplies them: a negative size, or an
// element or byte count past int64, is an ember::Error naming the op and the shape (never a
// wrapped count, a tiny allocation or a negative numel). And the accessors of an undefined
// tensor throw instead of reading through a null handle.
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/ops.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

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

constexpr int64_t k2to32 = int64_t{1} << 32;
constexpr int64_t k2to62 = int64_t{1} << 62;

}  // namespace

#define CHECK_ERROR(expr, matcher) CHECK_THAT(error_of([&] { (void)(expr); }), matcher)

TEST_CASE("factories refuse shapes whose element or byte count overflows int64",
          "[errors][shape]") {
  // 2^62 elements fit in int64, their 2^64 bytes as float32 do not.
  CHECK_ERROR(empty({k2to62}), Contains("empty") && Contains("[4611686018427387904]") &&
                                   Contains("bytes than fit in int64"));
  CHECK_ERROR(empty({k2to62, 2}, kBool),
              Contains("empty") && Contains("[4611686018427387904, 2]") && Contains("elements"));
  // 2^64 elements.
  CHECK_ERROR(zeros({k2to32, k2to32}), Contains("zeros") && Contains("[4294967296, 4294967296]") &&
                                           Contains("more elements than fit in int64"));
  CHECK_ERROR(ones({k2to32, k2to32}), Contains("ones") && Contains("[4294967296, 4294967296]"));
  CHECK_ERROR(full({3, k2to62, 4}, 1.0),
              Contains("full") && Contains("[3, 4611686018427387904, 4]"));
  CHECK_ERROR(from_vector<float>({1, 2}, {k2to32, k2to32}),
              Contains("from_vector") && Contains("[4294967296, 4294967296]"));
  // A zero size does not excuse the others: the strides still multiply them.
  CHECK_ERROR(zeros({0, k2to62, 4}), Contains("zeros") && Contains("[0, 4611686018427387904, 4]"));
  CHECK(zeros({0, k2to32}).numel() == 0);  // while a product that fits is a valid empty tensor
  CHECK(zeros({0, k2to32}).stride(0) == k2to32);
}

TEST_CASE("random factories refuse overflowing shapes before drawing", "[errors][shape]") {
  Generator& g = default_generator();
  const uint64_t before = g.offset();
  CHECK_ERROR(randn({k2to62}), Contains("randn") && Contains("[4611686018427387904]"));
  CHECK_ERROR(rand({k2to32, k2to32}), Contains("rand") && Contains("[4294967296, 4294967296]"));
  CHECK_ERROR(randint(0, 5, {k2to62, 8}),
              Contains("randint") && Contains("[4611686018427387904, 8]"));
  CHECK_ERROR(randn({2, -3}), Contains("randn") && Contains("-3") && Contains("[2, -3]"));
  CHECK(g.offset() == before);  // the stream did not move
}

TEST_CASE("negative sizes are errors naming the op and the shape", "[errors][shape]") {
  CHECK_ERROR(empty({-1}), Contains("empty") && Contains("negative size -1") && Contains("[-1]"));
  CHECK_ERROR(zeros({2, -3}), Contains("zeros") && Contains("-3") && Contains("[2, -3]"));
  CHECK_ERROR(full({-5}, 1.0), Contains("full") && Contains("[-5]"));
  CHECK_ERROR(zeros({6}).view({-2, -3}), Contains("view") && Contains("-2"));
  CHECK_ERROR(zeros({6}).reshape({2, -3}), Contains("reshape") && Contains("-3"));
}

TEST_CASE("expand refuses negative sizes other than -1 and views too large to index",
          "[errors][shape]") {
  const Tensor one = zeros({1}), row = zeros({4});
  CHECK_ERROR(one.expand({3, -4}), Contains("expand") && Contains("-4") && Contains("[3, -4]"));
  CHECK_ERROR(one.expand({-2}), Contains("expand") && Contains("-2"));
  CHECK_ERROR(row.expand({-1, 4}), Contains("expand") && Contains("new leading dim 0"));
  CHECK_ERROR(row.expand({k2to62, 4}),
              Contains("expand") && Contains("[4611686018427387904, 4]") && Contains("int64"));
  CHECK_ERROR(one.expand({k2to32, k2to32}),
              Contains("expand") && Contains("[4294967296, 4294967296]"));
  // -1 keeps a size; large views that fit are fine (they allocate nothing).
  const Tensor kept = zeros({3, 1}).expand({-1, 5});
  CHECK(kept.sizes() == Shape{3, 5});
  const Tensor big = one.expand({k2to32, k2to32 / 4});
  CHECK(big.numel() == k2to62);
  CHECK(big.stride(0) == 0);
}

TEST_CASE("view and reshape refuse shapes whose counts overflow", "[errors][shape]") {
  const Tensor empty0 = zeros({0});
  CHECK_ERROR(empty0.reshape({k2to62, 4, 0}),
              Contains("reshape") && Contains("[4611686018427387904, 4, 0]"));
  CHECK_ERROR(empty0.view({0, k2to32, k2to32}),
              Contains("view") && Contains("[0, 4294967296, 4294967296]"));
  CHECK_ERROR(zeros({6}).reshape({-1, k2to62, 4}), Contains("reshape") && Contains("int64"));
  CHECK_ERROR(zeros({6}).reshape({-1, k2to62}),
              Contains("reshape") && Contains("invalid for input of 6"));
  CHECK(empty0.reshape({k2to32, 0}).sizes() == Shape{k2to32, 0});
}

TEST_CASE("an op whose broadcast result is too large to count is an error, not a wrap",
          "[errors][shape]") {
  const Tensor col = zeros({1}).expand({k2to32, 1}), row = zeros({1}).expand({1, k2to32});
  CHECK_ERROR(add(col, row), Contains("add") && Contains("[4294967296, 4294967296]"));
  CHECK_ERROR(mul(col, row), Contains("mul") && Contains("[4294967296, 4294967296]"));
}

TEST_CASE("accessors of an undefined tensor throw instead of dereferencing null",
          "[errors][tensor]") {
  const Tensor t;
  CHECK_ERROR(t.dim(), Contains("dim") && Contains("undefined tensor"));
  CHECK_ERROR(t.numel(), Contains("numel") && Contains("undefined tensor"));
  CHECK_ERROR(t.sizes(), Contains("sizes") && Contains("undefined tensor"));
  CHECK_ERROR(t.strides(), Contains("strides") && Contains("undefined tensor"));
  CHECK_ERROR(t.size(0), Contains("undefined tensor"));
  CHECK_ERROR(t.dtype(), Contains("dtype") && Contains("undefined tensor"));
  CHECK_ERROR(t.device(), Contains("device") && Contains("undefined tensor"));
  CHECK_ERROR(t.is_cuda(), Contains("undefined tensor"));
  CHECK_ERROR(t.is_contiguous(), Contains("is_contiguous") && Contains("undefined tensor"));
  CHECK_ERROR(t.nbytes(), Contains("undefined tensor"));
  CHECK_ERROR(t.storage_offset(), Contains("storage_offset") && Contains("undefined tensor"));
  CHECK_ERROR(t.raw_data(), Contains("raw_data") && Contains("undefined tensor"));
  CHECK_ERROR(t.version(), Contains("version") && Contains("undefined tensor"));
  CHECK_ERROR(t.view({1}), Contains("undefined tensor"));
  CHECK_ERROR(t.reshape({-1}), Contains("undefined tensor"));
  CHECK_FALSE(t.defined());
}
