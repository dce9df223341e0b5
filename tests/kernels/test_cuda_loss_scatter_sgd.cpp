// The CUDA kernels of cross_entropy (with label smoothing), cross_entropy_backward, scatter_add
// and sgd_update against the CPU path on the same inputs:
// long rows (a warp, a block of 256 and of 1024 threads per row), heavy duplicate indices,
// every dtype each op takes, mixed-dtype and many-tensor optimizer updates (more than one
// launch's worth), and the device error flag for out-of-range targets and indices. The CPU
// side is itself checked against float64 references in the op-table sweep.
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "test_util.h"

using Catch::Matchers::Contains;

namespace ember {
namespace {

using test::read;

const Device kGpu = Device::cuda(0);
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

// Unit roundoff: the largest relative error of one rounding.
double unit_of(DType t) {
  switch (t) {
    case kFloat64:
      return std::ldexp(1.0, -53);
    case kFloat32:
      return std::ldexp(1.0, -24);
    case kFloat16:
      return std::ldexp(1.0, -11);
    case kBFloat16:
      return std::ldexp(1.0, -8);
    default:
      return 0;
  }
}

Tensor random_input(const Shape& s, DType t) {
  if (is_floating(t)) return randn(s, TensorOptions(t));
  return randint(-20, 21, s, TensorOptions(t));
}

Tensor int64s(const std::vector<int64_t>& v, const Shape& s) {
  return from_vector(v, s, TensorOptions(kInt64));
}

// |got - want| <= atol + rtol * |want| element by element (NaNs must match); got on the GPU.
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

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : read(t)) m = std::max(m, std::fabs(v));
  return m;
}

Attrs ce_attrs(int64_t ignore_index, double smoothing) {
  Attrs a;
  a.ignore_index = ignore_index;
  a.label_smoothing = smoothing;
  return a;
}

// Targets (i * 7 + 3) % C, sample 1 ignored when there are more than two.
Tensor ce_targets(int64_t N, int64_t C) {
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) t[static_cast<size_t>(i)] = (i * 7 + 3) % C;
  if (N > 2) t[1] = -100;
  return int64s(t, {N});
}

struct CeCase {
  int64_t N, C;
};
// Row widths for each launch shape: a warp per row (C <= 1024), 256 threads (<= 8192), 1024.
constexpr CeCase kCeCases[] = {{64, 10}, {7, 13}, {1, 1}, {3, 5000}, {5, 100000}, {1000, 3}};
constexpr double kSmoothings[] = {0.0, 0.1, 1.0};

// Runs `bad` (which enqueues a kernel given out-of-range indices) and expects `message` at the
// next synchronize, then that the flag was cleared: `good` runs and matches `want` (CPU).
void expect_flagged(const std::function<Tensor()>& bad, const std::function<Tensor()>& good,
                    const Tensor& want, const char* what, const char* message, double rtol) {
  INFO(what);
  Tensor r;
  REQUIRE_NOTHROW(r = bad());  // the launch itself does not fail...
  REQUIRE_THROWS_WITH(cuda::synchronize(), Contains(message));  // ...the next sync reports it
  REQUIRE_NOTHROW(cuda::synchronize());                         // once
  const Tensor ok = good();
  REQUIRE_NOTHROW(cuda::synchronize());
  require_close(ok, want, rtol, rtol, std::string(what) + " (the op after the error)");
}

// ---- cross entropy ----------------------------------------------------------------------------

TEST_CASE("cuda cross entropy with label smoothing matches the cpu", "[cuda][loss]") {
  EMBER_REQUIRE_CUDA();
  for (DType t : kFloats) {
    for (const CeCase& c : kCeCases) {
      const Tensor x = random_input({c.N, c.C}, t), tt = ce_targets(c.N, c.C);
      const Tensor gx = x.to(kGpu), gt = tt.to(kGpu);
      for (double e : kSmoothings) {
        std::ostringstream what;
        what << "cross_entropy " << dtype_name(t) << " N " << c.N << " C " << c.C
             << " label_smoothing " << e;
        const Tensor want = dispatch(OpId::cross_entropy, {x, tt}, ce_attrs(-100, e));
        const Tensor got = dispatch(OpId::cross_entropy, {gx, gt}, ce_attrs(-100, e));
        // Losses are O(log C + |x|): allow the dtype's rounding of values that size.
        require_close(got, want, 4 * eps_of(t), 4 * eps_of(t) * (1 + max_abs(want)), what.str());
      }
    }
  }
  // A custom ignore_index that is also a valid class.
  const Tensor x = random_input({6, 9}, kFloat32);
  const Tensor tt = int64s({2, 5, 2, 0, 8, 2}, {6});
  require_close(dispatch(OpId::cross_entropy, {x.to(kGpu), tt.to(kGpu)}, ce_attrs(2, 0.3)),
                dispatch(OpId::cross_entropy, {x, tt}, ce_attrs(2, 0.3)), 1e-5, 1e-6,
                "ignore_index 2, label_smoothing 0.3");
}

TEST_CASE("cuda cross entropy backward matches the cpu", "[cuda][loss]") {
  EMBER_REQUIRE_CUDA();
  for (DType t : kFloats) {
    for (const CeCase& c : kCeCases) {
      const Tensor x = random_input({c.N, c.C}, t), tt = ce_targets(c.N, c.C);
      const Tensor gx = x.to(kGpu), gt = tt.to(kGpu);
      const Tensor grad = random_input({c.N}, t);
      // A contiguous gradient, and a mean's: one value expanded to [N] (stride 0).
      const Tensor scalar = random_input({1}, t);
      const std::pair<Tensor, Tensor> grads[] = {
          {grad, grad.to(kGpu)}, {scalar.expand({c.N}), scalar.to(kGpu).expand({c.N})}};
      for (double e : kSmoothings) {
        for (const auto& [g, gg] : grads) {
          std::ostringstream what;
          what << "cross_entropy_backward " << dtype_name(t) << " N " << c.N << " C " << c.C
               << " label_smoothing " << e << (g.is_contiguous() ? "" : " expanded grad");
          const Tensor want = dispatch(OpId::cross_entropy_backward, {g, x, tt}, ce_attrs(-100, e));
          const Tensor got =
              dispatch(OpId::cross_entropy_backward, {gg, gx, gt}, ce_attrs(-100, e));
          // Each element is |grad| times a difference of probabilities in [-1, 1].
          require_close(got, want, 4 * eps_of(t), 4 * eps_of(t) * max_abs(g), what.str());
        }
      }
    }
  }
}

TEST_CASE("cuda reduced cross entropy backward takes a 0-dim host gradient, bit for bit",
          "[cuda][loss]") {
  EMBER_REQUIRE_CUDA();
  // The host value must give exactly what the same value on the device gives, for every launch
  // shape of the reduced kernels: one block, several (counting targets in each block), and
  // past the rows where a kernel of its own counts them.
  constexpr CeCase kCases[] = {{64, 10}, {1000, 3}, {3, 5000}, {300, 100}, {20000, 10}};
  for (DType t : kFloats) {
    for (const CeCase& c : kCases) {
      const Tensor gx = random_input({c.N, c.C}, t).to(kGpu), gt = ce_targets(c.N, c.C).to(kGpu);
      const Tensor host = random_input({}, t);
      for (LossReduction red : {LossReduction::Mean, LossReduction::Sum}) {
        Attrs a = ce_attrs(-100, 0.1);
        a.reduction = red;
        INFO(dtype_name(t) << " N " << c.N << " C " << c.C
                           << (red == LossReduction::Mean ? " mean" : " sum"));
        const Tensor by_value = dispatch(OpId::cross_entropy_backward, {host, gx, gt}, a);
        const Tensor on_device = dispatch(OpId::cross_entropy_backward, {host.to(kGpu), gx, gt}, a);
        REQUIRE(by_value.device() == kGpu);
        const std::vector<double> x = read(by_value), y = read(on_device);
        REQUIRE(x.size() == y.size());
        size_t differ = 0;
        for (size_t i = 0; i < x.size(); ++i) differ += x[i] != y[i];
        CHECK(differ == 0);
        CHECK(max_abs(on_device) > 0);
      }
    }
  }
  // Only a reduced loss's 0-dim gradient may be on the host.
  const Tensor gx = random_input({4, 3}, kFloat32).to(kGpu), gt = ce_targets(4, 3).to(kGpu);
  Attrs mean = ce_attrs(-100, 0);
  mean.reduction = LossReduction::Mean;
  CHECK_THROWS_WITH(
      dispatch(OpId::cross_entropy_backward, {random_input({1}, kFloat32), gx, gt}, mean),
      Contains("cross_entropy_backward: grad must be"));
  CHECK_THROWS_WITH(dispatch(OpId::cross_entropy_backward, {random_input({4}, kFloat32), gx, gt},
                             ce_attrs(-100, 0)),
                    Contains("cross_entropy_backward: grad must be"));
}

TEST_CASE("cuda cross entropy backward zeroes ignored rows, also for a valid-class ignore_index",
          "[cuda][loss]") {
  EMBER_REQUIRE_CUDA();
  const Tensor x = random_input({5, 2000}, kFloat32), g = random_input({5}, kFloat32);
  const Tensor tt = int64s({7, 3, 7, 1999, 0}, {5});
  const Tensor got = dispatch(OpId::cross_entropy_backward, {g.to(kGpu), x.to(kGpu), tt.to(kGpu)},
                              ce_attrs(7, 0.2));
  const std::vector<double> v = read(got);
  for (int64_t i : {0, 2})
    for (int64_t j = 0; j < 2000; ++j) REQUIRE(v[static_cast<size_t>(i * 2000 + j)] == 0.0);
  require_close(got, dispatch(OpId::cross_entropy_backward, {g, x, tt}, ce_attrs(7, 0.2)), 1e-5,
                1e-7, "ignore_index 7");
}

TEST_CASE("cuda cross entropy forward (smoothed) and backward flag out-of-range targets",
          "[cuda][loss][index]") {
  EMBER_REQUIRE_CUDA();
  for (int64_t C : {5, 3000}) {  // a warp per row, and a block per row
    const Tensor x = random_input({4, C}, kFloat32), g = random_input({4}, kFloat32);
    const Tensor gx = x.to(kGpu), gg = g.to(kGpu);
    const Tensor good = int64s({0, C - 1, 2, 1}, {4});
    const Tensor bad_hi = int64s({0, C, 2, 1}, {4}), bad_lo = int64s({0, 1, -1, 1}, {4});
    const std::string hi = "cross_entropy: target " + std::to_string(C);
    const Attrs a = ce_attrs(-100, 0.1);
    auto fwd = [&](const Tensor& t) { return dispatch(OpId::cross_entropy, {gx, t.to(kGpu)}, a); };
    auto bwd = [&](const Tensor& t) {
      return dispatch(OpId::cross_entropy_backward, {gg, gx, t.to(kGpu)}, a);
    };
    const Tensor want_f = dispatch(OpId::cross_entropy, {x, good}, a);
    const Tensor want_b = dispatch(OpId::cross_entropy_backward, {g, x, good}, a);
    expect_flagged([&] { return fwd(bad_hi); }, [&] { return fwd(good); }, want_f,
                   "smoothed forward, target == C", hi.c_str(), 1e-5);
    expect_flagged([&] { return bwd(bad_hi); }, [&] { return bwd(good); }, want_b,
                   "backward, target == C", hi.c_str(), 1e-5);
    expect_flagged([&] { return bwd(bad_lo); }, [&] { return bwd(good); }, want_b,
                   "backward, target -1", "cross_entropy: target -1", 1e-5);
    // Through a host copy of the result, too.
    REQUIRE_THROWS_WITH(bwd(bad_hi).cpu(), Contains(hi));
    REQUIRE_NOTHROW(cuda::synchronize());
  }
}

// ---- scatter_add ------------------------------------------------------------------------------

struct ScatterCase {
  Shape src;
  int64_t dim;
  Shape out;
};

Tensor scatter_add_op(const Tensor& src, const Tensor& index, int64_t dim, const Shape& shape,
                      const Tensor* out = nullptr) {
  Attrs a;
  a.dim = dim;
  a.shape = shape;
  return dispatch(OpId::scatter_add, {src, index}, a, out);
}

// Random indices into [0, size) for every element of `s`.
Tensor random_index(const Shape& s, int64_t size) {
  return randint(0, size, s, TensorOptions(kInt64));
}

TEST_CASE("cuda scatter_add matches the cpu with heavy duplicates", "[cuda][index]") {
  EMBER_REQUIRE_CUDA();
  const ScatterCase cases[] = {
      {{1000, 64}, 0, {10, 64}},  // ~100 adds per element
      {{3, 7, 5}, 1, {3, 4, 6}},  // smaller than the output outside dim
      {{100000}, 0, {17}},        // ~6000 adds per element
      {{5, 300}, 1, {5, 300}},    //
      {{}, 0, {}},                // 0-dim
      {{0, 4}, 0, {3, 4}},        // nothing to add: zeros
      {{2, 3, 4, 5}, 3, {2, 3, 4, 2}},
  };
  for (DType t : kNumeric) {
    for (const ScatterCase& c : cases) {
      std::ostringstream what;
      what << "scatter_add " << dtype_name(t) << " " << c.src << " dim " << c.dim << " into "
           << c.out;
      const Tensor src = random_input(c.src, t);
      const Tensor index = random_index(c.src, c.out.size() == 0 ? 1 : c.out[c.dim]);
      const Tensor want = scatter_add_op(src, index, c.dim, c.out);
      const Tensor gsrc = src.to(kGpu), gindex = index.to(kGpu);
      const Tensor got = scatter_add_op(gsrc, gindex, c.dim, c.out);
      // Into an output that holds other values: they are overwritten, not added to.
      const Tensor dst = full(c.out, 7, TensorOptions(t).device(kGpu));
      scatter_add_op(gsrc, gindex, c.dim, c.out, &dst);
      if (!is_floating(t)) {
        require_close(got, want, 0, 0, what.str());
        require_close(dst, want, 0, 0, what.str() + " into a filled output");
        continue;
      }
      // Both sides round once per add (the CPU in float for 16-bit types, the GPU in t, in an
      // order that varies between runs), each add off by at most a unit roundoff of the sum of
      // magnitudes so far.
      const std::vector<double> w = read(want);
      const std::vector<double> m =
          read(scatter_add_op(cast(abs(src), kFloat64), index, c.dim, c.out));
      const std::vector<double> k =
          read(scatter_add_op(ones(c.src, TensorOptions(kFloat64)), index, c.dim, c.out));
      for (const bool filled : {false, true}) {
        const Tensor& r = filled ? dst : got;
        REQUIRE(r.device() == kGpu);
        REQUIRE(r.sizes() == want.sizes());
        REQUIRE(r.dtype() == t);
        const std::vector<double> g = read(r);
        for (size_t i = 0; i < g.size(); ++i) {
          INFO(what.str() << (filled ? " into a filled output" : "") << " element " << i << ": got "
                          << g[i] << ", cpu " << w[i]);
          CHECK(std::fabs(g[i] - w[i]) <= 2 * (k[i] + 1) * unit_of(t) * m[i]);
        }
      }
    }
  }
}

TEST_CASE("cuda scatter_add reads a broadcast index through its strides", "[cuda][index]") {
  EMBER_REQUIRE_CUDA();
  // index_select's backward: a 1-D index expanded over the other dims (zero strides), never
  // copied. Distinct indices, so every element gets one add and the sums are exact; the same
  // index made contiguous, and the CPU, give the same bits.
  for (const auto& [rows, cols, dim] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{128, 128, 0}, {37, 5, 0}, {6, 300, 1}}) {
    INFO(rows << " x " << cols << " along dim " << dim);
    const int64_t n = dim == 0 ? rows : cols;
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = (i * 7 + 3) % n;
    REQUIRE(n % 7 != 0);  // i -> 7i + 3 (mod n) is then a permutation
    const Tensor perm = int64s(order, {n});
    Shape is{1, 1};
    is[static_cast<size_t>(dim)] = n;
    const Shape shape{rows, cols};
    const Tensor src = randn(shape);
    const Tensor expanded = perm.reshape(is).expand(shape);
    REQUIRE_FALSE(expanded.is_contiguous());
    const Tensor want = scatter_add_op(src, expanded.contiguous(), dim, shape);
    const Tensor cpu = scatter_add_op(src, expanded, dim, shape);
    require_close(cpu.to(kGpu), want, 0, 0, "cpu, broadcast index");
    const Tensor gindex = perm.to(kGpu).reshape(is).expand(shape);
    const Tensor got = scatter_add_op(src.to(kGpu), gindex, dim, shape);
    require_close(got, want, 0, 0, "cuda, broadcast index");
  }
}

TEST_CASE("cuda scatter_add flags out-of-range indices", "[cuda][index]") {
  EMBER_REQUIRE_CUDA();
  const Tensor src = random_input({4, 3}, kFloat32);
  const Tensor gsrc = src.to(kGpu);
  const Tensor good = int64s({0, 4, 1, 3, 2, 2, 0, 4, 1, 1, 1, 3}, {4, 3});
  const Tensor bad_hi = int64s({0, 4, 1, 3, 5, 2, 0, 4, 1, 1, 1, 3}, {4, 3});
  const Tensor bad_lo = int64s({0, 4, 1, 3, 2, 2, 0, -2, 1, 1, 1, 3}, {4, 3});
  const Tensor want = scatter_add_op(src, good, 0, {5, 3});
  auto run = [&](const Tensor& i) { return scatter_add_op(gsrc, i.to(kGpu), 0, {5, 3}); };
  expect_flagged([&] { return run(bad_hi); }, [&] { return run(good); }, want, "index == size",
                 "scatter_add: index 5", 1e-6);
  expect_flagged([&] { return run(bad_lo); }, [&] { return run(good); }, want, "index -2",
                 "scatter_add: index -2", 1e-6);
}

// ---- sgd_update -------------------------------------------------------------------------------

struct SgdVariant {
  const char* name;
  float lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, buffers;
};
constexpr SgdVariant kSgdVariants[] = {
    {"plain", 0.1f, 0, 0, 0, false, false, false},
    {"momentum, dampening, weight decay", 0.05f, 0.9f, 0.1f, 0.01f, false, false, true},
    {"nesterov", 0.2f, 0.9f, 0, 0.05f, true, false, true},
    {"maximize", 0.1f, 0.5f, 0.3f, 0.02f, false, true, true},
    {"maximize, weight decay, no momentum", 0.1f, 0, 0, 0.1f, false, true, false},
};

// One optimizer group's tensors on one device.
struct SgdGroup {
  std::vector<Tensor> params, grads, bufs;
  Tensor hyper, step;
};

SgdGroup clone_to(const SgdGroup& g, Device d) {
  SgdGroup o;
  for (const Tensor& t : g.params) o.params.push_back(t.to(d).clone());
  for (const Tensor& t : g.grads) o.grads.push_back(t.to(d).clone());
  for (const Tensor& t : g.bufs) o.bufs.push_back(t.to(d).clone());
  o.hyper = g.hyper.to(d).clone();
  o.step = g.step.to(d).clone();
  return o;
}

void sgd_step(SgdGroup& g, const SgdVariant& v) {
  std::vector<Tensor> in = {g.hyper, g.step};
  in.insert(in.end(), g.params.begin(), g.params.end());
  in.insert(in.end(), g.grads.begin(), g.grads.end());
  if (v.buffers) in.insert(in.end(), g.bufs.begin(), g.bufs.end());
  Attrs a;
  a.num_tensors = static_cast<int64_t>(g.params.size());
  a.nesterov = v.nesterov;
  a.maximize = v.maximize;
  a.momentum_buffers = v.buffers;
  dispatch(OpId::sgd_update, std::span<const Tensor>(in), a);
}

// Three steps on each device; between steps the hyperparameters and the step count change in
// place in their tensors (as the optimizer's set_lr does), and the gradients change too.
void check_sgd(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes,
               const SgdVariant& v, const std::string& what) {
  SgdGroup cpu;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const DType t = dtypes[i % dtypes.size()];
    cpu.params.push_back(random_input(shapes[i], t));
    cpu.grads.push_back(random_input(shapes[i], t));
    cpu.bufs.push_back(random_input(shapes[i], t));  // overwritten by the first step
  }
  cpu.hyper = from_vector(std::vector<float>{v.lr, v.momentum, v.dampening, v.weight_decay}, {4},
                          TensorOptions(kFloat32));
  cpu.step = zeros({}, TensorOptions(kFloat32));
  SgdGroup gpu = clone_to(cpu, kGpu);
  for (int s = 0; s < 3; ++s) {
    for (SgdGroup* g : {&cpu, &gpu}) {
      g->step.fill_(s);
      g->hyper.narrow(0, 0, 1).fill_(v.lr * (1 + 0.5 * s));
    }
    if (s > 0) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        cpu.grads[i] = random_input(shapes[i], cpu.params[i].dtype());
        gpu.grads[i] = cpu.grads[i].to(kGpu);
      }
    }
    sgd_step(cpu, v);
    sgd_step(gpu, v);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    const DType t = cpu.params[i].dtype();
    const std::string w = what + " tensor " + std::to_string(i) + " " + std::string(dtype_name(t));
    // float intermediates may round differently (FMA on the GPU): a few units of t.
    const double tol = 4 * eps_of(t);
    require_close(gpu.params[i], cpu.params[i], tol, tol * (1 + max_abs(cpu.params[i])),
                  w + " param");
    if (v.buffers)
      require_close(gpu.bufs[i], cpu.bufs[i], tol, tol * (1 + max_abs(cpu.bufs[i])), w + " buf");
  }
}

TEST_CASE("cuda sgd_update matches the cpu for mixed dtypes in one call", "[cuda][optim]") {
  EMBER_REQUIRE_CUDA();
  const std::vector<Shape> shapes = {{512, 784}, {512}, {10, 512}, {10}, {0}, {3, 3, 3}, {1}};
  for (const SgdVariant& v : kSgdVariants) {
    for (DType t : kFloats)
      check_sgd(shapes, {t}, v, std::string(v.name) + " " + std::string(dtype_name(t)));
    check_sgd(shapes, {kFloat32, kFloat16, kFloat64, kBFloat16}, v,
              std::string(v.name) + " mixed dtypes");
  }
}

TEST_CASE("cuda sgd_update takes more tensors than one launch holds", "[cuda][optim]") {
  EMBER_REQUIRE_CUDA();
  std::vector<Shape> shapes;
  for (int i = 0; i < 150; ++i) shapes.push_back({(i * 37) % 300 + 1});
  check_sgd(shapes, {kFloat32}, kSgdVariants[2], "150 tensors nesterov");
  check_sgd(shapes, {kFloat32, kBFloat16}, kSgdVariants[1], "150 tensors momentum");
}

}  // namespace
}  // namespace ember
