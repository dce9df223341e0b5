// CPU matrix products: mm [M,K]x[K,N] and bmm [B,M,K]x[B,K,N].
//
// float32 and float64 go to the BLAS (OpenBLAS, when the build found it; bench/NOTES.md has
// the measurements that chose it over oneDNN's and Eigen's GEMMs), else to Eigen; integers
// always to Eigen. An operand whose columns are unit-stride is read as row-major and one whose
// rows are unit-stride (a transposed view) as column-major, both without a copy; any other
// layout (a slice with steps in both dims, an expand) is copied to a contiguous matrix first.
// float16/bfloat16 compute in float and round the result once.
//
// Threads: the BLAS runs single-threaded and a large product is cut into slabs of C's columns
// (or rows, when C is narrow), sized by the problem alone, run on the intra-op pool
// (core/parallel.h). The BLAS picks its kernels by each call's sizes, so fixed slabs give the
// same sums in the same order whatever the thread count.
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

#if EMBER_HAVE_OPENBLAS
#include <cblas.h>
#include <mutex>
extern "C" void openblas_set_num_threads(int);
#endif

namespace ember::kernels::cpu {
namespace {

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T, int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>,
                            Eigen::Unaligned, Eigen::OuterStride<>>;

// A strided matrix operand: element (i, j) lives at data[i * rs + j * cs].
template <class T>
struct Operand {
  const T* data;
  int64_t rows, cols, rs, cs;
};

enum class Layout { kRowMajor, kColMajor, kCopy };

// Which Eigen map reads the operand in place. Eigen's GEMM wants unit inner stride and an outer
// stride that does not make rows overlap; single rows/columns fit either way.
template <class T>
Layout layout_of(const Operand<T>& m) {
  if (m.cs == 1 && (m.rows == 1 || m.rs >= std::max<int64_t>(m.cols, 1))) return Layout::kRowMajor;
  if (m.rs == 1 && (m.cols == 1 || m.cs >= std::max<int64_t>(m.rows, 1))) return Layout::kColMajor;
  if (m.rows == 1 && m.cs >= 1) return Layout::kColMajor;  // one row read with stride cs
  if (m.cols == 1 && m.rs >= 1) return Layout::kRowMajor;  // one column read with stride rs
  return Layout::kCopy;
}

template <class T>
int64_t outer_stride(const Operand<T>& m, Layout l) {
  if (l == Layout::kRowMajor) return m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.rs;
  return m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.cs;
}

// Copies a strided operand into a contiguous row-major matrix of type U.
template <class U, class T>
RowMat<U> to_dense(const Operand<T>& m) {
  RowMat<U> d(m.rows, m.cols);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j)
      d(i, j) = static_cast<U>(
          static_cast<std::conditional_t<kIsHalf<T>, float, T>>(m.data[i * m.rs + j * m.cs]));
  return d;
}

template <class T, int OA, int OB>
void gemm_mapped(const Operand<T>& a, int64_t lda, const Operand<T>& b, int64_t ldb, T* c) {
  ConstMap<T, OA> A(a.data, a.rows, a.cols, Eigen::OuterStride<>(lda));
  ConstMap<T, OB> B(b.data, b.rows, b.cols, Eigen::OuterStride<>(ldb));
  Eigen::Map<RowMat<T>> C(c, a.rows, b.cols);
  C.noalias() = A * B;
}

#if EMBER_HAVE_OPENBLAS
// Multiply-adds below which a product runs on one thread: the pool's hand-off costs a few
// microseconds, about what a product of this size takes.
constexpr int64_t kParallelGemmMacs = int64_t{1} << 19;
constexpr int64_t kSlab = 16;  // slab edge: a multiple of the BLAS kernels' register tiles
constexpr int64_t kMaxSlabs = 8;

// c = op(a) op(b), or c += op(a) op(b) when accumulate.
template <class T>
void blas_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate = false) {
  const auto tA = ta ? CblasTrans : CblasNoTrans, tB = tb ? CblasTrans : CblasNoTrans;
  const auto M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const T beta = accumulate ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, tA, tB, M, N, K, 1.0f, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, tA, tB, M, N, K, 1.0, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  }
}

// OpenBLAS threads of its own would compete with the intra-op pool that calls it.
void make_blas_serial() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

// Whether the BLAS's 32-bit integers hold every dimension and leading dimension.
bool fits_blas(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  return m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax;
}

// c[M,N] (contiguous) = a * b with each operand row-major (t = false) or column-major
// (t = true, a transposed view) with leading dimension ld. A product too small to split
// (under two slabs' worth of kParallelGemmMacs) is one call.
template <class T>
void gemm_blas(const Operand<T>& a, bool ta, int64_t lda, const Operand<T>& b, bool tb, int64_t ldb,
               T* c) {
  make_blas_serial();
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  // Slabs of C: columns when C is at least as wide as tall, else rows. An operand's row r
  // starts at data + r rs and its column j at data + j cs in either layout.
  const bool by_cols = n >= m;
  const int64_t extent = by_cols ? n : m;
  // How C is cut depends on the problem alone, never on the thread count: the BLAS chooses its
  // kernels (and with them the order it sums in) by each call's sizes, so cutting by threads
  // would round differently on 1 and 3 threads. Up to kMaxSlabs calls of at least
  // kParallelGemmMacs multiply-adds each, edges a multiple of kSlab.
  const int64_t macs = m * n * k;
  const int64_t want = std::clamp<int64_t>(macs / kParallelGemmMacs, 1, kMaxSlabs);
  const int64_t slab = std::max(kSlab, (extent / want + kSlab - 1) / kSlab * kSlab);
  const int64_t slabs = (extent + slab - 1) / slab;
  parallel_for(slabs, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t lo = s * slab, hi = std::min(extent, lo + slab);
      if (by_cols) {
        blas_call(ta, tb, m, hi - lo, k, a.data, lda, b.data + lo * b.cs, ldb, c + lo, n);
      } else {
        blas_call(ta, tb, hi - lo, n, k, a.data + lo * a.rs, lda, b.data, ldb, c + lo * n, n);
      }
    }
  });
}
#endif

// c[M,N] (contiguous) = a[M,K] * b[K,N] for a native Eigen scalar type T.
template <class T>
void gemm_native(Operand<T> a, Operand<T> b, T* c) {
  RowMat<T> a_copy, b_copy;
  Layout la = layout_of(a), lb = layout_of(b);
  if (la == Layout::kCopy) {
    a_copy = to_dense<T>(a);
    a = {a_copy.data(), a.rows, a.cols, a.cols, 1};
    la = Layout::kRowMajor;
  }
  if (lb == Layout::kCopy) {
    b_copy = to_dense<T>(b);
    b = {b_copy.data(), b.rows, b.cols, b.cols, 1};
    lb = Layout::kRowMajor;
  }
  const int64_t lda = outer_stride(a, la), ldb = outer_stride(b, lb);
#if EMBER_HAVE_OPENBLAS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (fits_blas(a.rows, b.cols, a.cols, lda, ldb))
      return gemm_blas(a, la == Layout::kColMajor, lda, b, lb == Layout::kColMajor, ldb, c);
  }
#endif
  constexpr int R = Eigen::RowMajor, Cm = Eigen::ColMajor;
  if (la == Layout::kRowMajor) {
    if (lb == Layout::kRowMajor) return gemm_mapped<T, R, R>(a, lda, b, ldb, c);
    return gemm_mapped<T, R, Cm>(a, lda, b, ldb, c);
  }
  if (lb == Layout::kRowMajor) return gemm_mapped<T, Cm, R>(a, lda, b, ldb, c);
  return gemm_mapped<T, Cm, Cm>(a, lda, b, ldb, c);
}

// 16-bit floats: widen both operands to float, multiply, round each result once.
template <class T>
void gemm_half(const Operand<T>& a, const Operand<T>& b, T* c) {
  const RowMat<float> af = to_dense<float>(a), bf = to_dense<float>(b);
  RowMat<float> cf(a.rows, b.cols);
  gemm_native<float>({af.data(), a.rows, a.cols, a.cols, 1}, {bf.data(), b.rows, b.cols, b.cols, 1},
                     cf.data());
  const float* src = cf.data();
  for (int64_t i = 0, n = a.rows * b.cols; i < n; ++i) c[i] = T(src[i]);
}

template <class T>
void gemm(const Operand<T>& a, const Operand<T>& b, T* c) {
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: zeros (and Eigen asserts on empty reductions)
    std::fill(c, c + m * n, T(0));
    return;
  }
  if constexpr (kIsHalf<T>) {
    gemm_half(a, b, c);
  } else {
    gemm_native(a, b, c);
  }
}

template <class T>
void matmul_typed(const KernelCall& call) {
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const Tensor& out = call.out;
  const std::string_view name = op_name(call.op);
  const bool batched = call.op == OpId::bmm;
  const int nd = batched ? 3 : 2;
  EMBER_CHECK(a.dim() == nd && b.dim() == nd, name, ": expected ", nd, "-d operands, got ",
              a.sizes(), " and ", b.sizes());
  const int64_t batch = batched ? a.size(0) : 1;
  const int64_t m = a.size(nd - 2), k = a.size(nd - 1), n = b.size(nd - 1);
  EMBER_CHECK(b.size(nd - 2) == k && (!batched || b.size(0) == batch), name,
              ": shapes do not multiply: ", a.sizes(), " x ", b.sizes());
  EMBER_CHECK(b.dtype() == a.dtype() && out.dtype() == a.dtype(), name,
              ": dtypes differ: ", dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " -> ",
              dtype_name(out.dtype()));
  EMBER_CHECK(out.is_contiguous() && out.numel() == batch * m * n, name,
              ": output must be contiguous with ", batch * m * n, " elements, got ", out.sizes());
  const int64_t sab = batched ? a.stride(0) : 0, sbb = batched ? b.stride(0) : 0;
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* pc = static_cast<T*>(out.raw_data());
  for (int64_t i = 0; i < batch; ++i) {
    const Operand<T> oa{pa + i * sab, m, k, a.stride(nd - 2), a.stride(nd - 1)};
    const Operand<T> ob{pb + i * sbb, k, n, b.stride(nd - 2), b.stride(nd - 1)};
    gemm(oa, ob, pc + i * m * n);
  }
}

}  // namespace

template <class T>
void gemm_serial(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                 const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
#if EMBER_HAVE_OPENBLAS
  if (fits_blas(m, n, k, std::max(lda, ldc), ldb)) {
    make_blas_serial();
    return blas_call(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  }
#endif
  using Stride = Eigen::OuterStride<>;
  using RowMap = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Stride>;
  using ColMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>,
                            Eigen::Unaligned, Stride>;
  Eigen::Map<RowMat<T>, Eigen::Unaligned, Stride> cm(c, m, n, Stride(ldc));
  auto run = [&](const auto& am, const auto& bm) {
    if (accumulate) {
      cm.noalias() += am * bm;
    } else {
      cm.noalias() = am * bm;
    }
  };
  if (!ta && !tb) run(RowMap(a, m, k, Stride(lda)), RowMap(b, k, n, Stride(ldb)));
  if (!ta && tb) run(RowMap(a, m, k, Stride(lda)), ColMap(b, k, n, Stride(ldb)));
  if (ta && !tb) run(ColMap(a, m, k, Stride(lda)), RowMap(b, k, n, Stride(ldb)));
  if (ta && tb) run(ColMap(a, m, k, Stride(lda)), ColMap(b, k, n, Stride(ldb)));
}

template void gemm_serial<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                 const float*, int64_t, float*, int64_t, bool);
template void gemm_serial<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                  const double*, int64_t, double*, int64_t, bool);

void matmul(const KernelCall& call) {
  EMBER_CHECK(call.inputs.size() == 2, op_name(call.op), ": expected 2 inputs, got ",
              call.inputs.size());
  const DType dt = call.inputs[0].dtype();
  EMBER_CHECK(in_set(op_info(call.op).dtypes, dt), op_name(call.op), ": unsupported dtype ",
              dtype_name(dt));
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) matmul_typed<T>(call);
  });
}

}  // namespace ember::kernels::cpu
