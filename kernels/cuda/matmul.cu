// mm and bmm on CUDA. Small products (K, or N under small_gemm_kind's conditions, of at most 16,
// or float32 mm of at most 2^25 multiply-adds) go to the handwritten kernels of small_gemm.h;
// everything else is one cuBLASLt call through gemm_epilogue (kernels/cuda/gemm_epilogue.h),
// the process's one cuBLASLt entry point and plan cache, with the heuristic's first algorithm.
// A transposed view (column-major in memory) is a transpose flag instead of a copy; only
// operands with no unit stride are copied first.

#include "core/ops.h"
#include "kernels/blas_layout.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/small_gemm.h"

namespace ember::kernels::cuda {
namespace {

// A contiguous copy made with the CUDA cast kernel directly (not through dispatch, so the
// tracer and autograd never see this internal copy).
Tensor contiguous_copy(const Tensor& t) {
  Tensor out = make_empty(t.sizes(), t.dtype(), t.device());
  Attrs attrs;
  attrs.dtype = t.dtype();
  const Tensor in[1] = {t};
  pointwise(KernelCall{OpId::cast, std::span<const Tensor>(in, 1), attrs, out});
  return out;
}

// The matrices of `t` ([R,C] or [B,R,C]) as a GEMM operand; `keep` holds a copy when the
// layout has no unit stride. `batch_stride`: elements between the matrices (0: one matrix).
GemmMatrix operand(const Tensor& t, Tensor& keep, int64_t& batch_stride) {
  const int nd = t.dim();
  GemmMatrix m;
  m.rows = t.size(nd - 2);
  m.cols = t.size(nd - 1);
  m.row_stride = t.stride(nd - 2);
  m.col_stride = t.stride(nd - 1);
  m.ptr = t.raw_data();
  batch_stride = nd == 3 && t.size(0) > 1 ? t.stride(0) : 0;
  if (!blas_readable(m.rows, m.cols, m.row_stride, m.col_stride)) {
    keep = contiguous_copy(t);
    m.row_stride = m.cols;
    m.col_stride = 1;
    m.ptr = keep.raw_data();
    batch_stride = nd == 3 && t.size(0) > 1 ? m.rows * m.cols : 0;
  }
  return m;
}

}  // namespace

void matmul(const KernelCall& call) {
  const char* name = op_name(call.op).data();
  const Tensor& a = call.inputs[0];
  const Tensor& b = call.inputs[1];
  const Tensor& out = call.out;
  EMBER_CHECK(is_floating(a.dtype()), name, ": CUDA supports float types only, got ",
              dtype_name(a.dtype()));
  const bool batched = call.op == OpId::bmm;
  const int64_t batch = batched ? a.size(0) : 1;
  const int64_t M = a.size(batched ? 1 : 0), K = a.size(batched ? 2 : 1);
  const int64_t N = b.size(batched ? 2 : 1);
  const int device = out.device().index;
  cudaStream_t s = stream(device);
  if (out.numel() == 0) return;
  if (K == 0) {  // an empty sum: zeros
    EMBER_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, static_cast<size_t>(out.nbytes()), s));
    return;
  }
  // A dimension of at most 16 (the MLP's 10 classes), or a product of at most 2^25
  // multiply-adds: a handwritten kernel reading the operands through their strides beats
  // cuBLASLt's fixed cost, and is what the JIT's GEMM lowering runs for the same shapes, so eager
  // and compiled agree bit for bit (small_gemm.h). It sums in full precision even when
  // allow_tf32() is on.
  if (!batched) {
    GemmCall sc;
    sc.device = device;
    sc.dtype = a.dtype();
    sc.a.ptr = a.raw_data();
    sc.a.rows = M;
    sc.a.cols = K;
    sc.a.row_stride = a.stride(0);
    sc.a.col_stride = a.stride(1);
    sc.b.ptr = b.raw_data();
    sc.b.rows = K;
    sc.b.cols = N;
    sc.b.row_stride = b.stride(0);
    sc.b.col_stride = b.stride(1);
    sc.d = out.raw_data();
    sc.ld_d = N;  // `out` is contiguous
    if (small_gemm_kind(sc.dtype, sc.a, sc.b) != SmallGemmKind::None) {
      small_gemm(sc);
      return;
    }
  }
  Tensor copy_a, copy_b;
  GemmCall c;
  c.device = device;
  c.dtype = a.dtype();
  c.a = operand(a, copy_a, c.stride_a);
  c.b = operand(b, copy_b, c.stride_b);
  c.d = out.raw_data();
  c.ld_d = N;  // `out` is contiguous
  c.batch = batch;
  c.stride_d = batch > 1 ? M * N : 0;
  // The heuristic's first choice, not an autotuned winner: eager results never depend on what a
  // compiled function timed.
  try {
    gemm_epilogue(c, 0);
  } catch (const Error& e) {
    EMBER_FAIL(name, ": ", e.what());
  }
}

}  // namespace ember::kernels::cuda
