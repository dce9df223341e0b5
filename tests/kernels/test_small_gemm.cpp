// The small GEMMs (kernels/cuda/small_gemm.h) and their two users, the eager mm and the JIT's
// GEMM lowering:
//  - the host rule picking a kernel (runs everywhere, no GPU needed);
//  - eager mm on the GPU against a float64 product computed here with plain loops, over the
//    seed MLP's shapes and odd ones, row-major / transposed / strided operands, both dtypes;
//  - small_gemm with BIAS / RELU_BIAS against the float64 reference, and against eager
//    add(mm) / relu(add(mm)) bit for bit (the epilogue must round like eager's add and relu; that
//    comparison alone would prove nothing about the product, since eager mm takes the same
//    kernel), a NaN in A included; the lowered Linear group likewise;
//  - bad calls throw ember::Error before anything is queued.
//
// Tolerance against the float64 reference: |got - ref| <= rtol |ref| + K eps sum_k |a_ik b_kj|,
// the classical bound for K products summed in any order with one rounding each (eps of the
// dtype), plus rtol = 1e-5 (float32) / 1e-12 (float64) for the final rounding and the bias
// add's one rounding (relu moves no value further from the reference: |relu(x) - relu(y)| <=
// |x - y|). A NaN in the reference (a NaN operand) must be a NaN in the result.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "kernels/cuda/small_gemm.h"
#include "test_util.h"

using namespace ember;
namespace kc = ember::kernels::cuda;

namespace {

kc::GemmMatrix mat(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  kc::GemmMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.row_stride = rs;
  m.col_stride = cs;
  return m;
}
kc::GemmMatrix row_major(int64_t rows, int64_t cols) { return mat(rows, cols, cols, 1); }
// The transposed view of a row-major [cols, rows] tensor.
kc::GemmMatrix transposed(int64_t rows, int64_t cols) { return mat(rows, cols, 1, rows); }

}  // namespace

TEST_CASE("small_gemm_kind picks the kernel from shapes, strides and dtype", "[kernels]") {
  using K = kc::SmallGemmKind;
  for (int64_t batch : {64, 8192}) {
    INFO("batch " << batch);
    // Forward layer 2: h [B,512] x W2^T, the transposed view of Linear's [10,512] weight.
    CHECK(kc::small_gemm_kind(kFloat32, row_major(batch, 512), transposed(512, 10)) == K::SmallN);
    CHECK(kc::small_gemm_kind(kFloat64, row_major(batch, 512), transposed(512, 10)) == K::SmallN);
    // dH = dO [B,10] x W2 [10,512] (K = 10).
    CHECK(kc::small_gemm_kind(kFloat32, row_major(batch, 10), row_major(10, 512)) == K::SmallK);
    // Forward layer 1 and the weight gradients: the Tiled kernel at batch 64 (float32 only),
    // cuBLASLt at 8192, except the thin [10,B]x[B,512] weight gradient of layer 2.
    const K big = batch == 64 ? K::Tiled : K::None;
    CHECK(kc::small_gemm_kind(kFloat32, row_major(batch, 784), transposed(784, 512)) == big);
    CHECK(kc::small_gemm_kind(kFloat32, transposed(10, batch), row_major(batch, 512)) ==
          (batch == 64 ? K::Tiled : K::Thin));
    CHECK(kc::small_gemm_kind(kFloat32, transposed(512, batch), row_major(batch, 784)) == big);
    CHECK(kc::small_gemm_kind(kFloat64, row_major(batch, 784), transposed(784, 512)) == K::None);
    CHECK(kc::small_gemm_kind(kFloat64, transposed(512, batch), row_major(batch, 784)) == K::None);
  }
  // The boundaries.
  CHECK(kc::small_gemm_kind(kFloat32, row_major(5, 16), row_major(16, 100)) == K::SmallK);
  CHECK(kc::small_gemm_kind(kFloat64, row_major(5, 17), row_major(17, 17)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(5, 17), row_major(17, 17)) == K::Tiled);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(5, 17), row_major(17, 16)) == K::SmallN);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(5, 4096), row_major(4096, 16)) == K::SmallN);
  CHECK(kc::small_gemm_kind(kFloat64, row_major(5, 4097), row_major(4097, 16)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(5, 4097), row_major(4097, 16)) == K::Tiled);
  // Tiled: at most 2^25 multiply-adds, M and N at most 2^20.
  CHECK(kc::small_gemm_kind(kFloat32, row_major(64, 1024), row_major(1024, 512)) == K::Tiled);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(65, 1024), row_major(1024, 512)) == K::None);
  // Thin: M <= 16 above the Tiled size, B's rows contiguous, N and B's row stride multiples of 4,
  // M N <= 2^18.
  CHECK(kc::small_gemm_kind(kFloat32, transposed(16, 8192), row_major(8192, 512)) == K::Thin);
  CHECK(kc::small_gemm_kind(kFloat32, transposed(17, 8192), row_major(8192, 512)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, transposed(10, 8192), row_major(8192, 514)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, transposed(10, 8192), transposed(8192, 512)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(16, 1 << 10), row_major(1 << 10, 1 << 14)) ==
        K::Thin);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(16, 1 << 10), row_major(1 << 10, 1 << 15)) ==
        K::None);
  CHECK(kc::small_gemm_kind(kFloat64, transposed(10, 8192), row_major(8192, 512)) == K::None);
  // (A transposed: no SmallN.)
  CHECK(kc::small_gemm_kind(kFloat32, transposed(int64_t{1} << 20, 17), row_major(17, 1)) ==
        K::Tiled);
  CHECK(kc::small_gemm_kind(kFloat32, transposed((int64_t{1} << 20) + 1, 17), row_major(17, 1)) ==
        K::None);
  // Both apply: SmallK wins.
  CHECK(kc::small_gemm_kind(kFloat32, row_major(5, 10), row_major(10, 10)) == K::SmallK);
  // SmallK takes any strides; SmallN needs A's rows contiguous.
  CHECK(kc::small_gemm_kind(kFloat32, mat(5, 8, 40, 3), mat(8, 100, 1, 0)) == K::SmallK);
  CHECK(kc::small_gemm_kind(kFloat64, transposed(64, 512), transposed(512, 10)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, transposed(64, 512), transposed(512, 10)) == K::Tiled);
  // Tiled needs a unit stride in each operand.
  CHECK(kc::small_gemm_kind(kFloat32, mat(64, 512, 1024, 2), row_major(512, 10)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, row_major(64, 512), mat(512, 32, 64, 2)) == K::None);
  CHECK(kc::small_gemm_kind(kFloat32, mat(64, 512, 2048, 1), mat(512, 10, 3, 7000)) == K::SmallN);
  // The 16-bit floats: the layouts whose rows move four elements at a time.
  for (DType t : {kFloat16, kBFloat16}) {
    INFO(dtype_name(t));
    for (int64_t batch : {64, 4095, 4096, 8192}) {
      INFO("batch " << batch);
      // SmallN and SmallK below 4096 rows only (cuBLASLt above).
      const bool few = batch < 4096;
      CHECK(kc::small_gemm_kind(t, row_major(batch, 512), transposed(512, 10)) ==
            (few ? K::SmallN : K::None));
      CHECK(kc::small_gemm_kind(t, row_major(batch, 10), row_major(10, 512)) ==
            (few ? K::SmallK : K::None));
      // Thin while the summed dimension is below 4096 as well.
      CHECK(kc::small_gemm_kind(t, transposed(10, batch), row_major(batch, 512)) ==
            (few ? K::Thin : K::None));
      CHECK(kc::small_gemm_kind(t, row_major(batch, 784), transposed(784, 512)) == K::None);
    }
    CHECK(kc::small_gemm_kind(t, row_major(64, 510), transposed(510, 10)) == K::None);  // K % 4
    CHECK(kc::small_gemm_kind(t, row_major(64, 512), row_major(512, 10)) == K::None);   // B's rows
    CHECK(kc::small_gemm_kind(t, row_major(64, 10), row_major(10, 510)) == K::None);    // N % 4
    CHECK(kc::small_gemm_kind(t, row_major(64, 10), transposed(10, 512)) == K::None);   // B^T
    CHECK(kc::small_gemm_kind(t, transposed(17, 8192), row_major(8192, 512)) == K::None);
    CHECK(kc::small_gemm_kind(t, row_major(5, 17), row_major(17, 17)) == K::None);  // no Tiled
  }
  // Other dtypes.
  for (DType t : {kInt32, kInt64}) {
    INFO(dtype_name(t));
    CHECK(kc::small_gemm_kind(t, row_major(64, 512), transposed(512, 10)) == K::None);
    CHECK(kc::small_gemm_kind(t, row_major(64, 10), row_major(10, 512)) == K::None);
  }
  CHECK(std::string(kc::small_gemm_name(K::SmallK)) == "small-K");
  CHECK(std::string(kc::small_gemm_name(K::SmallN)) == "small-N");
  CHECK(std::string(kc::small_gemm_name(K::Tiled)) == "tiled");
}

TEST_CASE("small_gemm_fits: what each kernel can run, apart from what small_gemm_kind picks",
          "[kernels]") {
  using K = kc::SmallGemmKind;
  // Within the kernels' limits but past where they were measured to win: fits, not picked.
  CHECK(kc::small_gemm_fits(K::SmallK, kBFloat16, row_major(8192, 10), row_major(10, 512)));
  CHECK(kc::small_gemm_kind(kBFloat16, row_major(8192, 10), row_major(10, 512)) == K::None);
  CHECK(kc::small_gemm_fits(K::Tiled, kFloat32, row_major(65, 1024), row_major(1024, 512)));
  CHECK(kc::small_gemm_kind(kFloat32, row_major(65, 1024), row_major(1024, 512)) == K::None);
  CHECK(kc::small_gemm_fits(K::SmallN, kFloat32, row_major(5, 4097), row_major(4097, 16)));
  CHECK(kc::small_gemm_fits(K::Tiled, kFloat32, row_major(5, 16), row_major(16, 100)));  // SmallK's
  // The kernels' own limits: template constants, grid sizes, layouts, dtypes.
  CHECK_FALSE(kc::small_gemm_fits(K::SmallK, kFloat32, row_major(5, 17), row_major(17, 4)));
  CHECK_FALSE(kc::small_gemm_fits(K::SmallN, kFloat32, row_major(5, 4), row_major(4, 17)));
  CHECK_FALSE(kc::small_gemm_fits(K::SmallN, kFloat32, transposed(5, 8), row_major(8, 4)));
  CHECK_FALSE(kc::small_gemm_fits(K::SmallN, kBFloat16, row_major(5, 510), transposed(510, 4)));
  CHECK_FALSE(kc::small_gemm_fits(K::Tiled, kFloat64, row_major(5, 17), row_major(17, 17)));
  CHECK_FALSE(kc::small_gemm_fits(K::Tiled, kFloat32, mat(5, 17, 34, 2), row_major(17, 17)));
  CHECK_FALSE(kc::small_gemm_fits(K::Tiled, kFloat32, transposed((int64_t{1} << 20) + 1, 17),
                                  row_major(17, 1)));
  CHECK_FALSE(kc::small_gemm_fits(K::Thin, kFloat32, transposed(17, 8192), row_major(8192, 512)));
  CHECK_FALSE(kc::small_gemm_fits(K::Thin, kFloat64, transposed(10, 8192), row_major(8192, 512)));
  CHECK_FALSE(kc::small_gemm_fits(K::Thin, kFloat32, transposed(10, 8192), row_major(8192, 514)));
  for (K k : {K::SmallK, K::SmallN, K::Tiled, K::Thin})
    CHECK_FALSE(kc::small_gemm_fits(k, kInt32, row_major(4, 4), row_major(4, 4)));
  CHECK(kc::small_gemm_fits(K::None, kInt32, row_major(4, 4), row_major(4, 4)));
  // What small_gemm_kind picks always fits, over shapes, layouts and dtypes.
  int64_t picked = 0;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64})
    for (int64_t m : {1, 5, 16, 17, 64, 4096, 8192})
      for (int64_t k : {0, 1, 4, 10, 16, 17, 512, 4096, 4097})
        for (int64_t n : {1, 4, 10, 16, 17, 512})
          for (int la = 0; la < 3; ++la)
            for (int lb = 0; lb < 3; ++lb) {
              const kc::GemmMatrix a = la == 0   ? row_major(m, k)
                                       : la == 1 ? transposed(m, k)
                                                 : mat(m, k, 2 * k + 2, 2);
              const kc::GemmMatrix b = lb == 0   ? row_major(k, n)
                                       : lb == 1 ? transposed(k, n)
                                                 : mat(k, n, 2 * n + 6, 2);
              const K chosen = kc::small_gemm_kind(t, a, b);
              picked += chosen != K::None;
              INFO(dtype_name(t) << " " << m << "x" << k << "x" << n << " layouts " << la << lb);
              CHECK(kc::small_gemm_fits(chosen, t, a, b));
            }
  CHECK(picked > 0);
}

#if defined(EMBER_WITH_CUDA)

TEST_CASE("small_gemm rejects bad calls before queuing anything", "[kernels]") {
  // Every check precedes the first CUDA call, so this needs no GPU (null pointers are fine).
  kc::GemmCall c;
  c.dtype = kFloat32;
  c.a = row_major(64, 512);
  c.b = transposed(512, 10);
  c.epilogue = kc::GemmEpilogue::DReluBGrad;
  CHECK_THROWS_WITH(kc::small_gemm(c),
                    Catch::Contains("small_gemm") && Catch::Contains("DRELU_BGRAD"));
  for (kc::GemmEpilogue e :
       {kc::GemmEpilogue::ReluAuxBias, kc::GemmEpilogue::BGradA, kc::GemmEpilogue::BGradB}) {
    c.epilogue = e;
    CHECK_THROWS_AS(kc::small_gemm(c), Error);
  }
  c.epilogue = kc::GemmEpilogue::None;
  c.dtype = kInt32;
  CHECK_THROWS_WITH(kc::small_gemm(c), Catch::Contains("int32"));
  c.dtype = kFloat32;
  c.b = transposed(511, 10);  // K mismatch
  CHECK_THROWS_WITH(kc::small_gemm(c), Catch::Contains("[64,512]") && Catch::Contains("[511,10]"));
  c.a = row_major(8192, 784);
  c.b = transposed(784, 512);  // no small kernel takes it
  CHECK_THROWS_WITH(kc::small_gemm(c), Catch::Contains("not a small problem"));
  // A kernel named by the caller must fit the problem.
  CHECK_THROWS_WITH(kc::small_gemm(c, kc::SmallGemmKind::SmallK),
                    Catch::Contains("small-K kernel does not take [8192,784] x [784,512] float32"));
  CHECK_THROWS_WITH(kc::small_gemm(c, kc::SmallGemmKind::None), Catch::Contains("none kernel"));
  c.a = row_major(5, 4);
  c.b = row_major(4, 6);
  c.ld_d = 3;  // < N
  CHECK_THROWS_WITH(kc::small_gemm(c), Catch::Contains("ld"));
  c.ld_d = 0;
  CHECK_THROWS_WITH(kc::small_gemm(c), Catch::Contains("null"));
  float dummy[32] = {};
  c.a.ptr = c.b.ptr = dummy;
  c.d = dummy;
  c.epilogue = kc::GemmEpilogue::Bias;  // no bias pointer
  CHECK_THROWS_WITH(kc::small_gemm(c), Catch::Contains("bias"));
}

namespace {

const Device kDev = Device::cuda(0);

enum class Layout { Rows, Transposed, Strided };
const char* layout_name(Layout l) {
  return l == Layout::Rows ? "rows" : l == Layout::Transposed ? "transposed" : "strided";
}

// A [rows, cols] GPU operand with the given values (row-major `v`) in the given layout:
// row-major, the transposed view of a [cols, rows] tensor, or every other column of a wider
// tensor (strides (2 cols, 2): no unit stride at all).
Tensor operand(const std::vector<double>& v, int64_t rows, int64_t cols, DType t, Layout l) {
  const Tensor x = from_vector(v, {rows, cols}, TensorOptions(t));
  switch (l) {
    case Layout::Rows:
      return x.to(kDev);
    case Layout::Transposed:
      return x.t().contiguous().to(kDev).t();
    case Layout::Strided: {
      Tensor wide = zeros({rows, 2 * cols}, TensorOptions(t).device(kDev));
      Tensor view = wide.slice(1, 0, 2 * cols, 2);
      view.copy_(x.to(kDev));
      return view;
    }
  }
  return x;
}

std::vector<double> random_values(int64_t n, double lo, double hi) {
  const Tensor r = rand({n}, TensorOptions(kFloat64));
  std::vector<double> v = r.to_vector<double>();
  for (double& x : v) x = lo + (hi - lo) * x;
  return v;
}

// Values a GPU tensor holds, as float64 in row-major order.
std::vector<double> host(const Tensor& t) {
  return t.cpu().to(kFloat64).contiguous().to_vector<double>();
}

// Rounds values to the dtype (the reference multiplies what the GPU operands hold).
std::vector<double> rounded(const std::vector<double>& v, DType t) {
  if (t == kFloat64) return v;
  if (t != kFloat32) {
    const int64_t n = static_cast<int64_t>(v.size());
    return from_vector(v, {n}, TensorOptions(t)).to(kFloat64).to_vector<double>();
  }
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

// The unit roundoff of the 16-bit floats (2^-11, 2^-8), 0 for the others.
double unit_roundoff_16(DType t) {
  return t == kFloat16 ? std::ldexp(1.0, -11) : t == kBFloat16 ? std::ldexp(1.0, -8) : 0.0;
}

// got = relu?(A B + bias) for row-major float64 A [M,K], B [K,N] (the values the operands hold)
// and an optional bias [N], against the float64 result of plain loops.
void check_against_reference(const std::vector<double>& a, const std::vector<double>& b, int64_t M,
                             int64_t K, int64_t N, DType t, const Tensor& got,
                             const std::string& what, const std::vector<double>* bias = nullptr,
                             bool relu_on = false) {
  INFO(what);
  REQUIRE(got.sizes() == Shape{M, N});
  REQUIRE(got.dtype() == t);
  if (bias) REQUIRE(bias->size() == static_cast<size_t>(N));
  const std::vector<double> g = host(got);
  // The 16-bit floats accumulate in float32 and round once at the end: one unit roundoff of the
  // dtype on top of float32's bound.
  const double eps = t == kFloat64 ? std::numeric_limits<double>::epsilon()
                                   : std::numeric_limits<float>::epsilon();
  const double u16 = unit_roundoff_16(t);
  const double rtol = t == kFloat64 ? 1e-12 : 1e-5 + u16;
  int64_t bad = 0, worst_at = -1;
  double worst = -1, want_at = 0;
  std::vector<double> sum(N), mag(N);
  for (int64_t i = 0; i < M; ++i) {
    // Row i: sum_k a_ik b_kj and sum_k |a_ik b_kj| for every j (k outer: B read row by row).
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(mag.begin(), mag.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const double x = a[i * K + k];
      const double* bk = b.data() + k * N;
      for (int64_t j = 0; j < N; ++j) {
        sum[j] += x * bk[j];
        mag[j] += std::fabs(x * bk[j]);
      }
    }
    for (int64_t j = 0; j < N; ++j) {
      double s = sum[j];
      if (bias) s += (*bias)[j];
      if (relu_on && s < 0) s = 0;
      if (std::isnan(s)) {  // a NaN operand: NaN out (relu passes it)
        if (!std::isnan(g[i * N + j])) ++bad;
        continue;
      }
      const double err = std::fabs(g[i * N + j] - s);
      const double tol =
          rtol * std::fabs(s) + (1 + u16) * static_cast<double>(K) * eps * mag[j] + 1e-300;
      const double ratio = std::isnan(err) ? INFINITY : err / tol;
      if (!(err <= tol)) ++bad;
      if (ratio > worst) worst = ratio, worst_at = i * N + j, want_at = s;
    }
  }
  INFO("worst error / tolerance " << worst << " at " << worst_at << ": got "
                                  << (worst_at >= 0 ? g[worst_at] : std::nan("")) << ", want "
                                  << want_at);
  CHECK(bad == 0);
}

struct Mkn {
  int64_t m, k, n;
};
// SmallN, SmallK, then Tiled shapes: the batch-64 MLP's forward layer 1 (k in 8 slices) and
// weight gradients (unsplit), and odd sizes that split k in 2, 3, 4 and 8 slices with partial
// tiles, partial quads and a last slice shorter than the others; then Thin shapes: the
// batch-8192 weight gradient of a 10-class layer, and odd ones (a partial last slice, one row,
// a partial block of column quads); last, a recurrent layer's products at batch 64, whose few
// output tiles the plan narrows (64x32).
const Mkn kShapes[] = {{10, 8192, 512}, {3, 40003, 300}, {1, 70000, 512}, {16, 2100, 1000},
                       {64, 512, 10},   {8192, 512, 10}, {64, 10, 512},   {8192, 10, 512},
                       {7, 3, 5},       {1, 1, 1},       {5, 16, 16},     {33, 4096, 16},
                       {3, 17, 9},      {64, 784, 512},  {512, 64, 784},  {10, 64, 512},
                       {37, 300, 45},   {3, 1000, 7},    {100, 129, 70},  {20, 203, 33},
                       {64, 1024, 256}, {64, 256, 768}};

std::string shape_name(const Mkn& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n);
}

// Equal bits, or both NaN (a NaN's payload is no result).
template <class T>
int64_t bit_mismatches(const Tensor& got, const Tensor& want, int64_t* first) {
  const std::vector<T> g = got.cpu().contiguous().to_vector<T>();
  const std::vector<T> w = want.cpu().contiguous().to_vector<T>();
  if (g.size() != w.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same =
        (std::isnan(g[i]) && std::isnan(w[i])) || std::memcmp(&g[i], &w[i], sizeof(T)) == 0;
    if (!same && n++ == 0) *first = static_cast<int64_t>(i);
  }
  return n;
}

void check_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  int64_t first = -1;
  // 16-bit values compare as the float32 values they widen to (exactly, one to one).
  const bool wide = got.dtype() == kFloat64;
  const int64_t n = wide ? bit_mismatches<double>(got, want, &first)
                         : bit_mismatches<float>(got.to(kFloat32), want.to(kFloat32), &first);
  if (n > 0) {
    const std::vector<double> g = host(got), w = host(want);
    FAIL_CHECK(n << " of " << g.size() << " elements differ; first at " << first << ": " << g[first]
                 << " vs " << w[first]);
  }
  CHECK(n == 0);
}

kc::GemmMatrix matrix_of(const Tensor& t) {
  kc::GemmMatrix m = mat(t.size(0), t.size(1), t.stride(0), t.stride(1));
  m.ptr = t.raw_data();
  return m;
}

// small_gemm called directly: D = epilogue(A B) into `d` (rows `ld_d` apart; 0: dense), by the
// kernel `kind` if given, else the one small_gemm_kind picks.
void small_gemm_into(DType t, const kc::GemmMatrix& a, const kc::GemmMatrix& b, const Tensor& d,
                     kc::GemmEpilogue e = kc::GemmEpilogue::None, const Tensor& bias = Tensor(),
                     int64_t ld_d = 0, std::optional<kc::SmallGemmKind> kind = std::nullopt) {
  kc::GemmCall c;
  c.dtype = t;
  c.a = a;
  c.b = b;
  c.d = d.raw_data();
  c.ld_d = ld_d;
  c.epilogue = e;
  c.bias = e == kc::GemmEpilogue::None ? nullptr : bias.raw_data();
  if (kind)
    kc::small_gemm(c, *kind);
  else
    kc::small_gemm(c);
}

}  // namespace

TEST_CASE("eager mm on small shapes matches a float64 product", "[kernels][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(51);
  set_allow_tf32(false);
  const Layout layouts[] = {Layout::Rows, Layout::Transposed, Layout::Strided};
  for (DType t : {kFloat32, kFloat64})
    for (const Mkn& s : kShapes) {
      const std::vector<double> va = rounded(random_values(s.m * s.k, -1, 1), t);
      const std::vector<double> vb = rounded(random_values(s.k * s.n, -1, 1), t);
      for (Layout la : layouts)
        for (Layout lb : layouts) {
          // Strided operands only paired with themselves (they are the slow, copying case of
          // cuBLASLt; the small kernels read them in place).
          if ((la == Layout::Strided) != (lb == Layout::Strided)) continue;
          const std::string what = std::string(dtype_name(t)) + " " + shape_name(s) + " A " +
                                   layout_name(la) + " B " + layout_name(lb);
          const Tensor a = operand(va, s.m, s.k, t, la), b = operand(vb, s.k, s.n, t, lb);
          const Tensor got = mm(a, b);
          check_against_reference(va, vb, s.m, s.k, s.n, t, got, what);
          // The same call again: the same bits (the order of the sums depends on shapes only).
          check_bits(mm(a, b), got, what + " (repeated)");
          // Directly, into a NaN-filled output with padded rows: every element written, the
          // padding untouched, and the very bits eager produced.
          const kc::GemmMatrix ma = matrix_of(a), mb = matrix_of(b);
          if (kc::small_gemm_kind(t, ma, mb) == kc::SmallGemmKind::None) continue;
          Tensor d = full({s.m, s.n + 3}, std::nan(""), TensorOptions(t).device(kDev));
          small_gemm_into(t, ma, mb, d, kc::GemmEpilogue::None, Tensor(), s.n + 3);
          check_bits(d.narrow(1, 0, s.n), got, what + " (direct)");
          const std::vector<double> pad = host(d.narrow(1, s.n, 3));
          int64_t written = 0;
          for (double p : pad) written += !std::isnan(p);
          INFO(what);
          CHECK(written == 0);
        }
    }
}

TEST_CASE("every small kernel that fits a problem computes it, picked or not", "[kernels][cuda]") {
  // small_gemm(call, kind) is how tools/small_gemm_time times the kernels small_gemm_kind does
  // not pick: each must be right wherever small_gemm_fits says it runs.
  EMBER_REQUIRE_CUDA();
  manual_seed(53);
  set_allow_tf32(false);
  using K = kc::SmallGemmKind;
  int64_t ran = 0;
  for (DType t : {kFloat32, kBFloat16})
    for (const Mkn& s : kShapes) {
      const std::vector<double> va = rounded(random_values(s.m * s.k, -1, 1), t);
      const std::vector<double> vb = rounded(random_values(s.k * s.n, -1, 1), t);
      for (Layout la : {Layout::Rows, Layout::Transposed})
        for (Layout lb : {Layout::Rows, Layout::Transposed}) {
          const Tensor a = operand(va, s.m, s.k, t, la), b = operand(vb, s.k, s.n, t, lb);
          const kc::GemmMatrix ma = matrix_of(a), mb = matrix_of(b);
          for (K kind : {K::SmallK, K::SmallN, K::Tiled, K::Thin}) {
            if (!kc::small_gemm_fits(kind, t, ma, mb)) continue;
            const std::string what = std::string(dtype_name(t)) + " " + shape_name(s) + " A " +
                                     layout_name(la) + " B " + layout_name(lb) + " " +
                                     kc::small_gemm_name(kind);
            Tensor d = full({s.m, s.n}, std::nan(""), TensorOptions(t).device(kDev));
            small_gemm_into(t, ma, mb, d, kc::GemmEpilogue::None, Tensor(), 0, kind);
            check_against_reference(va, vb, s.m, s.k, s.n, t, d, what);
            ++ran;
          }
        }
    }
  CHECK(ran > 40);
}

TEST_CASE("small_gemm BIAS and RELU_BIAS match a float64 reference and eager add/relu bit for bit",
          "[kernels][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(52);
  int ran = 0;
  for (DType t : {kFloat32, kFloat64})
    for (const Mkn& s : kShapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool with_nan : {false, true}) {
            std::vector<double> va = random_values(s.m * s.k, -1, 1);
            if (with_nan) va[static_cast<size_t>((s.m / 2) * s.k + s.k / 2)] = std::nan("");
            const std::vector<double> vb = random_values(s.k * s.n, -1, 1);
            const Tensor a = operand(va, s.m, s.k, t, ta ? Layout::Transposed : Layout::Rows);
            const Tensor b = operand(vb, s.k, s.n, t, tb ? Layout::Transposed : Layout::Rows);
            const kc::GemmMatrix ma = matrix_of(a), mb = matrix_of(b);
            if (kc::small_gemm_kind(t, ma, mb) == kc::SmallGemmKind::None) continue;
            // Biases of both signs, so relu zeroes some outputs and keeps others.
            const std::vector<double> vbias = rounded(random_values(s.n, -0.5, 0.5), t);
            const Tensor bias = from_vector(vbias, {s.n}, TensorOptions(t).device(kDev));
            const std::vector<double> ra = rounded(va, t), rb = rounded(vb, t);
            const Tensor biased = add(mm(a, b), bias);
            const Tensor act = relu(biased);
            for (bool r : {false, true}) {
              const std::string what = std::string(dtype_name(t)) + " " + shape_name(s) +
                                       (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                                       (with_nan ? " NaN in A" : "") + (r ? " RELU_BIAS" : " BIAS");
              Tensor d = full({s.m, s.n}, std::nan(""), TensorOptions(t).device(kDev));
              small_gemm_into(t, ma, mb, d, r ? kc::GemmEpilogue::ReluBias : kc::GemmEpilogue::Bias,
                              bias);
              check_against_reference(ra, rb, s.m, s.k, s.n, t, d, what, &vbias, r);
              check_bits(d, r ? act : biased, what);
              if (with_nan && r) {  // relu passes the NaN row through
                const std::vector<double> h = host(d);
                INFO(what);
                CHECK(std::isnan(h[static_cast<size_t>((s.m / 2) * s.n)]));
              }
              ++ran;
            }
          }
  CHECK(ran > 100);
}

namespace {

// Slots as the executor makes them (see tests/jit/test_gemm_lowering.cpp): arguments and state
// by identity, views on their root's memory, memory only for the values the plan stores.
std::vector<std::shared_ptr<TensorImpl>> make_slots(const jit::Graph& g,
                                                    const jit::MemoryPlan& plan,
                                                    const std::vector<Tensor>& args) {
  std::vector<std::shared_ptr<TensorImpl>> s(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i) {
    const jit::Value& v = g.values[i];
    auto impl = std::make_shared<TensorImpl>();
    impl->sizes = v.shape;
    impl->strides = v.strides;
    impl->offset = v.offset;
    impl->dtype = v.dtype;
    impl->device = v.device;
    if (v.root != static_cast<jit::ValueId>(i)) {
      const jit::Value& r = g.values[v.root];
      impl->storage = s[v.root]->storage;
      impl->offset = s[v.root]->offset + (v.offset - r.offset);
    } else if (v.kind == jit::ValueKind::Input) {
      impl = args[v.slot].impl_ptr();
    } else if (v.kind == jit::ValueKind::State) {
      impl = g.state[v.slot].impl_ptr();
    } else if (v.kind == jit::ValueKind::Constant) {
      impl = g.constants[v.slot].impl_ptr();
    } else if (plan.arena_of[i] >= 0 || plan.fresh[i]) {
      impl->storage = make_empty(v.shape, v.dtype, v.device).impl()->storage;
      impl->offset = 0;
    }
    s[i] = impl;
  }
  return s;
}

}  // namespace

TEST_CASE("lower_gemm_cuda runs a small Linear as the small kernel, correct and equal to eager",
          "[kernels][jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(53);
  struct Restore {
    ~Restore() { jit::set_gemm_autotune(false); }
  } restore;
  const Mkn shapes[] = {{64, 512, 10}, {8192, 512, 10}, {7, 3, 5}, {5, 16, 16}, {64, 784, 512}};
  for (bool autotune : {false, true})
    for (const Mkn& s : shapes)
      for (bool relu_on : {false, true}) {
        jit::set_gemm_autotune(autotune);
        INFO(shape_name(s) << (relu_on ? " relu" : "") << (autotune ? " autotune" : ""));
        // x [M,K] input, W [N,K] and b [N] state: relu?(mm(x, W^T) + b), then fusion.
        const Tensor x = randn({s.m, s.k}, kDev), w = randn({s.n, s.k}, kDev);
        const Tensor b = randn({s.n}, kDev);
        jit::Graph g;
        const jit::ValueId vx = g.add_input(x, 0), vw = g.add_state(w), vb = g.add_state(b);
        Attrs perm;
        perm.dims = {1, 0};
        const jit::ValueId wt = g.append(OpId::permute, {vw}, perm);
        const jit::ValueId h = g.append(OpId::add, {g.append(OpId::mm, {vx, wt}), vb});
        const jit::ValueId out = relu_on ? g.append(OpId::relu, {h}) : h;
        g.outputs = {out};
        jit::fuse(g);
        const jit::Group* grp = nullptr;
        for (const jit::Group& gr : g.groups)
          if (gr.kind == jit::GroupKind::GemmEpilogue) grp = &gr;
        REQUIRE(grp);
        const auto storage = jit::gemm_lowering_storage(g, *grp);
        REQUIRE(storage);
        std::vector<jit::GroupStorage> st(g.groups.size(), jit::GroupStorage::Materialize);
        st[static_cast<size_t>(grp - g.groups.data())] = *storage;
        const jit::MemoryPlan plan = jit::plan_memory(g, st);
        const Tensor x2 = randn({s.m, s.k}, kDev);  // other memory than the trace's
        const auto slots = make_slots(g, plan, {x2});
        std::unique_ptr<jit::LoweredGroup> low = jit::lower_gemm_cuda({g, *grp, slots, plan});
        REQUIRE(low);
        low->run();
        low->run();
        CHECK(low->kernels() == 1);
        const std::string describe = low->describe();
        INFO(describe);
        CHECK(describe.find(" kernel mm") != std::string::npos);
        CHECK(describe.find("cuBLASLt") == std::string::npos);
        CHECK(describe.find(relu_on ? "RELU_BIAS" : "BIAS") != std::string::npos);
        CHECK_FALSE(jit::gemm_autotune_info(*low)->tuned);  // nothing to tune
        const Tensor got = Tensor(slots[out]);
        const std::vector<double> hb = host(b);
        check_against_reference(host(x2), host(w.t()), s.m, s.k, s.n, kFloat32, got,
                                "lowered linear", &hb, relu_on);
        const Tensor biased = add(mm(x2, w.t()), b);
        check_bits(got, relu_on ? relu(biased) : biased, "lowered linear (eager's bits)");
      }
}

TEST_CASE("small GEMMs: rows give the same bits whatever the batch (kernel chosen by M)",
          "[kernels][cuda]") {
  // From 4096 rows the SmallK and SmallN float32 kernels walk several rows per thread or warp;
  // each output keeps its order of summation, so a row's result must not depend on how many
  // rows the product has. Reference: the same rows as a product of 1000 rows (one row per
  // thread or warp), compared bit for bit.
  EMBER_REQUIRE_CUDA();
  manual_seed(77);
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  const Tensor w2 = randn({10, 512}, dev), b2 = randn({512}, dev);
  for (int64_t m : {4096, 8192, 8195}) {
    INFO("rows " << m);
    // SmallK (dA = dO x W2) and SmallN (h x W2^T), plain and with the BIAS / RELU_BIAS epilogue.
    const Tensor d_o = randn({m, 10}, dev), h = randn({m, 512}, dev);
    const Tensor head_do = d_o.narrow(0, 0, 1000).contiguous();
    const Tensor head_h = h.narrow(0, 0, 1000).contiguous();
    // The 1000-row products are the reference rows: first checked against float64 themselves.
    check_against_reference(host(head_do), host(w2), 1000, 10, 512, kFloat32, mm(head_do, w2),
                            "small-K, 1000 rows");
    check_against_reference(host(head_h), host(w2.t()), 1000, 512, 10, kFloat32, mm(head_h, w2.t()),
                            "small-N, 1000 rows");
    check_bits(mm(d_o, w2).narrow(0, 0, 1000), mm(head_do, w2), "small-K");
    check_bits(relu(add(mm(d_o, w2), b2)).narrow(0, 0, 1000), relu(add(mm(head_do, w2), b2)),
               "small-K, bias and relu (eager)");
    check_bits(mm(h, w2.t()).narrow(0, 0, 1000), mm(head_h, w2.t()), "small-N");
    // The last rows too (a partial group of rows at 8195).
    const Tensor tail_h = h.narrow(0, m - 3, 3).contiguous();
    check_bits(mm(h, w2.t()).narrow(0, m - 3, 3), mm(tail_h, w2.t()), "small-N, last rows");
    const Tensor tail_do = d_o.narrow(0, m - 3, 3).contiguous();
    check_bits(mm(d_o, w2).narrow(0, m - 3, 3), mm(tail_do, w2), "small-K, last rows");
  }
}

TEST_CASE("16-bit small GEMMs match a float64 product, round once, and repeat their bits",
          "[kernels][cuda]") {
  // float16 / bfloat16 products on the small kernels (float32 sums, one rounding at the end):
  // against the float64 product of the values the operands hold, the bias added before the
  // rounding; eager mm gives the very bits of a direct call.
  EMBER_REQUIRE_CUDA();
  manual_seed(78);
  int ran = 0;
  std::map<kc::SmallGemmKind, int> ran_by;  // every 16-bit kernel is exercised
  for (DType t : {kFloat16, kBFloat16})
    for (const Mkn& s : kShapes)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const std::vector<double> va = rounded(random_values(s.m * s.k, -1, 1), t);
          const std::vector<double> vb = rounded(random_values(s.k * s.n, -1, 1), t);
          const Tensor a = operand(va, s.m, s.k, t, ta ? Layout::Transposed : Layout::Rows);
          const Tensor b = operand(vb, s.k, s.n, t, tb ? Layout::Transposed : Layout::Rows);
          const kc::GemmMatrix ma = matrix_of(a), mb = matrix_of(b);
          const kc::SmallGemmKind kind = kc::small_gemm_kind(t, ma, mb);
          if (kind == kc::SmallGemmKind::None) continue;
          const std::string what = std::string(dtype_name(t)) + " " + shape_name(s) +
                                   (ta ? " A^T" : "") + (tb ? " B^T" : "") + " " +
                                   kc::small_gemm_name(kind);
          const Tensor got = mm(a, b);
          check_against_reference(va, vb, s.m, s.k, s.n, t, got, what);
          check_bits(mm(a, b), got, what + " (repeated)");
          const std::vector<double> vbias = rounded(random_values(s.n, -0.5, 0.5), t);
          const Tensor bias = from_vector(vbias, {s.n}, TensorOptions(t).device(kDev));
          for (kc::GemmEpilogue e :
               {kc::GemmEpilogue::None, kc::GemmEpilogue::Bias, kc::GemmEpilogue::ReluBias}) {
            Tensor d = full({s.m, s.n}, std::nan(""), TensorOptions(t).device(kDev));
            small_gemm_into(t, ma, mb, d, e, bias);
            const std::string w = what + " " + kc::gemm_epilogue_name(e);
            if (e == kc::GemmEpilogue::None) {
              check_bits(d, got, w + " (direct = eager)");
            } else {
              check_against_reference(va, vb, s.m, s.k, s.n, t, d, w, &vbias,
                                      e == kc::GemmEpilogue::ReluBias);
            }
            ++ran;
            ++ran_by[kind];
          }
        }
  CHECK(ran > 60);
  for (kc::SmallGemmKind k :
       {kc::SmallGemmKind::SmallK, kc::SmallGemmKind::SmallN, kc::SmallGemmKind::Thin}) {
    INFO(kc::small_gemm_name(k));
    CHECK(ran_by[k] > 0);
  }
}

#endif  // EMBER_WITH_CUDA
