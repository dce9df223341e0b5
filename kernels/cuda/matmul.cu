// mm and bmm through cuBLASLt. cuBLASLt is column-major, so the row-major product
// C[M,N] = A[M,K] B[K,N] is computed as C^T[N,M] = B^T[N,K] A^T[K,M]: a row-major operand is a
// column-major transpose for free. A transposed view (column-major in memory) becomes a
// transpose flag instead of a copy; only operands with no unit stride are copied first.
// Descriptors, layouts and the heuristic's algorithm are cached per problem key, so a repeated
// shape costs one hash lookup and the cublasLtMatmul call; the algorithm also persists across
// processes through the algorithm store when one is installed (gemm_algo_store.h). mm with K (or
// N, under small_gemm_kind's conditions) of at most 16, or float32 mm of at most 2^25
// multiply-adds, goes to the handwritten kernels of small_gemm.h instead.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/ops.h"
#include "kernels/blas_layout.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_algo_heuristic.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/small_gemm.h"

namespace ember::kernels::cuda {
namespace {

// Throws an ember::Error naming the cuBLASLt call when it did not succeed.
void check_cublas(cublasStatus_t st, const char* call, const char* op) {
  EMBER_CHECK(st == CUBLAS_STATUS_SUCCESS, op, ": ", call, " failed: ", cublasLtGetStatusName(st),
              " (", cublasLtGetStatusString(st), ")");
}

// How one operand reaches cuBLASLt (kernels/blas_layout.h), with its pointer and batch stride.
struct Operand : BlasLayout {
  const void* ptr = nullptr;
  int64_t batch_stride = 0;
};

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

// The operand for tensor `t` ([R,C] or [B,R,C]); `keep` holds a copy when one was needed.
Operand make_operand(const Tensor& t, Tensor& keep) {
  const int nd = t.dim();
  const int64_t R = t.size(nd - 2), C = t.size(nd - 1);
  Operand op;
  if (describe_transposed(R, C, t.stride(nd - 2), t.stride(nd - 1), op)) {
    op.ptr = t.raw_data();
    op.batch_stride = nd == 3 && t.size(0) > 1 ? t.stride(0) : 0;
    return op;
  }
  keep = contiguous_copy(t);
  describe_transposed(R, C, C, 1, op);
  op.ptr = keep.raw_data();
  op.batch_stride = nd == 3 && t.size(0) > 1 ? R * C : 0;
  return op;
}

struct GemmKey {
  int device;
  DType dtype;
  bool tf32, trans_a, trans_b;
  int64_t m, n, k, batch;
  int64_t rows_a, cols_a, ld_a, stride_a;
  int64_t rows_b, cols_b, ld_b, stride_b;
  uint32_t align_a, align_b, align_c;
  bool operator==(const GemmKey& o) const {
    return device == o.device && dtype == o.dtype && tf32 == o.tf32 && trans_a == o.trans_a &&
           trans_b == o.trans_b && m == o.m && n == o.n && k == o.k && batch == o.batch &&
           rows_a == o.rows_a && cols_a == o.cols_a && ld_a == o.ld_a && stride_a == o.stride_a &&
           rows_b == o.rows_b && cols_b == o.cols_b && ld_b == o.ld_b && stride_b == o.stride_b &&
           align_a == o.align_a && align_b == o.align_b && align_c == o.align_c;
  }
};
struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    mix(static_cast<uint64_t>(k.device) << 8 | static_cast<uint64_t>(k.dtype));
    mix(uint64_t{k.tf32} | uint64_t{k.trans_a} << 1 | uint64_t{k.trans_b} << 2);
    for (int64_t v : {k.m, k.n, k.k, k.batch, k.rows_a, k.cols_a, k.ld_a, k.stride_a, k.rows_b,
                      k.cols_b, k.ld_b, k.stride_b})
      mix(static_cast<uint64_t>(v));
    mix(uint64_t{k.align_a} | uint64_t{k.align_b} << 16 | uint64_t{k.align_c} << 32);
    return static_cast<size_t>(h);
  }
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct TypeInfo {
  cudaDataType_t data, scale;
  cublasComputeType_t compute;
};
TypeInfo type_info(DType t, bool tf32) {
  switch (t) {
    case DType::Float64:
      return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::Float16:
      return {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::BFloat16:
      return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    default:
      return {CUDA_R_32F, CUDA_R_32F, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
  }
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t stride, const char* op) {
  cublasLtMatrixLayout_t l = nullptr;
  check_cublas(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                          static_cast<uint64_t>(cols), ld),
               "cublasLtMatrixLayoutCreate", op);
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check_cublas(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                  sizeof(count)),
                 "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", op);
    check_cublas(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &stride, sizeof(stride)),
                 "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", op);
  }
  return l;
}

GemmPlan build_plan(const GemmKey& key, const char* op) {
  const TypeInfo ti = type_info(key.dtype, key.tf32);
  GemmPlan p;
  check_cublas(cublasLtMatmulDescCreate(&p.desc, ti.compute, ti.scale), "cublasLtMatmulDescCreate",
               op);
  const cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
               "cublasLtMatmulDescSetAttribute(TRANSA)", op);
  check_cublas(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
               "cublasLtMatmulDescSetAttribute(TRANSB)", op);
  p.a = make_layout(ti.data, key.rows_a, key.cols_a, key.ld_a, key.batch, key.stride_a, op);
  p.b = make_layout(ti.data, key.rows_b, key.cols_b, key.ld_b, key.batch, key.stride_b, op);
  p.c = make_layout(ti.data, key.m, key.n, key.m, key.batch, key.m * key.n, op);

  cublasLtMatmulPreference_t pref = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", op);
  const uint64_t ws = cublas_workspace(key.device).size;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                       &key.align_a, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &key.align_b, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                       &key.align_c, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                       &key.align_c, sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // Through the process's algorithm store (gemm_algo_heuristic.h): a new process reuses the
  // answer an earlier one got, bit for bit what the heuristic would return.
  const cublasStatus_t st = lt_heuristic(key.device, cublaslt_handle(key.device), p.desc, p.a, p.b,
                                         p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
    EMBER_FAIL(op, ": cuBLASLt has no algorithm for ", dtype_name(key.dtype), " m=", key.m,
               " n=", key.n, " k=", key.k, " batch=", key.batch, " (lda=", key.ld_a,
               ", ldb=", key.ld_b, "): ", cublasLtGetStatusString(st));
  }
  p.algo = result.algo;
  return p;
}

// Plans live for the whole process: they are small, and destroying cuBLASLt objects during
// static destruction (after the driver may have shut down) is not safe.
std::mutex& plan_mutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<GemmKey, GemmPlan, GemmKeyHash>& plans() {
  static auto* cache = new std::unordered_map<GemmKey, GemmPlan, GemmKeyHash>();
  return *cache;
}

const GemmPlan& cached_plan(const GemmKey& key, const char* op) {
  std::lock_guard<std::mutex> lock(plan_mutex());
  auto it = plans().find(key);
  if (it != plans().end()) return it->second;
  return plans().emplace(key, build_plan(key, op)).first->second;
}

}  // namespace

void drop_mm_plans_for_testing() {
  std::lock_guard<std::mutex> lock(plan_mutex());
  for (auto& [key, p] : plans()) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  plans().clear();
}

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
  // cuBLASLt's A is our B (as B^T [N,K]) and its B is our A (as A^T [K,M]); result [N,M] = C^T.
  Tensor copy_a, copy_b;
  const Operand lt_a = make_operand(b, copy_b);
  const Operand lt_b = make_operand(a, copy_a);
  GemmKey key{};
  key.device = device;
  key.dtype = a.dtype();
  key.tf32 = a.dtype() == kFloat32 && allow_tf32();
  key.trans_a = lt_a.trans;
  key.trans_b = lt_b.trans;
  key.m = N;
  key.n = M;
  key.k = K;
  key.batch = batch;
  key.rows_a = lt_a.rows;
  key.cols_a = lt_a.cols;
  key.ld_a = lt_a.ld;
  key.stride_a = lt_a.batch_stride;
  key.rows_b = lt_b.rows;
  key.cols_b = lt_b.cols;
  key.ld_b = lt_b.ld;
  key.stride_b = lt_b.batch_stride;
  key.align_a = alignment_of(lt_a.ptr);
  key.align_b = alignment_of(lt_b.ptr);
  key.align_c = alignment_of(out.raw_data());
  const GemmPlan& plan = cached_plan(key, name);

  const float one_f = 1.f, zero_f = 0.f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = a.dtype() == kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  const Workspace ws = cublas_workspace(device);
  check_cublas(cublasLtMatmul(cublaslt_handle(device), plan.desc, alpha, lt_a.ptr, plan.a, lt_b.ptr,
                              plan.b, beta, out.raw_data(), plan.c, out.raw_data(), plan.c,
                              &plan.algo, ws.ptr, ws.size, s),
               "cublasLtMatmul", name);
}

}  // namespace ember::kernels::cuda
