// The CUDA elementwise launcher's paths (kernels/cuda/pointwise.cu): the vectorized flat kernel
// with its scalar tail, misaligned and strided operands, broadcast device scalars, host scalars
// passed inline, in-place writes, strided fills, casts between every pair of dtypes, and the
// 64-bit index path. References are computed here in double (tests/core/host_values.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "test_util.h"

namespace ember {
namespace {

using test::read;
const Device kGpu = Device::cuda(0);
constexpr DType kAll[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};

// Small integers and halves: exact in every dtype, so sums and products are exact too.
std::vector<double> values(int64_t n, int salt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7 + salt * 13) % 41 - 20) / 2;
  return v;
}

void require_equal(const Tensor& got, const std::vector<double>& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.device() == kGpu);
  const std::vector<double> g = read(got);
  REQUIRE(g.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != want[i] && !(std::isnan(g[i]) && std::isnan(want[i])) && bad++ == 0) first = i;
  if (bad)
    FAIL_CHECK(bad << " of " << g.size() << " differ; first at " << first << ": got " << g[first]
                   << ", want " << want[first]);
}

}  // namespace

TEST_CASE("cuda pointwise: flat kernel, every length around the vector width",
          "[cuda][pointwise]") {
  EMBER_REQUIRE_CUDA();
  // float32 moves 4 per vector, float16 8, bool 16: cover tails of every size.
  for (DType t : {kFloat32, kFloat16, kFloat64, kInt64}) {
    for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099, 65537}) {
      const std::vector<double> a = values(n, 1), b = values(n, 2);
      const Tensor ga = test::make(a, {n}, t, kGpu), gb = test::make(b, {n}, t, kGpu);
      std::vector<double> sum(a.size()), prod(a.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const double x = test::round_to(t, a[i]), y = test::round_to(t, b[i]);  // as stored
        sum[i] = test::round_to(t, x + y);
        prod[i] = test::round_to(t, x * y);
      }
      const std::string what = std::string(dtype_name(t)) + " n=" + std::to_string(n);
      require_equal(add(ga, gb), sum, "add " + what);
      require_equal(mul(ga, gb), prod, "mul " + what);
    }
  }
}

TEST_CASE("cuda pointwise: misaligned, strided and broadcast operands", "[cuda][pointwise]") {
  EMBER_REQUIRE_CUDA();
  const int64_t n = 1001;
  const std::vector<double> a = values(n + 1, 3), b = values(n + 1, 4);
  const Tensor ga = test::make(a, {n + 1}, kFloat32, kGpu);
  const Tensor gb = test::make(b, {n + 1}, kFloat32, kGpu);

  SECTION("views starting one element in are not 16-byte aligned") {
    const Tensor x = ga.slice(0, 1, n + 1), y = gb.slice(0, 0, n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = a[i + 1] - b[i];
    require_equal(sub(x, y), want, "sub of shifted views");
  }
  SECTION("transposed and stepped views") {
    const Tensor m = ga.slice(0, 0, 1000).view({25, 40});
    const Tensor mt = m.t();  // [40, 25], strides (1, 40)
    const Tensor step = gb.slice(0, 0, 1000).view({40, 25});
    std::vector<double> want(1000);
    for (int64_t i = 0; i < 40; ++i)
      for (int64_t j = 0; j < 25; ++j) want[i * 25 + j] = a[j * 40 + i] * b[i * 25 + j];
    require_equal(mul(mt, step), want, "mul of a transpose");
    const Tensor every_other = ga.slice(0, 0, n + 1, 2);
    std::vector<double> want2;
    for (int64_t i = 0; i < n + 1; i += 2) want2.push_back(std::max(a[i], 0.0));
    require_equal(relu(every_other), want2, "relu of a stepped slice");
  }
  SECTION("broadcast rows, columns and a 0-dim device tensor") {
    const Tensor col = ga.slice(0, 0, 7).view({7, 1});
    const Tensor row = gb.slice(0, 0, 9).view({1, 9});
    std::vector<double> want(63);
    for (int i = 0; i < 7; ++i)
      for (int j = 0; j < 9; ++j) want[i * 9 + j] = a[i] + b[j];
    require_equal(add(col, row), want, "outer sum");
    const Tensor dev_scalar = gb.select(0, 5);  // 0-dim on the GPU: read by the kernel
    std::vector<double> want2(n + 1);
    for (int64_t i = 0; i <= n; ++i) want2[i] = a[i] * b[5];
    require_equal(mul(ga, dev_scalar), want2, "times a device scalar");
    require_equal(mul(dev_scalar, ga), want2, "device scalar times");
  }
}

TEST_CASE("cuda pointwise: host scalars travel inside the kernel arguments", "[cuda][pointwise]") {
  EMBER_REQUIRE_CUDA();
  const int64_t n = 517;
  const std::vector<double> a = values(n, 5);
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    const Tensor ga = test::make(a, {n}, t, kGpu);
    std::vector<double> plus(n), minus(n);
    for (int64_t i = 0; i < n; ++i) {
      const double x = test::round_to(t, a[i]);
      plus[i] = test::round_to(t, x + 3);
      minus[i] = test::round_to(t, 3 - x);
    }
    const std::string what = dtype_name(t).data();
    require_equal(add(ga, Scalar(3)), plus, "tensor + 3, " + what);
    require_equal(sub(Scalar(3), ga), minus, "3 - tensor, " + what);
    // An explicit 0-dim host tensor of the same dtype mixes with device tensors too.
    const Tensor host_three = test::make({3}, {}, t);
    require_equal(add(ga, host_three), plus, "tensor + host 0-dim, " + what);
  }
  // where with a host condition and host values.
  const Tensor ga = test::make(a, {n}, kFloat32, kGpu);
  const Tensor cond = gt(ga, Scalar(0));
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] > 0 ? a[i] : -1.5;
  require_equal(where(cond, ga, Scalar(-1.5)), want, "where(c, x, -1.5)");
  std::vector<double> want2(n);
  for (int64_t i = 0; i < n; ++i) want2[i] = a[i] > 0 ? 2.0 : a[i];
  require_equal(where(cond, Scalar(2.0), ga), want2, "where(c, 2, x)");
}

TEST_CASE("cuda pointwise: in-place ops and fills of strided views", "[cuda][pointwise]") {
  EMBER_REQUIRE_CUDA();
  const std::vector<double> a = values(60, 6), b = values(60, 7);
  Tensor x = test::make(a, {6, 10}, kFloat32, kGpu);
  const Tensor y = test::make(b, {6, 10}, kFloat32, kGpu);
  x.add_(y);  // the output is the first input's memory
  std::vector<double> want(60);
  for (int i = 0; i < 60; ++i) want[i] = a[i] + b[i];
  require_equal(x, want, "add_");
  x.mul_(Scalar(2));
  for (double& w : want) w *= 2;
  require_equal(x, want, "mul_ by a host scalar");

  // Fill a column block of a transposed view; everything else stays.
  Tensor z = zeros({6, 10}, TensorOptions(kGpu));
  z.t().slice(0, 2, 5).fill_(Scalar(7.5));  // columns 2..4 of z
  std::vector<double> wz(60, 0.0);
  for (int r = 0; r < 6; ++r)
    for (int c = 2; c < 5; ++c) wz[r * 10 + c] = 7.5;
  require_equal(z, wz, "fill_ of a strided view");

  for (DType t : kAll) {
    const double v = t == kBool ? 1 : -3;
    std::vector<double> wf(37, test::round_to(t, v));
    require_equal(full({37}, Scalar(v), TensorOptions(t).device(kGpu)), wf,
                  std::string("full, ") + dtype_name(t).data());
  }
  // int64 fills keep all 64 bits (2^53 + 1 is not a double).
  const int64_t big = (int64_t{1} << 53) + 1;
  const Tensor f = full({5}, Scalar(big), TensorOptions(kInt64).device(kGpu)).cpu();
  for (int i = 0; i < 5; ++i) CHECK(f.data_ptr<int64_t>()[i] == big);
}

TEST_CASE("cuda pointwise: cast between every pair of dtypes", "[cuda][pointwise]") {
  EMBER_REQUIRE_CUDA();
  // Exact in every dtype's range except where the target rounds or truncates, which the
  // reference does too; no NaN or out-of-range values for the integer targets.
  const std::vector<double> v = {0,   1,    -1, 0.5,   -2.75,   3.999, 100, -128, 255,   1000.25,
                                 0.1, -0.3, 7,  65504, -4096.5, 1e-3,  2.5, -0.0, 12345, 33};
  const int64_t n = static_cast<int64_t>(v.size());
  for (DType from : kAll) {
    const Tensor src = test::make(v, {n}, from, kGpu);
    const std::vector<double> stored = read(src);  // v as `from` holds it
    for (DType to : kAll) {
      std::vector<double> want(stored.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = test::round_to(to, stored[i]);
      const std::string what =
          std::string("cast ") + dtype_name(from).data() + " -> " + dtype_name(to).data();
      require_equal(src.to(to), want, what);
      // The strided kernel converts the same way: a stepped view of the source.
      const Tensor stepped = src.slice(0, 1, n, 3);
      std::vector<double> want_s;
      for (int64_t i = 1; i < n; i += 3) want_s.push_back(want[i]);
      require_equal(stepped.to(to), want_s, what + " (strided)");
    }
  }
}

TEST_CASE("cuda pointwise: more than 2^31 elements use 64-bit indexing", "[cuda][pointwise]") {
  EMBER_REQUIRE_CUDA();
  // Broadcast [R, 1] against [1, C] forces the strided kernel over R * C > 2^31 elements.
  const int64_t rows = (int64_t{1} << 16) + 1, cols = int64_t{1} << 15;
  Tensor a = zeros({rows, 1}, TensorOptions(kBool).device(kGpu));
  a.slice(0, rows - 1, rows).fill_(Scalar(true));
  const Tensor b = ones({1, cols}, TensorOptions(kBool).device(kGpu));
  const Tensor e = eq(a, b);  // true only on the last row
  REQUIRE(e.numel() > (int64_t{1} << 31));
  CHECK(sum(e).item<int64_t>() == cols);
  const std::vector<double> last = read(e.select(0, rows - 1)), first = read(e.select(0, 0));
  CHECK(std::all_of(last.begin(), last.end(), [](double x) { return x == 1; }));
  CHECK(std::all_of(first.begin(), first.end(), [](double x) { return x == 0; }));
  // And the flat kernel over as many: a fill, then a sum.
  Tensor big = empty({rows * cols}, TensorOptions(kBool).device(kGpu));
  big.fill_(Scalar(true));
  CHECK(sum(big).item<int64_t>() == rows * cols);
}

}  // namespace ember
