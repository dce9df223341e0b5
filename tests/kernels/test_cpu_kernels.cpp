// The CPU kernels for reductions, matrix products, softmax, cross entropy, indexing and cat,
// exercised through the public API (core/ops.h) against float64 references computed here with
// plain loops over host values (tests/core/host_values.h reads tensors by walking strides, so
// the reference never goes through the code under test). Odd shapes, keepdim both ways, several
// reduced dims, non-contiguous views and every dtype each op accepts.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "test_util.h"

using Catch::Matchers::Contains;

namespace ember {
namespace {

using test::make;
using test::read;
using test::round_to;
using test::unravel;

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");
constexpr DType kAllDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};
constexpr DType kFloatDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

// Spacing of the dtype's values relative to their magnitude (one ulp at 1.0).
double eps_of(DType t) {
  switch (t) {
    case kFloat64:
      return std::ldexp(1.0, -52);
    case kFloat32:
      return std::ldexp(1.0, -23);
    case kFloat16:
      return std::ldexp(1.0, -10);
    case kBFloat16:
      return std::ldexp(1.0, -7);
    default:
      return 0;
  }
}

std::vector<double> random_values(int64_t n, DType t, std::mt19937_64& rng, double lo = -3,
                                  double hi = 3) {
  std::vector<double> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int> integer(-9, 9);
  for (double& x : v) {
    if (is_floating(t))
      x = round_to(t, real(rng));
    else if (t == kBool)
      x = integer(rng) > 0;
    else
      x = integer(rng);
  }
  return v;
}

// Layouts of an input with a given logical shape; all but kContig are non-contiguous views.
enum Layout { kContig, kTransposed, kSliced, kReversed };
const char* layout_name(int l) {
  static const char* names[] = {"contiguous", "transposed", "sliced", "reversed"};
  return names[l];
}

Tensor make_input(const Shape& shape, DType t, int layout, std::mt19937_64& rng) {
  const int nd = shape.size();
  Tensor x;
  if (layout == kTransposed && nd >= 2) {
    Shape base = shape;
    std::swap(base[nd - 1], base[nd - 2]);
    x = make(random_values(numel_of(base), t, rng), base, t).transpose(nd - 2, nd - 1);
  } else if (layout == kSliced && nd >= 1) {
    // Offset rows on dim 0 and every other element on the last dim.
    Shape base = shape;
    if (nd >= 2) base[0] += 2;
    base[nd - 1] = 2 * shape[nd - 1] + 1;
    x = make(random_values(numel_of(base), t, rng), base, t);
    if (nd >= 2) x = x.slice(0, 1, 1 + shape[0]);
    x = x.slice(nd - 1, 1, 2 * shape[nd - 1] + 1, 2);
  } else if (layout == kReversed && nd >= 2) {
    Shape base;
    Dims order;
    for (int d = nd - 1; d >= 0; --d) {
      base.push_back(shape[d]);
      order.push_back(d);
    }
    x = make(random_values(numel_of(base), t, rng), base, t).permute(order);
  } else {
    x = make(random_values(numel_of(shape), t, rng), shape, t);
  }
  REQUIRE(x.sizes() == shape);
  return x;
}

std::string describe(const Tensor& x) {
  std::ostringstream os;
  os << dtype_name(x.dtype()) << " shape " << x.sizes() << " strides " << x.strides();
  return os.str();
}

// Checks `got` has the shape, dtype and values expected: |got - ref| <= tol[i] (NaN matches NaN,
// infinities must match exactly). Reports the first few mismatches.
void expect_values(const Tensor& got, const Shape& shape, DType dtype,
                   const std::vector<double>& ref, const std::vector<double>& tol) {
  REQUIRE(got.sizes() == shape);
  REQUIRE(dtype_name(got.dtype()) == dtype_name(dtype));
  const std::vector<double> g = read(got);
  REQUIRE(g.size() == ref.size());
  int bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = (std::isnan(g[i]) && std::isnan(ref[i])) || g[i] == ref[i] ||
                    (std::isfinite(ref[i]) && std::fabs(g[i] - ref[i]) <= tol[i]);
    if (!ok && bad++ < 5)
      os << "  [" << i << "] got " << g[i] << " want " << ref[i] << " (tol " << tol[i] << ")\n";
  }
  INFO("mismatches:\n" << os.str());
  CHECK(bad == 0);
}
void expect_exact(const Tensor& got, const Shape& shape, DType dtype,
                  const std::vector<double>& ref) {
  expect_values(got, shape, dtype, ref, std::vector<double>(ref.size(), 0.0));
}

// ---- reductions ----------------------------------------------------------------------------

enum class R { kSum, kMean, kAmax, kAmin, kArgmax, kLogSumExp };
const char* r_name(R r) {
  static const char* names[] = {"sum", "mean", "amax", "amin", "argmax", "logsumexp"};
  return names[static_cast<int>(r)];
}

struct RefReduce {
  Shape shape;
  std::vector<double> value;
  std::vector<double> sum_abs;  // per output: sum of |x| over its elements (for tolerances)
  std::vector<int64_t> count;
};

// dims: normalised (sorted, non-negative), empty = all.
RefReduce ref_reduce(R op, const std::vector<double>& x, const Shape& s, std::vector<int> dims,
                     bool keepdim) {
  const int nd = s.size();
  if (dims.empty())
    for (int d = 0; d < nd; ++d) dims.push_back(d);
  std::vector<bool> red(nd, false);
  for (int d : dims) red[d] = true;
  Shape kept, out_shape;
  for (int d = 0; d < nd; ++d) {
    if (!red[d]) kept.push_back(s[d]);
    if (!red[d])
      out_shape.push_back(s[d]);
    else if (keepdim)
      out_shape.push_back(1);
  }
  const int64_t nout = numel_of(kept);
  // Elements of each output in row-major order of the reduced dims.
  std::vector<std::vector<double>> groups(static_cast<size_t>(nout));
  for (int64_t i = 0; i < numel_of(s); ++i) {
    const std::vector<int64_t> idx = unravel(i, s);
    int64_t o = 0;
    for (int d = 0; d < nd; ++d)
      if (!red[d]) o = o * s[d] + idx[d];
    groups[o].push_back(x[i]);
  }
  RefReduce r;
  r.shape = out_shape;
  for (const std::vector<double>& g : groups) {
    long double sum = 0, sabs = 0;
    bool nan = false;
    double mx = -kInf, mn = kInf;
    int64_t arg = -1;
    double best = -kInf;
    for (size_t k = 0; k < g.size(); ++k) {
      sum += g[k];
      sabs += std::fabs(g[k]);
      if (std::isnan(g[k])) {
        if (!nan) arg = static_cast<int64_t>(k);
        nan = true;
        continue;
      }
      mx = std::max(mx, g[k]);
      mn = std::min(mn, g[k]);
      if (!nan && (arg < 0 || g[k] > best)) {
        best = g[k];
        arg = static_cast<int64_t>(k);
      }
    }
    double v = 0;
    switch (op) {
      case R::kSum:
        v = static_cast<double>(sum);
        break;
      case R::kMean:
        v = g.empty() ? kNaN : static_cast<double>(sum / g.size());
        break;
      case R::kAmax:
        v = nan ? kNaN : mx;
        break;
      case R::kAmin:
        v = nan ? kNaN : mn;
        break;
      case R::kArgmax:
        v = static_cast<double>(arg);
        break;
      case R::kLogSumExp: {
        if (nan) {
          v = kNaN;
        } else if (std::isinf(mx)) {
          v = mx;
        } else {
          long double e = 0;
          for (double y : g) e += std::exp(static_cast<long double>(y) - mx);
          v = static_cast<double>(mx + std::log(e));
        }
        break;
      }
    }
    r.value.push_back(v);
    r.sum_abs.push_back(static_cast<double>(sabs));
    r.count.push_back(static_cast<int64_t>(g.size()));
  }
  return r;
}

Tensor run_reduce(R op, const Tensor& x, const Dims& dims, bool keepdim) {
  switch (op) {
    case R::kSum:
      return sum(x, dims, keepdim);
    case R::kMean:
      return mean(x, dims, keepdim);
    case R::kAmax:
      return amax(x, dims, keepdim);
    case R::kAmin:
      return amin(x, dims, keepdim);
    case R::kArgmax:
      return dims.empty() ? argmax(x) : argmax(x, dims[0], keepdim);
    case R::kLogSumExp:
      return logsumexp(x, dims, keepdim);
  }
  return {};
}

DType reduce_out_dtype(R op, DType in) {
  switch (op) {
    case R::kSum:
      return is_floating(in) ? in : kInt64;
    case R::kArgmax:
      return kInt64;
    case R::kLogSumExp:
      return is_floating(in) ? in : kFloat32;
    default:
      return in;
  }
}

bool reduce_accepts(R op, DType t) {
  switch (op) {
    case R::kSum:
      return true;
    case R::kMean:
      return is_floating(t);
    case R::kAmax:
    case R::kAmin:
    case R::kArgmax:
      return t != kBool;
    case R::kLogSumExp:
      return t != kBool;
  }
  return false;
}

// Tolerance of one reduced value: the kernels accumulate in double and round the result once.
double reduce_tol(R op, DType out, const RefReduce& r, size_t i) {
  if (!is_floating(out)) return 0;
  const double v = std::fabs(r.value[i]);
  switch (op) {
    case R::kSum:
      return eps_of(out) * v + 1e-14 * r.sum_abs[i];
    case R::kMean:
      return eps_of(out) * v + 1e-14 * r.sum_abs[i] / std::max<int64_t>(r.count[i], 1);
    case R::kLogSumExp:
      return eps_of(out) * v + 1e-12 * (1 + v);
    default:
      return 0;  // amax, amin: exact
  }
}

void check_reduce(R op, const Tensor& x, const Dims& dims, bool keepdim) {
  const int nd = x.dim();
  std::vector<int> norm;
  for (int64_t d : dims) norm.push_back(static_cast<int>(d < 0 ? d + nd : d));
  std::sort(norm.begin(), norm.end());
  const bool flat_argmax = op == R::kArgmax && dims.empty();
  const RefReduce r = ref_reduce(op, read(x), x.sizes(), norm, keepdim && !flat_argmax);
  INFO(r_name(op) << " of " << describe(x) << " over dims " << dims << " keepdim " << keepdim);
  bool empty_group = false;
  for (int64_t c : r.count) empty_group |= c == 0;
  if (empty_group && (op == R::kAmax || op == R::kAmin || op == R::kArgmax)) {
    REQUIRE_THROWS_WITH(run_reduce(op, x, dims, keepdim),
                        Contains("cannot reduce over zero elements"));
    return;
  }
  const Tensor got = run_reduce(op, x, dims, keepdim);
  const DType out = reduce_out_dtype(op, x.dtype());
  std::vector<double> ref = r.value, tol(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = round_to(out, ref[i]);
    tol[i] = reduce_tol(op, out, r, i);
  }
  expect_values(got, r.shape, out, ref, tol);
}

TEST_CASE("cpu reductions match a float64 reference", "[kernels][reduce]") {
  std::mt19937_64 rng(20240601);
  const std::vector<Shape> shapes = {{7}, {3, 5}, {2, 3, 4}, {4, 1, 3, 5}, {2, 0, 3}, {5, 6}};
  for (const Shape& shape : shapes) {
    const int nd = shape.size();
    std::vector<Dims> dim_sets = {{}, {-1}};
    for (int d = 0; d < nd; ++d) dim_sets.push_back({d});
    if (nd >= 2) dim_sets.push_back({0, nd - 1});
    if (nd >= 3) dim_sets.push_back({nd - 1, 0, 1});  // unsorted on purpose
    if (nd >= 4) dim_sets.push_back({1, 3});
    for (int layout = 0; layout < 4; ++layout) {
      for (DType t : kAllDTypes) {
        const Tensor x = make_input(shape, t, layout, rng);
        INFO("layout " << layout_name(layout));
        for (R op : {R::kSum, R::kMean, R::kAmax, R::kAmin, R::kArgmax, R::kLogSumExp}) {
          if (!reduce_accepts(op, t)) continue;
          for (const Dims& dims : dim_sets) {
            if (op == R::kArgmax && dims.size() > 1) continue;
            for (bool keepdim : {false, true}) {
              if (op == R::kArgmax && dims.empty() && keepdim) continue;
              check_reduce(op, x, dims, keepdim);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("cpu reductions of a 0-dim tensor", "[kernels][reduce]") {
  const Tensor x = make({2.5}, {}, kFloat32);
  expect_exact(sum(x), {}, kFloat32, {2.5});
  expect_exact(mean(x), {}, kFloat32, {2.5});
  expect_exact(amax(x), {}, kFloat32, {2.5});
  expect_exact(argmax(x), {}, kInt64, {0});
  expect_exact(logsumexp(x, {}), {}, kFloat32, {2.5});
  expect_exact(sum(make({1}, {}, kBool)), {}, kInt64, {1});
}

TEST_CASE("cpu sum and mean stay accurate on long rows", "[kernels][reduce]") {
  // A float accumulator drifts by ~1e-3 relative over a million terms; double (or pairwise)
  // accumulation keeps the result within one rounding of the float64 sum.
  std::mt19937_64 rng(7);
  for (DType t : kFloatDTypes) {
    const int64_t n = t == kFloat32 || t == kFloat64 ? (int64_t{1} << 20) + 3 : 20000;
    std::vector<double> v = random_values(n, t, rng, 0.05, 0.15);
    const Tensor x = make(v, {n}, t);
    long double s = 0;
    for (double y : v) s += y;
    INFO(dtype_name(t) << " n=" << n);
    const double want = round_to(t, static_cast<double>(s));
    const double want_mean = round_to(t, static_cast<double>(s / n));
    // One rounding of the exact result (plus a little for float64's own accumulation).
    const double slack = t == kFloat64 ? 1e-13 * static_cast<double>(s) : 0;
    CHECK(std::fabs(read(sum(x))[0] - want) <= eps_of(t) * want + slack);
    CHECK(std::fabs(read(mean(x))[0] - want_mean) <= eps_of(t) * want_mean + slack / n);
    // The same data as a column: the outer-accumulator loop order.
    const Tensor col = x.slice(0, 0, n / 4 * 4).view({n / 4, 4});
    const Tensor cs = sum(col, {0});
    std::vector<long double> cref(4, 0);
    for (int64_t i = 0; i < n / 4 * 4; ++i) cref[i % 4] += v[i];
    const std::vector<double> got = read(cs);
    for (int j = 0; j < 4; ++j) {
      const double w = round_to(t, static_cast<double>(cref[j]));
      CHECK(std::fabs(got[j] - w) <= eps_of(t) * w + slack);
    }
  }
}

TEST_CASE("cpu integer sums are exact and widen to int64", "[kernels][reduce]") {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable in double
  const Tensor a = from_vector<int64_t>({big, 1, -3}, {3});
  const Tensor s = sum(a);
  REQUIRE(s.dtype() == kInt64);
  CHECK(s.item<int64_t>() == big - 2);
  const Tensor b = from_vector<int32_t>({1 << 30, 1 << 30, 1 << 30, 5}, {4});
  const Tensor sb = sum(b);
  REQUIRE(sb.dtype() == kInt64);
  CHECK(sb.item<int64_t>() == 3 * (int64_t{1} << 30) + 5);
  const Tensor flags = from_vector<bool>({true, false, true, true, false, true}, {2, 3});
  expect_exact(sum(flags, {1}), {2}, kInt64, {2, 2});
  expect_exact(sum(flags, {0}, true), {1, 3}, kInt64, {2, 0, 2});
}

TEST_CASE("cpu reductions with NaN, infinities and empty inputs", "[kernels][reduce]") {
  for (DType t : kFloatDTypes) {
    INFO(dtype_name(t));
    const Tensor x = make({1, kNaN, 3, kNaN, 2, 5, 5, -1}, {2, 4}, t);
    expect_exact(amax(x, {1}), {2}, t, {kNaN, 5});
    expect_exact(amin(x, {1}), {2}, t, {kNaN, -1});
    expect_exact(argmax(x, 1), {2}, kInt64, {1, 1});  // first NaN; first of tied maxima
    expect_exact(argmax(x), {}, kInt64, {1});
    expect_exact(sum(x, {1}), {2}, t, {kNaN, 11});
    expect_exact(amax(x.t(), {0}), {2}, t, {kNaN, 5});  // the same through a transposed view
    expect_exact(argmax(x.t(), 0), {2}, kInt64, {1, 1});
    // Built in float64 and cast: host_values.h's 16-bit encoder turns +inf into -inf.
    const Tensor inf =
        make({-kInf, -kInf, 1, kInf, -kInf, kNaN, kInf, kInf}, {4, 2}, kFloat64).to(t);
    expect_exact(logsumexp(inf, {1}), {4}, t, {-kInf, kInf, kNaN, kInf});
    expect_exact(amax(inf, {1}), {4}, t, {-kInf, kInf, kNaN, kInf});
    expect_exact(argmax(inf, 1), {4}, kInt64, {0, 1, 1, 0});
    const Tensor empty = make({}, {0, 3}, t);
    expect_exact(sum(empty, {0}), {3}, t, {0, 0, 0});
    expect_exact(mean(empty, {0}), {3}, t, {kNaN, kNaN, kNaN});
    expect_exact(logsumexp(empty, {0}), {3}, t, {-kInf, -kInf, -kInf});
    expect_exact(sum(empty, {1}), {0}, t, {});
    CHECK_THROWS_WITH(amax(empty, {0}),
                      Contains("amax: cannot reduce over zero elements (shape [0, 3]"));
    CHECK_THROWS_WITH(argmax(empty), Contains("argmax: cannot reduce over zero elements"));
    CHECK_THROWS_WITH(amin(empty), Contains("amin"));
  }
  const Tensor i = make({3, -7, 3, 9, 9}, {5}, kInt32);
  expect_exact(argmax(i), {}, kInt64, {3});
  expect_exact(amin(i), {}, kInt32, {-7});
  CHECK_THROWS_WITH(mean(i), Contains("mean"));  // mean of integers is not defined
}

// ---- matrix products -----------------------------------------------------------------------

constexpr DType kMatmulDTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64};

// Operand layouts for a logical [R, C] matrix (or [B, R, C] batch).
enum MatLayout { kMContig, kMTransposed, kMSliced, kMReversed, kMExpanded };
const char* mat_layout_name(int l) {
  static const char* names[] = {"contiguous", "transposed", "sliced", "reversed", "expanded"};
  return names[l];
}

Tensor make_operand(const Shape& shape, DType t, int layout, std::mt19937_64& rng) {
  if (layout == kMExpanded) {  // stride 0 on the leading dim (rows, or batches for 3-D)
    Shape one = shape;
    one[0] = 1;
    return make(random_values(numel_of(one), t, rng), one, t).expand(shape);
  }
  return make_input(shape, t, layout, rng);
}

// Reference product of logical row-major matrices, with sum(|a||b|) for the tolerance.
void ref_mm(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
            int64_t n, std::vector<double>& out, std::vector<double>& mag) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double s = 0, s_abs = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += static_cast<long double>(a[i * k + p]) * b[p * n + j];
        s_abs += std::fabs(a[i * k + p] * b[p * n + j]);
      }
      out.push_back(static_cast<double>(s));
      mag.push_back(static_cast<double>(s_abs));
    }
}

void check_matmul(const Tensor& a, const Tensor& b, bool batched) {
  INFO((batched ? "bmm " : "mm ") << describe(a) << " x " << describe(b));
  const DType t = a.dtype();
  const int64_t nb = batched ? a.size(0) : 1;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const std::vector<double> av = read(a), bv = read(b);
  std::vector<double> ref, mag;
  for (int64_t i = 0; i < nb; ++i) {
    const std::vector<double> ai(av.begin() + i * m * k, av.begin() + (i + 1) * m * k);
    const std::vector<double> bi(bv.begin() + i * k * n, bv.begin() + (i + 1) * k * n);
    ref_mm(ai, bi, m, k, n, ref, mag);
  }
  std::vector<double> tol(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    // Float GEMMs accumulate in float (16-bit types too), then round once to the output type.
    const double acc_eps = t == kFloat64 ? eps_of(kFloat64) : is_floating(t) ? eps_of(kFloat32) : 0;
    tol[i] = eps_of(t) * std::fabs(ref[i]) + (k + 2) * acc_eps * mag[i];
    ref[i] = round_to(t, ref[i]);
  }
  const Tensor got = batched ? bmm(a, b) : mm(a, b);
  expect_values(got, batched ? Shape{nb, m, n} : Shape{m, n}, t, ref, tol);
}

TEST_CASE("cpu mm matches a float64 reference for every dtype and layout", "[kernels][matmul]") {
  std::mt19937_64 rng(99);
  const std::vector<std::array<int64_t, 3>> mkn = {{1, 1, 1},  {3, 5, 7},   {17, 31, 13},
                                                   {64, 1, 5}, {33, 65, 1}, {2, 40, 70},
                                                   {5, 0, 3},  {0, 4, 3}};
  for (DType t : kMatmulDTypes) {
    for (const auto& [m, k, n] : mkn) {
      for (int la = 0; la < 5; ++la) {
        for (int lb = 0; lb < 5; ++lb) {
          if ((la == kMExpanded && m == 0) || (lb == kMExpanded && k == 0)) continue;
          INFO("layouts " << mat_layout_name(la) << " x " << mat_layout_name(lb));
          const Tensor a = make_operand({m, k}, t, la, rng);
          const Tensor b = make_operand({k, n}, t, lb, rng);
          check_matmul(a, b, false);
        }
      }
    }
  }
}

TEST_CASE("cpu bmm handles strided batches, including batch stride 0", "[kernels][matmul]") {
  std::mt19937_64 rng(5);
  const std::vector<std::array<int64_t, 4>> bmkn = {{3, 4, 5, 6},   {1, 7, 3, 2}, {4, 1, 9, 1},
                                                    {2, 16, 33, 8}, {3, 2, 0, 4}, {0, 2, 3, 4}};
  for (DType t : kMatmulDTypes) {
    for (const auto& [bs, m, k, n] : bmkn) {
      for (int la = 0; la < 5; ++la) {
        for (int lb = 0; lb < 5; ++lb) {
          if ((la == kMExpanded || lb == kMExpanded) && bs == 0) continue;
          INFO("layouts " << mat_layout_name(la) << " x " << mat_layout_name(lb));
          const Tensor a = make_operand({bs, m, k}, t, la, rng);
          const Tensor b = make_operand({bs, k, n}, t, lb, rng);
          check_matmul(a, b, true);
        }
      }
    }
  }
}

TEST_CASE("cpu matmul with broadcast batches goes through bmm correctly", "[kernels][matmul]") {
  std::mt19937_64 rng(11);
  const Tensor a = make_input({2, 1, 3, 4}, kFloat64, kContig, rng);
  const Tensor b = make_input({3, 4, 5}, kFloat64, kTransposed, rng);
  const Tensor c = matmul(a, b);
  REQUIRE(c.sizes() == Shape{2, 3, 3, 5});
  const std::vector<double> av = read(a), bv = read(b), cv = read(c);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int r = 0; r < 3; ++r)
        for (int q = 0; q < 5; ++q) {
          double s = 0;
          for (int p = 0; p < 4; ++p) s += av[(i * 3 + r) * 4 + p] * bv[(j * 4 + p) * 5 + q];
          CHECK(cv[((i * 3 + j) * 3 + r) * 5 + q] == Approx(s).epsilon(1e-12));
        }
}

TEST_CASE("cpu mm rejects mismatched shapes", "[kernels][matmul]") {
  const Tensor a = zeros({3, 4}), b = zeros({5, 2});
  CHECK_THROWS_WITH(mm(a, b), Contains("mm") && Contains("[3, 4]") && Contains("[5, 2]"));
  CHECK_THROWS_WITH(bmm(zeros({2, 3, 4}), zeros({3, 4, 5})),
                    Contains("bmm") && Contains("[2, 3, 4]") && Contains("[3, 4, 5]"));
}

// ---- softmax -------------------------------------------------------------------------------

void ref_softmax(const std::vector<double>& x, const Shape& s, int dim, bool log,
                 std::vector<double>& out) {
  out.assign(x.size(), 0);
  const int nd = s.size();
  int64_t inner = 1;
  for (int d = dim + 1; d < nd; ++d) inner *= s[d];
  const int64_t n = s[dim], outer = numel_of(s) / std::max<int64_t>(n * inner, 1);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + in; };
      double m = -kInf;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, x[at(j)]);
      long double z = 0;
      for (int64_t j = 0; j < n; ++j) z += std::exp(static_cast<long double>(x[at(j)]) - m);
      for (int64_t j = 0; j < n; ++j) {
        const long double e = static_cast<long double>(x[at(j)]) - m;
        out[at(j)] = static_cast<double>(log ? e - std::log(z) : std::exp(e) / z);
      }
    }
}

TEST_CASE("cpu softmax and log_softmax match a float64 reference", "[kernels][softmax]") {
  std::mt19937_64 rng(3);
  const std::vector<Shape> shapes = {{5}, {3, 7}, {2, 3, 4}, {2, 1, 6}, {2, 0, 3}};
  for (const Shape& shape : shapes) {
    const int nd = shape.size();
    for (int layout = 0; layout < 4; ++layout) {
      for (DType t : kFloatDTypes) {
        const Tensor x = make_input(shape, t, layout, rng);
        const std::vector<double> xv = read(x);
        for (int dim = -1; dim < nd; ++dim) {
          for (bool log : {false, true}) {
            INFO((log ? "log_softmax " : "softmax ") << describe(x) << " dim " << dim);
            std::vector<double> ref;
            ref_softmax(xv, shape, dim < 0 ? dim + nd : dim, log, ref);
            std::vector<double> tol(ref.size());
            for (size_t i = 0; i < ref.size(); ++i) {
              tol[i] = eps_of(t) * std::fabs(ref[i]) + 1e-13 * (1 + std::fabs(ref[i]));
              ref[i] = round_to(t, ref[i]);
            }
            const Tensor got = log ? log_softmax(x, dim) : softmax(x, dim);
            expect_values(got, shape, t, ref, tol);
          }
        }
      }
    }
  }
}

TEST_CASE("cpu softmax is stable for large and infinite logits", "[kernels][softmax]") {
  for (DType t : {kFloat32, kFloat64}) {
    INFO(dtype_name(t));
    const Tensor x = make({1000, 1001, 1002, -kInf, 0, 1, -kInf, -kInf, -kInf}, {3, 3}, t);
    const double z = 1 + std::exp(1.0) + std::exp(2.0), z2 = 1 + std::exp(1.0);
    const std::vector<double> sm = {
        1 / z, std::exp(1.0) / z, std::exp(2.0) / z, 0, 1 / z2, std::exp(1.0) / z2, kNaN, kNaN,
        kNaN};
    std::vector<double> ls = {-std::log(z),
                              1 - std::log(z),
                              2 - std::log(z),
                              -kInf,
                              -std::log(z2),
                              1 - std::log(z2),
                              kNaN,
                              kNaN,
                              kNaN};
    std::vector<double> tol(9, 1e-6);
    expect_values(softmax(x, 1), {3, 3}, t, sm, tol);
    expect_values(log_softmax(x, -1), {3, 3}, t, ls, tol);
  }
}

// ---- cross entropy -------------------------------------------------------------------------

TEST_CASE("cpu cross entropy matches logsumexp - logit", "[kernels][loss]") {
  std::mt19937_64 rng(17);
  const int64_t n = 9, c = 6;
  for (DType t : kFloatDTypes) {
    for (int layout : {kContig, kTransposed, kSliced}) {
      for (int64_t ignore : {int64_t{-100}, int64_t{3}}) {
        const Tensor x = make_input({n, c}, t, layout, rng);
        std::vector<int64_t> tv(n);
        std::uniform_int_distribution<int64_t> cls(0, c - 1);
        for (int64_t& k : tv) k = cls(rng);
        tv[2] = tv[5] = ignore;
        tv[7] = c - 1;
        const Tensor target = from_vector<int64_t>(tv, {n});
        INFO("cross_entropy " << describe(x) << " ignore_index " << ignore);
        const std::vector<double> xv = read(x);
        std::vector<double> ref(n, 0.0), tol(n, 0.0);
        for (int64_t i = 0; i < n; ++i) {
          if (tv[i] == ignore) continue;
          double m = -kInf;
          for (int64_t j = 0; j < c; ++j) m = std::max(m, xv[i * c + j]);
          long double z = 0;
          for (int64_t j = 0; j < c; ++j)
            z += std::exp(static_cast<long double>(xv[i * c + j]) - m);
          const double v = static_cast<double>(m + std::log(z) - xv[i * c + tv[i]]);
          tol[i] = eps_of(t) * std::fabs(v) + 1e-13 * (1 + std::fabs(m));
          ref[i] = round_to(t, v);
        }
        expect_values(cross_entropy_per_sample(x, target, ignore), {n}, t, ref, tol);
        // -100 is only ignored when it is the ignore_index; otherwise it is out of range.
        if (ignore != -100) {
          tv[4] = -100;
          CHECK_THROWS_WITH(
              cross_entropy_per_sample(x, from_vector<int64_t>(tv, {n}), ignore),
              Contains("cross_entropy") && Contains("target -100") && Contains("6 classes"));
        }
      }
    }
  }
}

TEST_CASE("cpu cross entropy honours a custom ignore_index and rejects bad targets",
          "[kernels][loss]") {
  const Tensor x = make({0.5, -1, 2, 0, 0, 0, 3, 1, -2}, {3, 3}, kFloat64);
  const Tensor target = from_vector<int64_t>({2, 1, 1}, {3});
  const std::vector<double> got = read(cross_entropy_per_sample(x, target, 1));
  const double lse0 = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0));
  CHECK(got[0] == Approx(lse0 - 2).epsilon(1e-14));
  CHECK(got[1] == 0);
  CHECK(got[2] == 0);
  CHECK_THROWS_WITH(cross_entropy_per_sample(x, from_vector<int64_t>({0, 3, 1}, {3})),
                    Contains("cross_entropy") && Contains("target 3") && Contains("3 classes"));
  CHECK_THROWS_WITH(cross_entropy_per_sample(x, from_vector<int64_t>({0, 1, -1}, {3})),
                    Contains("cross_entropy") && Contains("target -1") && Contains("3 classes"));
}

// ---- gather, index_select, one_hot ---------------------------------------------------------

TEST_CASE("cpu gather matches a reference for every dtype, dim and layout", "[kernels][index]") {
  std::mt19937_64 rng(23);
  const Shape in_shape = {4, 5, 6};
  for (DType t : kAllDTypes) {
    for (int layout = 0; layout < 4; ++layout) {
      const Tensor x = make_input(in_shape, t, layout, rng);
      const std::vector<double> xv = read(x);
      for (int dim = -1; dim < 3; ++dim) {
        const int d = dim < 0 ? dim + 3 : dim;
        Shape is = {3, 4, 2};
        is[d] = 7;  // along dim the index may be longer than the input
        std::uniform_int_distribution<int64_t> pick(0, in_shape[d] - 1);
        std::vector<double> iv(numel_of(is));
        for (double& v : iv) v = static_cast<double>(pick(rng));
        // A transposed index view exercises strided index reads.
        Shape ist = is;
        std::swap(ist[1], ist[2]);
        std::vector<double> ivt(iv.size());
        for (int64_t i = 0; i < numel_of(is); ++i) {
          const auto p = unravel(i, is);
          ivt[(p[0] * ist[1] + p[2]) * ist[2] + p[1]] = iv[i];
        }
        const Tensor index = make(ivt, ist, kInt64).transpose(1, 2);
        INFO("gather " << describe(x) << " dim " << dim << " index " << describe(index));
        REQUIRE(read(index) == iv);
        std::vector<double> ref(iv.size());
        for (int64_t i = 0; i < numel_of(is); ++i) {
          auto p = unravel(i, is);
          p[d] = static_cast<int64_t>(iv[i]);
          ref[i] = xv[(p[0] * in_shape[1] + p[1]) * in_shape[2] + p[2]];
        }
        expect_exact(gather(x, dim, index), is, t, ref);
      }
    }
  }
}

TEST_CASE("cpu index_select matches a reference for every dtype, dim and layout",
          "[kernels][index]") {
  std::mt19937_64 rng(29);
  const Shape in_shape = {3, 5, 4};
  for (DType t : kAllDTypes) {
    for (int layout = 0; layout < 4; ++layout) {
      const Tensor x = make_input(in_shape, t, layout, rng);
      const std::vector<double> xv = read(x);
      for (int dim = -3; dim < 3; ++dim) {
        const int d = dim < 0 ? dim + 3 : dim;
        std::vector<int64_t> iv = {in_shape[d] - 1, 0, 1, 1, in_shape[d] - 1};
        // Every other entry of a longer vector: a strided 1-D index.
        std::vector<int64_t> spread;
        for (int64_t v : iv) {
          spread.push_back(v);
          spread.push_back(-5);
        }
        const Tensor index =
            from_vector<int64_t>(spread, {static_cast<int64_t>(spread.size())}).slice(0, 0, 10, 2);
        INFO("index_select " << describe(x) << " dim " << dim);
        Shape os = in_shape;
        os[d] = 5;
        std::vector<double> ref(numel_of(os));
        for (int64_t i = 0; i < numel_of(os); ++i) {
          auto p = unravel(i, os);
          p[d] = iv[p[d]];
          ref[i] = xv[(p[0] * in_shape[1] + p[1]) * in_shape[2] + p[2]];
        }
        expect_exact(index_select(x, dim, index), os, t, ref);
      }
    }
  }
  // int32 indices are widened; an empty index gives an empty dim.
  const Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat32);
  expect_exact(index_select(x, 1, from_vector<int32_t>({2, 0}, {2})), {2, 2}, kFloat32,
               {3, 1, 6, 4});
  expect_exact(index_select(x, 0, from_vector<int64_t>({}, {0})), {0, 3}, kFloat32, {});
}

TEST_CASE("cpu indexing rejects out-of-range indices naming op, index and size",
          "[kernels][index]") {
  const Tensor x = make({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4}, kFloat32);
  CHECK_THROWS_WITH(gather(x, 1, from_vector<int64_t>({0, 4, 1}, {3, 1})),
                    Contains("gather") && Contains("index 4") && Contains("size 4"));
  CHECK_THROWS_WITH(gather(x, 0, from_vector<int64_t>({-1}, {1, 1})),
                    Contains("gather") && Contains("index -1") && Contains("size 3"));
  CHECK_THROWS_WITH(index_select(x, 0, from_vector<int64_t>({0, 3}, {2})),
                    Contains("index_select") && Contains("index 3") && Contains("size 3"));
  CHECK_THROWS_WITH(index_select(x, 1, from_vector<int64_t>({-2}, {1})),
                    Contains("index_select") && Contains("index -2") && Contains("size 4"));
  CHECK_THROWS_WITH(one_hot(from_vector<int64_t>({0, 5, 1}, {3}), 5),
                    Contains("one_hot") && Contains("5"));
  CHECK_THROWS_WITH(one_hot(from_vector<int64_t>({0, -1}, {2}), 3),
                    Contains("one_hot") && Contains("-1"));
  CHECK_THROWS_WITH(gather(x, 0, from_vector<int64_t>({0, 0, 0, 0, 0}, {1, 5})),
                    Contains("gather") && Contains("[1, 5]"));
}

TEST_CASE("cpu one_hot matches a reference", "[kernels][index]") {
  const std::vector<int64_t> v = {3, 0, 4, 1, 1, 2};
  const Tensor idx = from_vector<int64_t>(v, {2, 3});
  for (int64_t classes : {int64_t{5}, int64_t{7}, int64_t{-1}}) {
    const int64_t c = classes == -1 ? 5 : classes;  // inferred: max + 1
    std::vector<double> ref(v.size() * c, 0);
    for (size_t i = 0; i < v.size(); ++i) ref[i * c + v[i]] = 1;
    INFO("num_classes " << classes);
    expect_exact(one_hot(idx, classes), {2, 3, c}, kInt64, ref);
    // A transposed (non-contiguous) index and int32 input.
    std::vector<double> reft(v.size() * c, 0);
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) reft[(j * 2 + i) * c + v[i * 3 + j]] = 1;
    expect_exact(one_hot(idx.t(), classes), {3, 2, c}, kInt64, reft);
    expect_exact(one_hot(idx.to(kInt32), classes), {2, 3, c}, kInt64, ref);
  }
}

// ---- cat -----------------------------------------------------------------------------------

TEST_CASE("cpu cat matches a reference for every dtype, dim and layout", "[kernels][cat]") {
  std::mt19937_64 rng(31);
  for (DType t : kAllDTypes) {
    for (int dim = -3; dim < 3; ++dim) {
      const int d = dim < 0 ? dim + 3 : dim;
      const int64_t parts[] = {2, 1, 0, 5};
      std::vector<Tensor> ins;
      std::vector<std::vector<double>> vals;
      Shape out_shape = {3, 4, 2};
      out_shape[d] = 0;
      for (int i = 0; i < 4; ++i) {
        Shape s = {3, 4, 2};
        s[d] = parts[i];
        ins.push_back(make_input(s, t, i, rng));  // one of each layout
        vals.push_back(read(ins.back()));
        out_shape[d] += parts[i];
      }
      INFO("cat " << dtype_name(t) << " dim " << dim);
      std::vector<double> ref(numel_of(out_shape));
      for (int64_t i = 0; i < numel_of(out_shape); ++i) {
        auto p = unravel(i, out_shape);
        int k = 0;
        while (p[d] >= parts[k]) p[d] -= parts[k++];
        Shape s = {3, 4, 2};
        s[d] = parts[k];
        ref[i] = vals[k][(p[0] * s[1] + p[1]) * s[2] + p[2]];
      }
      expect_exact(cat(ins, dim), out_shape, t, ref);
    }
  }
}

TEST_CASE("cpu cat promotes dtypes and stack joins along a new dim", "[kernels][cat]") {
  const Tensor a = from_vector<int32_t>({1, 2}, {1, 2});
  const Tensor b = make({0.5, 1.5, 2.5, 3.5}, {2, 2}, kFloat32);
  expect_exact(cat({a, b}, 0), {3, 2}, kFloat32, {1, 2, 0.5, 1.5, 2.5, 3.5});
  expect_exact(stack({b, b.t()}, 1), {2, 2, 2}, kFloat32, {0.5, 1.5, 0.5, 2.5, 2.5, 3.5, 1.5, 3.5});
  CHECK_THROWS_WITH(cat({b, zeros({2, 3})}, 0), Contains("cat"));
}

}  // namespace
}  // namespace ember

// ---- strided inputs dispatched directly ----------------------------------------------------

namespace ember {
namespace {

// The public wrappers make most inputs contiguous first; the JIT and other layers dispatch
// directly, and the kernels read any strides, so those paths get checked here.
TEST_CASE("cpu kernels read strided inputs dispatched directly", "[kernels]") {
  std::mt19937_64 rng(41);
  for (DType t : kFloatDTypes) {
    INFO(dtype_name(t));
    for (int layout : {kTransposed, kSliced, kReversed}) {
      const Tensor x = make_input({3, 5, 4}, t, layout, rng);
      for (int dim = 0; dim < 3; ++dim) {
        for (bool log : {false, true}) {
          INFO((log ? "log_softmax " : "softmax ") << describe(x) << " dim " << dim);
          std::vector<double> ref;
          ref_softmax(read(x), x.sizes(), dim, log, ref);
          std::vector<double> tol(ref.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            tol[i] = eps_of(t) * std::fabs(ref[i]) + 1e-13 * (1 + std::fabs(ref[i]));
            ref[i] = round_to(t, ref[i]);
          }
          Attrs attrs;
          attrs.dim = dim;
          expect_values(dispatch(log ? OpId::log_softmax : OpId::softmax, {x}, attrs), x.sizes(), t,
                        ref, tol);
        }
      }
    }
    // Cross entropy with transposed logits and a stepped target.
    const Tensor logits = make_input({4, 3}, t, kTransposed, rng);
    const Tensor target = from_vector<int64_t>({2, 9, 0, 9, -100, 9, 1, 9}, {8}).slice(0, 0, 8, 2);
    Attrs ce;
    const std::vector<double> lv = read(logits);
    const int64_t tv[] = {2, 0, -100, 1};
    std::vector<double> ref(4, 0.0), tol(4, 0.0);
    for (int i = 0; i < 4; ++i) {
      if (tv[i] < 0) continue;
      const double m = std::max({lv[i * 3], lv[i * 3 + 1], lv[i * 3 + 2]});
      const double z =
          std::exp(lv[i * 3] - m) + std::exp(lv[i * 3 + 1] - m) + std::exp(lv[i * 3 + 2] - m);
      const double v = m + std::log(z) - lv[i * 3 + tv[i]];
      tol[i] = eps_of(t) * std::fabs(v) + 1e-13;
      ref[i] = round_to(t, v);
    }
    expect_values(dispatch(OpId::cross_entropy, {logits, target}, ce), {4}, t, ref, tol);
  }
  // gather / index_select / one_hot with strided input and index.
  const Tensor x = make_input({4, 6}, kFloat64, kTransposed, rng);
  const std::vector<double> xv = read(x);
  const Tensor gi = from_vector<int64_t>({3, 0, 5, 1, 2, 2}, {2, 3}).t();  // [3, 2]
  Attrs g;
  g.dim = 1;
  expect_exact(
      dispatch(OpId::gather, {x, gi}, g), {3, 2}, kFloat64,
      {xv[0 * 6 + 3], xv[0 * 6 + 1], xv[1 * 6 + 0], xv[1 * 6 + 2], xv[2 * 6 + 5], xv[2 * 6 + 2]});
  const Tensor si = from_vector<int64_t>({3, -7, 0, -7, 3}, {5}).slice(0, 0, 5, 2);  // [3, 0, 3]
  Attrs s;
  s.dim = 0;
  std::vector<double> sref;
  for (int64_t r : {3, 0, 3})
    for (int c = 0; c < 6; ++c) sref.push_back(xv[r * 6 + c]);
  expect_exact(dispatch(OpId::index_select, {x, si}, s), {3, 6}, kFloat64, sref);
  Attrs oh;
  oh.num_classes = 4;
  expect_exact(dispatch(OpId::one_hot, {from_vector<int64_t>({1, 3, 0, 2}, {2, 2}).t()}, oh),
               {2, 2, 4}, kInt64, {0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0});
}

}  // namespace
}  // namespace ember
