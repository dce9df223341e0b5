// The CUDA reductions, matrix products, softmax, cross entropy, indexing and cat against the CPU
// path on the same inputs (made on the CPU, copied to the GPU, with views applied on each side
// so the GPU kernels see non-contiguous layouts), and mm / cross entropy against float64
// references computed here. Odd shapes, long rows, several reduced dims, every dtype an op
// accepts, and the device error flag for out-of-range indices.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "test_util.h"

using Catch::Matchers::Contains;

namespace ember {
namespace {

using test::read;

const Device kGpu = Device::cuda(0);
constexpr DType kAll[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};
constexpr DType kNumeric[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64};
constexpr DType kFloats[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

// Relative spacing of a dtype's values (0 for exact types).
double eps_of(DType t) {
  switch (t) {
    case kFloat64:
      return 1e-13;
    case kFloat32:
      return 1e-5;
    case kFloat16:
      return 2e-3;
    case kBFloat16:
      return 1.6e-2;
    default:
      return 0;
  }
}

// Random values of dtype `t` on the CPU.
Tensor random_input(const Shape& s, DType t) {
  if (is_floating(t)) return randn(s, TensorOptions(t));
  if (t == kBool) return randint(0, 2, s, TensorOptions(kInt32)).to(kBool);
  return randint(-20, 21, s, TensorOptions(t));
}

// Checks every element: |got - want| <= atol + rtol * |want|; NaNs and infinities must match.
void require_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                   const std::string& what) {
  INFO(what);
  REQUIRE(got.device() == kGpu);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = read(got), w = read(want);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                    std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad) {
    std::ostringstream os;
    os.precision(10);
    os << bad << " of " << g.size() << " elements differ; first at " << first << ": got "
       << g[first] << ", want " << w[first];
    FAIL_CHECK(os.str());
  }
}

// A layout applied identically to the CPU tensor and its GPU copy. `base` builds the stored
// shape from the logical one; `view` maps it back to a (non-contiguous) logical view.
struct Layout {
  const char* name;
  std::function<Shape(const Shape&)> base;
  std::function<Tensor(const Tensor&)> view;
};

std::vector<Layout> layouts_for(int nd) {
  std::vector<Layout> v;
  v.push_back({"contiguous", [](const Shape& s) { return s; }, [](const Tensor& t) { return t; }});
  if (nd >= 2) {
    v.push_back({"transposed",
                 [](const Shape& s) {
                   Shape b = s;
                   std::swap(b[0], b[b.size() - 1]);
                   return b;
                 },
                 [](const Tensor& t) { return t.transpose(0, t.dim() - 1); }});
  }
  v.push_back({"every other column",
               [](const Shape& s) {
                 Shape b = s;
                 b[b.size() - 1] *= 2;
                 return b;
               },
               [](const Tensor& t) { return t.slice(t.dim() - 1, 0, t.size(-1), 2); }});
  v.push_back({"expanded dim 0",
               [](const Shape& s) {
                 Shape b = s;
                 b[0] = 1;
                 return b;
               },
               [](const Tensor& t) { return t; }});  // expand needs the logical shape: below
  return v;
}

// The (CPU, GPU) pair of one layout: same values, same view on both devices.
std::pair<Tensor, Tensor> make_pair_for(const Layout& l, const Shape& logical, DType t) {
  const Tensor base = random_input(l.base(logical), t);
  const Tensor gbase = base.to(kGpu);
  if (std::string(l.name) == "expanded dim 0") return {base.expand(logical), gbase.expand(logical)};
  return {l.view(base), l.view(gbase)};
}

std::string describe(const char* op, DType t, const Shape& s, const Layout& l, const Dims& dims,
                     bool keepdim) {
  std::ostringstream os;
  os << op << " " << dtype_name(t) << " shape " << s << " (" << l.name << ") dims " << dims
     << (keepdim ? " keepdim" : "");
  return os.str();
}

// ---- reductions -----------------------------------------------------------------------------

struct ReduceCase {
  Shape shape;
  std::vector<Dims> dims;
  bool big;  // only the contiguous and transposed layouts
};

const std::vector<ReduceCase>& reduce_cases() {
  static const std::vector<ReduceCase> cases = {
      {{7, 13}, {{}, {0}, {1}, {0, 1}}, false},
      {{3, 5, 17}, {{}, {0}, {1}, {2}, {0, 2}, {1, 2}}, false},
      {{1, 1}, {{}, {0}, {1}}, false},
      {{2, 100000}, {{}, {0}, {1}}, true},
      {{100000, 3}, {{0}, {1}}, true},
      {{64, 2500}, {{0}, {1}}, true},
  };
  return cases;
}

int64_t reduced_count(const Shape& s, const Dims& dims) {
  if (dims.empty()) return numel_of(s);
  int64_t n = 1;
  for (int64_t d : dims) n *= s[static_cast<int>(d)];
  return n;
}

using ReduceFn = std::function<Tensor(const Tensor&, const Dims&, bool)>;

// Runs `fn` on both devices for every case, layout, dtype in `dtypes` and keepdim; `atol_of`
// gives the absolute tolerance from the dtype and the number of reduced elements.
template <size_t N>
void check_reduction(const char* name, const ReduceFn& fn, const DType (&dtypes)[N],
                     const std::function<double(DType, int64_t)>& atol_of, bool single_dim_only) {
  for (const ReduceCase& c : reduce_cases()) {
    for (const Layout& l : layouts_for(c.shape.size())) {
      const std::string lname = l.name;
      if (c.big && lname != "contiguous" && lname != "transposed") continue;
      for (DType t : dtypes) {
        const auto [x, gx] = make_pair_for(l, c.shape, t);
        for (const Dims& dims : c.dims) {
          if (single_dim_only && dims.size() > 1 && dims.size() != c.shape.size()) continue;
          for (bool keepdim : {false, true}) {
            const std::string what = describe(name, t, c.shape, l, dims, keepdim);
            const Tensor want = fn(x, dims, keepdim);
            const Tensor got = fn(gx, dims, keepdim);
            const double rtol = is_floating(want.dtype()) ? eps_of(t) : 0;
            require_close(got, want, rtol, atol_of(t, reduced_count(c.shape, dims)), what);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda sum and mean match the cpu", "[cuda][reduce]") {
  EMBER_REQUIRE_CUDA();
  // Float sums: error grows like sqrt(count) times the elements' size (randn: 1).
  check_reduction(
      "sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }, kAll,
      [](DType t, int64_t n) { return eps_of(t) * std::sqrt(double(n)); }, false);
  check_reduction(
      "mean", [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); }, kFloats,
      [](DType t, int64_t n) { return eps_of(t) / std::sqrt(double(std::max<int64_t>(n, 1))); },
      false);
}

TEST_CASE("cuda amax, amin and argmax match the cpu exactly", "[cuda][reduce]") {
  EMBER_REQUIRE_CUDA();
  auto exact = [](DType, int64_t) { return 0.0; };
  check_reduction(
      "amax", [](const Tensor& x, const Dims& d, bool k) { return amax(x, d, k); }, kNumeric, exact,
      false);
  check_reduction(
      "amin", [](const Tensor& x, const Dims& d, bool k) { return amin(x, d, k); }, kNumeric, exact,
      false);
  check_reduction(
      "argmax",
      [](const Tensor& x, const Dims& d, bool k) {
        return d.empty() || d.size() == x.dim() ? argmax(x) : argmax(x, d[0], k);
      },
      kNumeric, exact, true);
}

TEST_CASE("cuda logsumexp matches the cpu", "[cuda][reduce]") {
  EMBER_REQUIRE_CUDA();
  check_reduction(
      "logsumexp", [](const Tensor& x, const Dims& d, bool k) { return logsumexp(x, d, k); },
      kFloats, [](DType t, int64_t) { return eps_of(t); }, false);
}

TEST_CASE("cuda reductions propagate NaN and infinities like the cpu", "[cuda][reduce]") {
  EMBER_REQUIRE_CUDA();
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v = {1, nan, 3, nan, 2, 5, -inf, 7, inf, -inf, -inf, -inf};
  for (DType t : kFloats) {
    const Tensor x = test::make(v, {3, 4}, t);
    const Tensor gx = x.to(kGpu);
    for (int64_t d : {0, 1}) {
      INFO("dtype " << dtype_name(t) << " dim " << d);
      require_close(amax(gx, {d}), amax(x, {d}), 0, 0, "amax");
      require_close(amin(gx, {d}), amin(x, {d}), 0, 0, "amin");
      require_close(argmax(gx, d), argmax(x, d), 0, 0, "argmax");
      require_close(logsumexp(gx, {d}), logsumexp(x, {d}), eps_of(t), eps_of(t), "logsumexp");
      require_close(sum(gx, {d}), sum(x, {d}), eps_of(t), eps_of(t), "sum");
    }
    require_close(argmax(gx), argmax(x), 0, 0, "argmax flat");
  }
}

TEST_CASE("cuda reductions of empty dims and 0-dim tensors", "[cuda][reduce]") {
  EMBER_REQUIRE_CUDA();
  const Tensor x = zeros({0, 5});
  const Tensor gx = x.to(kGpu);
  require_close(sum(gx, {0}), sum(x, {0}), 0, 0, "sum over 0 rows");
  require_close(mean(gx, {0}), mean(x, {0}), 0, 0, "mean over 0 rows (NaN)");
  require_close(logsumexp(gx, {0}), logsumexp(x, {0}), 0, 0, "logsumexp over 0 rows (-inf)");
  const Tensor s = scalar_tensor(2.5);
  require_close(sum(s.to(kGpu)), sum(s), 0, 0, "sum of a 0-dim tensor");
  require_close(argmax(s.to(kGpu)), argmax(s), 0, 0, "argmax of a 0-dim tensor");
}

// ---- matrix products ------------------------------------------------------------------------

// C = A B for row-major [batch, M, K] and [batch, K, N] values; also the scale sum_k |a||b| of
// each element, the size rounding errors are relative to.
void reference_mm(const std::vector<double>& a, const std::vector<double>& b, int64_t batch,
                  int64_t M, int64_t K, int64_t N, std::vector<double>& c,
                  std::vector<double>& scale) {
  c.assign(static_cast<size_t>(batch * M * N), 0.0);
  scale.assign(c.size(), 0.0);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0, sa = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double x = a[(p * M + i) * K + k], y = b[(p * K + k) * N + j];
          s += x * y;
          sa += std::fabs(x * y);
        }
        c[(p * M + i) * N + j] = s;
        scale[(p * M + i) * N + j] = sa;
      }
}

// Checks a GPU product against the float64 reference of its own (already rounded) inputs.
void check_product(const Tensor& a, const Tensor& b, const Tensor& got, double rel,
                   const std::string& what) {
  INFO(what);
  const bool batched = a.dim() == 3;
  const int64_t batch = batched ? a.size(0) : 1;
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  std::vector<double> want, scale;
  reference_mm(read(a), read(b), batch, M, K, N, want, scale);
  REQUIRE(got.dtype() == a.dtype());
  REQUIRE(got.numel() == static_cast<int64_t>(want.size()));
  const std::vector<double> g = read(got);
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - want[i]);
    const double bound = rel * scale[i] + 1e-30;
    worst = std::max(worst, err / (scale[i] + 1e-30));
    if (!(err <= bound)) ++bad;
  }
  INFO("worst error relative to sum|a||b|: " << worst);
  CHECK(bad == 0);
}

struct MmCase {
  int64_t M, K, N;
};
const MmCase kMmCases[] = {{7, 13, 5},  {1, 1, 1}, {64, 784, 512}, {1, 300, 1},
                           {33, 1, 17}, {5, 0, 3}, {3, 64, 10}};

// Operand layouts: stored contiguous, as a transposed view, with no unit stride (a copy), and
// at an odd offset (misaligned for 16-byte loads).
Tensor make_operand(const Tensor& logical_values, const std::string& kind) {
  const int64_t R = logical_values.size(0), C = logical_values.size(1);
  if (kind == "contiguous") return logical_values.to(kGpu);
  if (kind == "transposed") return logical_values.t().contiguous().to(kGpu).t();
  if (kind == "strided") {
    Tensor wide = zeros({R, 2 * C}, TensorOptions(logical_values.dtype())).to(kGpu);
    Tensor v = wide.slice(1, 0, 2 * C, 2).t().slice(0, 0, C).t();  // [R, C] stride (2C, 2)
    v.copy_(logical_values.to(kGpu));
    return v;
  }
  // "offset": one extra row in front.
  Tensor tall = zeros({R + 1, C}, TensorOptions(logical_values.dtype())).to(kGpu);
  Tensor v = tall.narrow(0, 1, R);
  v.copy_(logical_values.to(kGpu));
  return v;
}

TEST_CASE("cuda mm matches a float64 reference for every layout and dtype", "[cuda][matmul]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const char* kinds[] = {"contiguous", "transposed", "strided", "offset"};
  for (DType t : kFloats) {
    // Rounding of the inputs is part of the reference (it uses the stored values); what is
    // left is accumulation error (float for 16-bit types) and the final rounding.
    const double rel = t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-5 : 2 * eps_of(t);
    for (const MmCase& c : kMmCases) {
      const Tensor a = random_input({c.M, c.K}, t), b = random_input({c.K, c.N}, t);
      for (const char* ka : kinds)
        for (const char* kb : kinds) {
          if (c.M * c.K * c.N > 100000 && std::string(ka) != std::string(kb)) continue;
          const Tensor ga = make_operand(a, ka), gb = make_operand(b, kb);
          std::ostringstream what;
          what << "mm " << dtype_name(t) << " " << c.M << "x" << c.K << "x" << c.N << " a " << ka
               << " b " << kb;
          const Tensor got = mm(ga, gb);
          REQUIRE(got.sizes() == Shape{c.M, c.N});
          check_product(a, b, got, rel, what.str());
          // The same call again hits the cached plan and must give the same numbers.
          require_close(mm(ga, gb), got, 0, 0, what.str() + " (cached plan)");
        }
    }
  }
}

TEST_CASE("cuda bmm handles batch strides, expanded batches and transposes", "[cuda][matmul]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  for (DType t : kFloats) {
    const double rel = t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-5 : 2 * eps_of(t);
    const int64_t B = 3, M = 7, K = 13, N = 5;
    const Tensor a = random_input({B, M, K}, t), b = random_input({B, K, N}, t);
    const std::string dt = dtype_name(t).data();
    check_product(a, b, bmm(a.to(kGpu), b.to(kGpu)), rel, "bmm contiguous " + dt);
    // b stored as [B, N, K] and viewed transposed per batch.
    const Tensor gbt = b.transpose(1, 2).contiguous().to(kGpu).transpose(1, 2);
    check_product(a, b, bmm(a.to(kGpu), gbt), rel, "bmm transposed b " + dt);
    // One matrix broadcast over the batch (batch stride 0).
    const Tensor a1 = random_input({1, M, K}, t);
    const Tensor ae = a1.expand({B, M, K});
    check_product(ae, b, bmm(a1.to(kGpu).expand({B, M, K}), b.to(kGpu)), rel,
                  "bmm expanded a " + dt);
    // A batch slice with a gap between matrices.
    const Tensor wide = random_input({2 * B, M, K}, t);
    const Tensor gw = wide.to(kGpu).slice(0, 0, 2 * B, 2);
    check_product(wide.slice(0, 0, 2 * B, 2), b, bmm(gw, b.to(kGpu)), rel, "bmm every other " + dt);
  }
}

TEST_CASE("cuda mm honours the tf32 switch", "[cuda][matmul]") {
  EMBER_REQUIRE_CUDA();
  const Tensor a = random_input({64, 784}, kFloat32), b = random_input({784, 512}, kFloat32);
  const Tensor ga = a.to(kGpu), gb = b.to(kGpu);
  set_allow_tf32(true);
  // TF32 keeps 10 mantissa bits of each input: products are good to about 1e-3 relative.
  check_product(a, b, mm(ga, gb), 2e-3, "mm tf32 on");
  set_allow_tf32(false);
  check_product(a, b, mm(ga, gb), 1e-5, "mm tf32 off (full fp32)");
}

TEST_CASE("cuda mm rejects integer dtypes", "[cuda][matmul]") {
  EMBER_REQUIRE_CUDA();
  const Tensor a = randint(0, 5, {3, 4}, TensorOptions(kInt64).device(kGpu));
  const Tensor b = randint(0, 5, {4, 2}, TensorOptions(kInt64).device(kGpu));
  REQUIRE_THROWS_WITH(mm(a, b), Contains("mm: CUDA supports float types only, got int64"));
  REQUIRE_THROWS_WITH(bmm(a.unsqueeze(0), b.unsqueeze(0)),
                      Contains("bmm: CUDA supports float types only, got int64"));
}

// ---- softmax --------------------------------------------------------------------------------

TEST_CASE("cuda softmax and log_softmax match the cpu", "[cuda][softmax]") {
  EMBER_REQUIRE_CUDA();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{7, 13}, 1},     {{7, 13}, 0},   {{3, 5, 17}, 0}, {{3, 5, 17}, 1},
                        {{3, 5, 17}, 2},  {{1, 1}, 0},    {{1, 1}, 1},     {{2, 100000}, 1},
                        {{2, 100000}, 0}, {{4, 3000}, 1}, {{3, 20000}, 1}, {{40, 3, 1000}, 1},
                        {{64, 10}, 1}};
  for (DType t : kFloats) {
    for (const Case& c : cases) {
      for (const Layout& l : layouts_for(c.shape.size())) {
        const std::string lname = l.name;
        if (numel_of(c.shape) > 50000 && lname != "contiguous") continue;
        const auto [x, gx] = make_pair_for(l, c.shape, t);
        std::ostringstream what;
        what << dtype_name(t) << " shape " << c.shape << " dim " << c.dim << " (" << l.name << ")";
        // Probabilities are at most 1: an absolute slack of one rounding step near 1 suffices.
        require_close(softmax(gx, c.dim), softmax(x, c.dim), 4 * eps_of(t), eps_of(t),
                      "softmax " + what.str());
        // log-probabilities reach -log(C) - a few: error scales with their size.
        require_close(log_softmax(gx, c.dim), log_softmax(x, c.dim), 4 * eps_of(t), 4 * eps_of(t),
                      "log_softmax " + what.str());
      }
    }
  }
}

// ---- cross entropy --------------------------------------------------------------------------

// loss_i = log(sum_j exp(x_ij)) - x_i,t_i in float64 from the stored logits.
std::vector<double> reference_ce(const Tensor& logits, const std::vector<int64_t>& target,
                                 int64_t ignore) {
  const std::vector<double> x = read(logits);
  const int64_t N = logits.size(0), C = logits.size(1);
  std::vector<double> out(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    if (target[i] == ignore) continue;
    double m = -std::numeric_limits<double>::infinity(), s = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max(m, x[i * C + j]);
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[i * C + j] - m);
    out[i] = m + std::log(s) - x[i * C + target[i]];
  }
  return out;
}

TEST_CASE("cuda cross entropy matches the cpu and a float64 reference", "[cuda][loss]") {
  EMBER_REQUIRE_CUDA();
  struct Case {
    int64_t N, C;
  };
  const Case cases[] = {{64, 10}, {7, 13}, {1, 1}, {3, 5000}, {5, 100000}, {1000, 3}};
  for (DType t : kFloats) {
    for (const Case& c : cases) {
      const Tensor logits = random_input({c.N, c.C}, t);
      std::vector<int64_t> target(static_cast<size_t>(c.N));
      for (int64_t i = 0; i < c.N; ++i) target[i] = (i * 7 + 3) % c.C;
      if (c.N > 2) target[1] = -100;  // ignored
      const Tensor tt = from_vector(target, {c.N}, TensorOptions(kInt64));
      std::ostringstream what;
      what << "cross_entropy " << dtype_name(t) << " N " << c.N << " C " << c.C;
      const Tensor got = cross_entropy_per_sample(logits.to(kGpu), tt.to(kGpu));
      require_close(got, cross_entropy_per_sample(logits, tt), 4 * eps_of(t), 4 * eps_of(t),
                    what.str() + " vs cpu");
      const std::vector<double> want = reference_ce(logits, target, -100);
      const std::vector<double> g = read(got);
      for (int64_t i = 0; i < c.N; ++i) {
        INFO(what.str() << " sample " << i);
        // The result is stored in dtype t: allow its rounding plus float accumulation.
        CHECK(std::fabs(g[i] - want[i]) <= 4 * eps_of(t) * (1 + std::fabs(want[i])));
      }
    }
  }
  // A non-default ignore_index.
  const Tensor logits = random_input({4, 6}, kFloat32);
  const Tensor tt = from_vector(std::vector<int64_t>{2, 5, 5, 0}, {4}, TensorOptions(kInt64));
  require_close(cross_entropy_per_sample(logits.to(kGpu), tt.to(kGpu), 5),
                cross_entropy_per_sample(logits, tt, 5), 1e-5, 1e-6, "ignore_index 5");
}

// ---- out-of-range indices: the device error flag -------------------------------------------

// Runs `bad` (which enqueues a kernel given out-of-range indices), expects the error at the
// next synchronize, then checks the flag was cleared: `good` runs and matches `want` (the CPU
// result: within `rtol` for float results). `message` is part of the expected error text: the
// op and the offending value.
void expect_flagged(const std::function<Tensor()>& bad, const std::function<Tensor()>& good,
                    const Tensor& want, const char* what, const char* message, double rtol = 0) {
  INFO(what);
  Tensor r;
  REQUIRE_NOTHROW(r = bad());  // the launch itself does not fail...
  // ...the next synchronize reports it.
  REQUIRE_THROWS_AS(cuda::synchronize(), Error);
  REQUIRE_NOTHROW(r = bad());
  REQUIRE_THROWS_WITH(cuda::synchronize(), Contains(message));
  REQUIRE_NOTHROW(cuda::synchronize());  // once
  const Tensor ok = good();
  REQUIRE_NOTHROW(cuda::synchronize());
  require_close(ok, want, rtol, rtol, std::string(what) + " (the op after the error)");
}

TEST_CASE("cuda out-of-range indices raise ember::Error at the next sync", "[cuda][index]") {
  EMBER_REQUIRE_CUDA();
  const Tensor logits = random_input({4, 5}, kFloat32);
  const Tensor glogits = logits.to(kGpu);
  const Tensor good = from_vector(std::vector<int64_t>{0, 4, 2, 1}, {4}, TensorOptions(kInt64));
  const Tensor bad_hi = from_vector(std::vector<int64_t>{0, 5, 2, 1}, {4}, TensorOptions(kInt64));
  const Tensor bad_lo = from_vector(std::vector<int64_t>{0, 1, -1, 1}, {4}, TensorOptions(kInt64));
  const Tensor want_ce = cross_entropy_per_sample(logits, good);
  auto ce_good = [&] { return cross_entropy_per_sample(glogits, good.to(kGpu)); };
  expect_flagged([&] { return cross_entropy_per_sample(glogits, bad_hi.to(kGpu)); }, ce_good,
                 want_ce, "cross_entropy target == C", "cross_entropy: target 5", 1e-5);
  expect_flagged([&] { return cross_entropy_per_sample(glogits, bad_lo.to(kGpu)); }, ce_good,
                 want_ce, "cross_entropy target -1", "cross_entropy: target -1", 1e-5);

  // The error also surfaces through a host copy of the result.
  {
    Tensor r = cross_entropy_per_sample(glogits, bad_hi.to(kGpu));
    REQUIRE_THROWS_AS(sum(r).item<float>(), Error);
    REQUIRE_NOTHROW(cuda::synchronize());
  }

  const Tensor x = random_input({4, 5}, kFloat32);
  const Tensor gx = x.to(kGpu);
  const Tensor gi =
      from_vector(std::vector<int64_t>{0, 4, 1, 3, 2, 2, 0, 4}, {4, 2}, TensorOptions(kInt64));
  const Tensor gi_bad =
      from_vector(std::vector<int64_t>{0, 4, 1, 5, 2, 2, 0, 4}, {4, 2}, TensorOptions(kInt64));
  expect_flagged([&] { return gather(gx, 1, gi_bad.to(kGpu)); },
                 [&] { return gather(gx, 1, gi.to(kGpu)); }, gather(x, 1, gi), "gather",
                 "gather: index 5");

  const Tensor si = from_vector(std::vector<int64_t>{3, 0, 3}, {3}, TensorOptions(kInt64));
  const Tensor si_bad = from_vector(std::vector<int64_t>{3, -1, 3}, {3}, TensorOptions(kInt64));
  expect_flagged([&] { return index_select(gx, 0, si_bad.to(kGpu)); },
                 [&] { return index_select(gx, 0, si.to(kGpu)); }, index_select(x, 0, si),
                 "index_select", "index_select: index -1");

  const Tensor oi = from_vector(std::vector<int64_t>{0, 6, 3}, {3}, TensorOptions(kInt64));
  const Tensor oi_bad = from_vector(std::vector<int64_t>{0, 7, 3}, {3}, TensorOptions(kInt64));
  expect_flagged([&] { return one_hot(oi_bad.to(kGpu), 7); },
                 [&] { return one_hot(oi.to(kGpu), 7); }, one_hot(oi, 7), "one_hot",
                 "one_hot: class 7");
}

// ---- gather, index_select, one_hot ---------------------------------------------------------

TEST_CASE("cuda gather, index_select and one_hot match the cpu", "[cuda][index]") {
  EMBER_REQUIRE_CUDA();
  struct Case {
    Shape input, index;
    int64_t dim;
  };
  const Case gathers[] = {{{7, 13}, {7, 5}, 1},        {{7, 13}, {4, 13}, 0},
                          {{3, 5, 17}, {3, 9, 10}, 1}, {{3, 5, 17}, {2, 5, 30}, 2},
                          {{1, 1}, {1, 1}, 0},         {{2, 100000}, {2, 1000}, 1},
                          {{40, 64}, {25, 64}, 0}};
  for (DType t : kAll) {
    for (const Case& c : gathers) {
      const Tensor x = random_input(c.input, t);
      const Tensor idx = randint(0, c.input[static_cast<int>(c.dim)], c.index);
      std::ostringstream what;
      what << "gather " << dtype_name(t) << " input " << c.input << " index " << c.index << " dim "
           << c.dim;
      require_close(gather(x.to(kGpu), c.dim, idx.to(kGpu)), gather(x, c.dim, idx), 0, 0,
                    what.str());
      // A transposed input (the API makes it contiguous on the GPU first).
      const Tensor gxt =
          x.to(kGpu).transpose(0, x.dim() - 1).contiguous().transpose(0, x.dim() - 1);
      require_close(gather(gxt, c.dim, idx.to(kGpu)), gather(x, c.dim, idx), 0, 0,
                    what.str() + " (transposed copy)");
    }
    for (const Case& c : gathers) {
      const int64_t n = c.index[static_cast<int>(c.dim)];
      const Tensor x = random_input(c.input, t);
      const Tensor idx = randint(0, c.input[static_cast<int>(c.dim)], {n});
      std::ostringstream what;
      what << "index_select " << dtype_name(t) << " input " << c.input << " n " << n << " dim "
           << c.dim;
      require_close(index_select(x.to(kGpu), c.dim, idx.to(kGpu)), index_select(x, c.dim, idx), 0,
                    0, what.str());
      // The same rows picked from a strided view of the input.
      const Tensor wide = random_input(Shape{2 * c.input[0]}, t);
      const Tensor xv = wide.slice(0, 0, 2 * c.input[0], 2);
      const Tensor iv = randint(0, c.input[0], {n});
      require_close(index_select(wide.to(kGpu).slice(0, 0, 2 * c.input[0], 2), 0, iv.to(kGpu)),
                    index_select(xv, 0, iv), 0, 0, what.str() + " (strided 1-D input)");
    }
  }
  for (const Shape& s : {Shape{3, 5}, Shape{64}, Shape{1}, Shape{2, 3, 4}}) {
    const Tensor idx = randint(0, 7, s);
    require_close(one_hot(idx.to(kGpu), 7), one_hot(idx, 7), 0, 0, "one_hot " + s.str());
    require_close(one_hot(idx.to(kGpu)), one_hot(idx), 0, 0, "one_hot inferred " + s.str());
  }
}

// ---- cat -----------------------------------------------------------------------------------

TEST_CASE("cuda cat matches the cpu for mixed layouts and many inputs", "[cuda][cat]") {
  EMBER_REQUIRE_CUDA();
  for (DType t : kAll) {
    for (int64_t dim : {0, 1, 2}) {
      const int64_t sizes[] = {3, 1, 0, 7, 2};
      std::vector<Tensor> cpu, gpu;
      for (size_t i = 0; i < std::size(sizes); ++i) {
        Shape s{4, 5, 6};
        s[static_cast<int>(dim)] = sizes[i];
        const Layout l = layouts_for(3)[i % 3];  // contiguous, transposed, every other column
        const auto [x, gx] = make_pair_for(l, s, t);
        cpu.push_back(x);
        gpu.push_back(gx);
      }
      std::ostringstream what;
      what << "cat " << dtype_name(t) << " dim " << dim;
      require_close(cat(gpu, dim), cat(cpu, dim), 0, 0, what.str());
    }
    // More inputs than one launch takes.
    std::vector<Tensor> cpu, gpu;
    for (int i = 0; i < 100; ++i) {
      const Tensor x = random_input({2, 1 + i % 5}, t);
      cpu.push_back(x);
      gpu.push_back(x.to(kGpu));
    }
    require_close(cat(gpu, 1), cat(cpu, 1), 0, 0,
                  std::string("cat 100 inputs ") + dtype_name(t).data());
    const std::vector<Tensor> three_cpu = {cpu[0], cpu[5], cpu[10]};  // all [2, 1]
    std::vector<Tensor> three_gpu;
    for (const Tensor& x : three_cpu) three_gpu.push_back(x.to(kGpu));
    for (int64_t d : {0, 1, 2})
      require_close(stack(three_gpu, d), stack(three_cpu, d), 0, 0,
                    "stack dim " + std::to_string(d));
  }
  // Big inputs (grid-stride loops).
  const Tensor a = random_input({3, 100000}, kFloat32), b = random_input({5, 100000}, kFloat32);
  require_close(cat({a.to(kGpu), b.to(kGpu).t().contiguous().t()}, 0), cat({a, b}, 0), 0, 0,
                "cat big");
}

}  // namespace
}  // namespace ember
