#pragma once
// How a strided matrix reaches a column-major BLAS (cuBLAS/cuBLASLt) without a copy. Host-only
// and dependency-free, so the CUDA GEMM paths and the JIT (which decides before any kernel runs
// whether a GEMM can read an operand in place) share one rule.
#include <algorithm>
#include <cstdint>

namespace ember::kernels {

// The stored column-major matrix (rows x cols, leading dimension ld) and whether the BLAS must
// transpose it.
struct BlasLayout {
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 0;
};

// For a row-major-indexed matrix X[R,C] with element strides (sr, sc), describes X^T as the
// BLAS sees it. False when neither orientation has a unit stride (a caller must copy).
inline bool describe_transposed(int64_t R, int64_t C, int64_t sr, int64_t sc, BlasLayout& op) {
  if ((C == 1 || sc == 1) && (R == 1 || sr >= std::max<int64_t>(C, 1))) {
    // Row-major in memory: X^T is column-major [C, R] with ld sr.
    op.trans = false;
    op.rows = C;
    op.cols = R;
    op.ld = R == 1 ? std::max<int64_t>(C, 1) : sr;
    return true;
  }
  if ((R == 1 || sr == 1) && (C == 1 || sc >= std::max<int64_t>(R, 1))) {
    // Column-major in memory (a transposed view): X is column-major [R, C] with ld sc.
    op.trans = true;
    op.rows = R;
    op.cols = C;
    op.ld = C == 1 ? std::max<int64_t>(R, 1) : sc;
    return true;
  }
  return false;
}

// Whether a GEMM reads X[R,C] with strides (sr, sc) in place.
inline bool blas_readable(int64_t R, int64_t C, int64_t sr, int64_t sc) {
  BlasLayout unused;
  return describe_transposed(R, C, sr, sc, unused);
}

// Largest power of two (up to 256) dividing the address: cuBLASLt assumes 256 unless told.
inline uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

}  // namespace ember::kernels
