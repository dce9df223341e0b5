// cuBLASLt matmuls, with epilogues or batched (gemm_epilogue.h), and the process's one problem ->
// plan cache. A plan keeps the heuristic's top 8 algorithms, so an autotuner can time them and
// pin a winner, and the epilogue's extra pointers (bias, bias gradient, ReLU mask) are set on the
// descriptor: before the heuristic query, which checks their alignment, and before every call,
// since a plan serves any pointers of the same alignment. The
// heuristic's answers persist across processes through the algorithm store when one is installed
// (gemm_algo_store.h).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "core/ops.h"
#include "kernels/blas_layout.h"
#include "kernels/cuda/gemm_algo_heuristic.h"
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kMaxAlgorithms = 8;

void check_lt(cublasStatus_t st, const char* call) {
  EMBER_CHECK(st == CUBLAS_STATUS_SUCCESS, "gemm_epilogue: ", call,
              " failed: ", cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st), ")");
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  // The call is made as D^T = B^T A^T: cuBLASLt's A is our B, its B our A. Its per-row bias of
  // D^T is our per-column bias; its BGRADA (over its A) is the column sums of our B.
  switch (e) {
    case GemmEpilogue::None:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::Bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::ReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::ReluAuxBias:
      return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case GemmEpilogue::DReluBGrad:
      return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case GemmEpilogue::BGradA:
      return CUBLASLT_EPILOGUE_BGRADB;
    case GemmEpilogue::BGradB:
      return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool uses_bias(GemmEpilogue e) {
  return e == GemmEpilogue::Bias || e == GemmEpilogue::ReluBias || e == GemmEpilogue::ReluAuxBias;
}
bool uses_bias_grad(GemmEpilogue e) {
  return e == GemmEpilogue::DReluBGrad || e == GemmEpilogue::BGradA || e == GemmEpilogue::BGradB;
}
bool uses_aux(GemmEpilogue e) {
  return e == GemmEpilogue::ReluAuxBias || e == GemmEpilogue::DReluBGrad;
}

using LtOperand = BlasLayout;  // kernels/blas_layout.h

struct Key {
  int device;
  DType dtype;
  bool tf32;
  GemmEpilogue epilogue;
  int64_t m, n, k;  // cuBLASLt's: m = our N, n = our M
  LtOperand a, b;   // cuBLASLt's A (our B^T) and B (our A^T)
  int64_t ld_d, aux_ld;
  int64_t batch, stride_a, stride_b, stride_d;  // cuBLASLt's A and B, as above
  uint32_t align_a, align_b, align_d, align_vec, align_aux;
  bool operator==(const Key& o) const {
    auto same = [](const LtOperand& x, const LtOperand& y) {
      return x.trans == y.trans && x.rows == y.rows && x.cols == y.cols && x.ld == y.ld;
    };
    return device == o.device && dtype == o.dtype && tf32 == o.tf32 && epilogue == o.epilogue &&
           m == o.m && n == o.n && k == o.k && same(a, o.a) && same(b, o.b) && ld_d == o.ld_d &&
           aux_ld == o.aux_ld && batch == o.batch && stride_a == o.stride_a &&
           stride_b == o.stride_b && stride_d == o.stride_d && align_a == o.align_a &&
           align_b == o.align_b && align_d == o.align_d && align_vec == o.align_vec &&
           align_aux == o.align_aux;
  }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ull; };
    mix(static_cast<uint64_t>(k.device) << 16 | static_cast<uint64_t>(k.dtype) << 8 |
        static_cast<uint64_t>(k.epilogue));
    mix(uint64_t{k.tf32} | uint64_t{k.a.trans} << 1 | uint64_t{k.b.trans} << 2);
    for (int64_t v : {k.m, k.n, k.k, k.a.rows, k.a.cols, k.a.ld, k.b.rows, k.b.cols, k.b.ld, k.ld_d,
                      k.aux_ld, k.batch, k.stride_a, k.stride_b, k.stride_d})
      mix(static_cast<uint64_t>(v));
    mix(uint64_t{k.align_a} | uint64_t{k.align_b} << 9 | uint64_t{k.align_d} << 18 |
        uint64_t{k.align_vec} << 27 | uint64_t{k.align_aux} << 36);
    return static_cast<size_t>(h);
  }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulHeuristicResult_t algos[kMaxAlgorithms]{};
  int count = 0;
  int chosen = 0;  // what algorithm -1 runs: 0, or the autotuned winner
  bool tuned = false;
  GemmAutotuneResult tune;
  GemmTuneSlot tune_slot;  // where the winner persists (empty key: no store)
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

Key make_key(const GemmCall& c) {
  Key key{};
  key.device = c.device;
  key.dtype = c.dtype;
  key.tf32 = c.dtype == kFloat32 && allow_tf32();
  key.epilogue = c.epilogue;
  key.m = c.b.cols;
  key.n = c.a.rows;
  key.k = c.a.cols;
  describe_transposed(c.b.rows, c.b.cols, c.b.row_stride, c.b.col_stride, key.a);
  describe_transposed(c.a.rows, c.a.cols, c.a.row_stride, c.a.col_stride, key.b);
  key.ld_d = c.ld_d > 0 ? c.ld_d : c.b.cols;
  key.aux_ld = uses_aux(c.epilogue) ? (c.aux_ld > 0 ? c.aux_ld : relu_mask_ld(c.b.cols)) : 0;
  key.batch = c.batch;
  if (c.batch > 1) {
    key.stride_a = c.stride_b;
    key.stride_b = c.stride_a;
    key.stride_d = c.stride_d > 0 ? c.stride_d : c.a.rows * key.ld_d;
  }
  key.align_a = alignment_of(c.b.ptr);
  key.align_b = alignment_of(c.a.ptr);
  key.align_d = alignment_of(c.d);
  key.align_vec = uses_bias(c.epilogue)        ? alignment_of(c.bias)
                  : uses_bias_grad(c.epilogue) ? alignment_of(c.bias_grad)
                                               : 0;
  key.align_aux = uses_aux(c.epilogue) ? alignment_of(c.aux) : 0;
  return key;
}

// The epilogue's pointers on the descriptor (they are part of the call, not of the plan).
void set_pointers(const Plan& p, const Key& key, const GemmCall& c) {
  if (uses_bias(c.epilogue) || uses_bias_grad(c.epilogue)) {
    const void* v = uses_bias(c.epilogue) ? c.bias : c.bias_grad;
    check_lt(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &v, sizeof(v)),
        "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  if (uses_aux(c.epilogue)) {
    void* aux = c.aux;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                            sizeof(aux)),
             "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                            &key.aux_ld, sizeof(key.aux_ld)),
             "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
  }
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                      static_cast<uint64_t>(cols), ld),
           "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof(count)),
             "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
    check_lt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &stride, sizeof(stride)),
             "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
  }
  return l;
}

Plan build_plan(const Key& key, const GemmCall& call) {
  const TypeInfo ti = type_info(key.dtype, key.tf32);
  Plan p;
  check_lt(cublasLtMatmulDescCreate(&p.desc, ti.compute, ti.scale), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = key.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = lt_epilogue(key.epilogue);
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
           "cublasLtMatmulDescSetAttribute(TRANSA)");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
           "cublasLtMatmulDescSetAttribute(TRANSB)");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
           "cublasLtMatmulDescSetAttribute(EPILOGUE)");
  set_pointers(p, key, call);
  p.a = make_layout(ti.data, key.a.rows, key.a.cols, key.a.ld, key.batch, key.stride_a);
  p.b = make_layout(ti.data, key.b.rows, key.b.cols, key.b.ld, key.batch, key.stride_b);
  p.d = make_layout(ti.data, key.m, key.n, key.ld_d, key.batch, key.stride_d);

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = cublas_workspace(key.device).size;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                       &key.align_a, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &key.align_b, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                       &key.align_d, sizeof(uint32_t));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                       &key.align_d, sizeof(uint32_t));
  cublasLtMatmulHeuristicResult_t found[kMaxAlgorithms]{};
  int n = 0;
  // Through the process's algorithm store (gemm_algo_heuristic.h): a new process reuses the
  // answer an earlier one got, bit for bit what the heuristic would return.
  const cublasStatus_t st = lt_heuristic(key.device, cublaslt_handle(key.device), p.desc, p.a, p.b,
                                         p.d, p.d, pref, kMaxAlgorithms, found, &n);
  p.tune_slot = lt_tune_slot(key.device, p.desc, p.a, p.b, p.d, p.d, pref, kMaxAlgorithms);
  cublasLtMatmulPreferenceDestroy(pref);
  // An unsupported epilogue is a plan with no algorithms (top_algorithms reports it empty), not
  // an error here.
  if (st == CUBLAS_STATUS_SUCCESS)
    for (int i = 0; i < n; ++i)
      if (found[i].state == CUBLAS_STATUS_SUCCESS) p.algos[p.count++] = found[i];
  return p;
}

std::mutex& cache_mutex() {
  static std::mutex mu;
  return mu;
}

// Plans live for the whole process (small; destroying cuBLASLt objects during static destruction
// is not safe). Callers hold cache_mutex() for as long as they use the plan: its descriptor's
// pointers are set per call.
std::unordered_map<Key, Plan, KeyHash>& plans() {
  static auto* cache = new std::unordered_map<Key, Plan, KeyHash>();
  return *cache;
}
Plan& plan_for(const Key& key, const GemmCall& call) {
  auto it = plans().find(key);
  if (it != plans().end()) return it->second;
  return plans().emplace(key, build_plan(key, call)).first->second;
}

std::string describe_algo(const cublasLtMatmulHeuristicResult_t& r) {
  int32_t id = -1, splitk = 1;
  uint32_t tile = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                       sizeof(splitk), &w);
  char buf[128];
  std::snprintf(buf, sizeof buf, "algo %d tile %u splitK %d waves %.2f ws %zu", id, tile, splitk,
                static_cast<double>(r.wavesCount), r.workspaceSize);
  return buf;
}

std::string problem_str(const GemmCall& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s [%lld,%lld]x[%lld,%lld] %s", gemm_epilogue_name(c.epilogue),
                static_cast<long long>(c.a.rows), static_cast<long long>(c.a.cols),
                static_cast<long long>(c.b.rows), static_cast<long long>(c.b.cols),
                std::string(dtype_name(c.dtype)).c_str());
  return buf;
}

cublasStatus_t launch(const Plan& p, const GemmCall& c, const cublasLtMatmulAlgo_t* algo) {
  const float one_f = 1.f, zero_f = 0.f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = c.dtype == kFloat64;
  const void* alpha = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  const Workspace ws = cublas_workspace(c.device);
  // cuBLASLt's A is our B, its B our A.
  return cublasLtMatmul(cublaslt_handle(c.device), p.desc, alpha, c.b.ptr, p.a, c.a.ptr, p.b, beta,
                        c.d, p.d, c.d, p.d, algo, ws.ptr, ws.size, stream(c.device));
}

// The bias is added in float32 and the sum rounded once to T, as eager's add of the stored
// product computes it.
template <typename T>
__global__ void add_bias_rows_kernel(T* __restrict__ d, int64_t m, int64_t n, int64_t ld,
                                     const T* __restrict__ bias, bool relu) {
  const int64_t total = m * n;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i - r * n;
    float v = static_cast<float>(d[r * ld + c]) + static_cast<float>(bias[c]);
    if (relu && !(v > 0.f || v != v)) v = 0.f;
    d[r * ld + c] = static_cast<T>(v);
  }
}

template <typename T>
void launch_add_bias_rows(int device, void* d, int64_t m, int64_t n, int64_t ld,
                          const void* bias, bool relu) {
  constexpr int kThreads = 256;
  add_bias_rows_kernel<T><<<grid_stride_blocks(m * n, kThreads, device), kThreads, 0,
                            stream(device)>>>(static_cast<T*>(d), m, n, ld,
                                              static_cast<const T*>(bias), relu);
}

}  // namespace

void drop_gemm_epilogue_plans_for_testing() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  for (auto& [key, p] : plans()) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.desc);
  }
  plans().clear();
}

const char* gemm_epilogue_name(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::None:
      return "DEFAULT";
    case GemmEpilogue::Bias:
      return "BIAS";
    case GemmEpilogue::ReluBias:
      return "RELU_BIAS";
    case GemmEpilogue::ReluAuxBias:
      return "RELU_AUX_BIAS";
    case GemmEpilogue::DReluBGrad:
      return "DRELU_BGRAD";
    case GemmEpilogue::BGradA:
      return "BGRAD(A)";
    case GemmEpilogue::BGradB:
      return "BGRAD(B)";
  }
  return "?";
}

int64_t relu_mask_ld(int64_t n) { return (std::max<int64_t>(n, 1) + 127) / 128 * 128; }
int64_t relu_mask_bytes(int64_t m, int64_t n) { return m * relu_mask_ld(n) / 8; }

void check_gemm_call(const GemmCall& c) {
  const char* epi = gemm_epilogue_name(c.epilogue);
  EMBER_CHECK(is_floating(c.dtype), "gemm_epilogue ", epi, ": float types only, got ",
              dtype_name(c.dtype));
  EMBER_CHECK(c.a.rows > 0 && c.a.cols > 0 && c.b.cols > 0 && c.a.cols == c.b.rows,
              "gemm_epilogue ", epi, ": operands [", c.a.rows, ",", c.a.cols, "] x [", c.b.rows,
              ",", c.b.cols, "] do not multiply (or are empty)");
  LtOperand tmp;
  EMBER_CHECK(describe_transposed(c.a.rows, c.a.cols, c.a.row_stride, c.a.col_stride, tmp),
              "gemm_epilogue ", epi, ": operand A [", c.a.rows, ",", c.a.cols, "] with strides (",
              c.a.row_stride, ",", c.a.col_stride, ") has no unit stride");
  EMBER_CHECK(describe_transposed(c.b.rows, c.b.cols, c.b.row_stride, c.b.col_stride, tmp),
              "gemm_epilogue ", epi, ": operand B [", c.b.rows, ",", c.b.cols, "] with strides (",
              c.b.row_stride, ",", c.b.col_stride, ") has no unit stride");
  EMBER_CHECK(c.a.ptr && c.b.ptr && c.d, "gemm_epilogue ", epi, ": null operand or output");
  EMBER_CHECK(c.ld_d == 0 || c.ld_d >= c.b.cols, "gemm_epilogue ", epi, ": output ld ", c.ld_d,
              " < N = ", c.b.cols);
  EMBER_CHECK(c.batch >= 1 && c.batch <= INT32_MAX, "gemm_epilogue ", epi, ": batch ", c.batch,
              " out of range");
  EMBER_CHECK(c.batch == 1 || c.epilogue == GemmEpilogue::None, "gemm_epilogue ", epi,
              ": a batched product takes no epilogue");
  EMBER_CHECK(c.stride_a >= 0 && c.stride_b >= 0 && c.stride_d >= 0, "gemm_epilogue ", epi,
              ": negative batch stride");
  EMBER_CHECK(!uses_bias(c.epilogue) || c.bias, "gemm_epilogue ", epi, ": needs a bias");
  EMBER_CHECK(!uses_bias_grad(c.epilogue) || c.bias_grad, "gemm_epilogue ", epi,
              ": needs a bias-gradient output");
  if (uses_aux(c.epilogue)) {
    EMBER_CHECK(c.aux, "gemm_epilogue ", epi, ": needs a ReLU mask buffer");
    EMBER_CHECK(c.aux_ld == 0 || (c.aux_ld % 128 == 0 && c.aux_ld >= c.b.cols), "gemm_epilogue ",
                epi, ": mask ld ", c.aux_ld,
                " bits must be a multiple of 128 and >= N = ", c.b.cols);
  }
}

std::vector<GemmAlgorithm> top_algorithms(const GemmCall& call, int k) {
  check_gemm_call(call);
  DeviceGuard guard(call.device);
  const Key key = make_key(call);
  std::lock_guard<std::mutex> lock(cache_mutex());
  const Plan& p = plan_for(key, call);
  std::vector<GemmAlgorithm> out;
  for (int i = 0; i < std::min(k, p.count); ++i)
    out.push_back({i, p.algos[i].workspaceSize, p.algos[i].wavesCount, describe_algo(p.algos[i])});
  return out;
}

namespace {
// Runs the call when a plan has an algorithm; false (nothing queued) when it has none.
bool run_call(const GemmCall& call, int algorithm, bool required) {
  check_gemm_call(call);
  DeviceGuard guard(call.device);
  const Key key = make_key(call);
  std::lock_guard<std::mutex> lock(cache_mutex());
  const Plan& p = plan_for(key, call);
  if (p.count == 0 && !required) return false;
  EMBER_CHECK(p.count > 0, "gemm_epilogue: cuBLASLt has no algorithm for ", problem_str(call),
              " (lda=", key.a.ld, ", ldb=", key.b.ld, ")");
  const int idx = algorithm < 0 ? p.chosen : algorithm;
  EMBER_CHECK(idx < p.count, "gemm_epilogue: algorithm ", algorithm, " out of range: ", p.count,
              " candidates for ", problem_str(call));
  set_pointers(p, key, call);
  check_lt(launch(p, call, &p.algos[idx].algo), "cublasLtMatmul");
  return true;
}
}  // namespace

void gemm_epilogue(const GemmCall& call, int algorithm) { run_call(call, algorithm, true); }
bool try_gemm_epilogue(const GemmCall& call, int algorithm) {
  return run_call(call, algorithm, false);
}

bool stream_capturing(int device) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(stream(device), &st));
  return st != cudaStreamCaptureStatusNone;
}

GemmAutotuneResult autotune_gemm(const GemmCall& call, int k, int repeats, double budget_ms) {
  check_gemm_call(call);
  GemmAutotuneResult res;
  if (stream_capturing(call.device)) return res;
  DeviceGuard guard(call.device);
  const Key key = make_key(call);
  std::lock_guard<std::mutex> lock(cache_mutex());
  Plan& p = plan_for(key, call);
  if (p.tuned) {
    res = p.tune;
    res.cached = true;
    return res;
  }
  const int n = std::clamp(k, 0, std::min(p.count, kMaxAlgorithms));
  if (n == 0) return res;
  // An earlier process timed these very candidates: take its winner, time nothing.
  if (const int32_t won = lt_load_tune(p.tune_slot, n, &res.times); won >= 0) {
    res.index = won;
    res.microseconds = res.times[won];
    res.describe = describe_algo(p.algos[won]);
    res.from_store = true;
    set_pointers(p, key, call);
    check_lt(launch(p, call, &p.algos[won].algo), "cublasLtMatmul");  // D, as a timed run leaves it
    p.chosen = won;
    p.tuned = true;
    p.tune = res;
    return res;
  }
  repeats = std::max(repeats, 1);
  cudaStream_t s = stream(call.device);
  cudaEvent_t start = nullptr, stop = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreate(&start));
  EMBER_CUDA_CHECK(cudaEventCreate(&stop));
  set_pointers(p, key, call);
  res.times.assign(n, std::numeric_limits<float>::infinity());
  double spent_ms = 0;
  for (int i = 0; i < n && spent_ms < budget_ms; ++i) {
    const cublasLtMatmulAlgo_t* algo = &p.algos[i].algo;
    if (launch(p, call, algo) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up; skip a failure
    bool ok = cudaEventRecord(start, s) == cudaSuccess;
    for (int r = 0; r < repeats && ok; ++r) ok = launch(p, call, algo) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cudaEventRecord(stop, s) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess;
    float ms = 0;
    if (!ok || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) continue;
    spent_ms += ms;
    res.times[i] = 1000.f * ms / static_cast<float>(repeats);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  // A failed launch leaves a sticky error only for real faults; surface those here.
  EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i)
    if (std::isfinite(res.times[i]) && (res.index < 0 || res.times[i] < res.times[res.index]))
      res.index = i;
  if (res.index < 0) return res;  // nothing could be timed: keep the heuristic's choice
  res.microseconds = res.times[res.index];
  res.describe = describe_algo(p.algos[res.index]);
  // The last runs used the last candidate: rerun the winner so D holds its result (identical
  // values up to summation order, which the winner now fixes for every later call).
  check_lt(launch(p, call, &p.algos[res.index].algo), "cublasLtMatmul");
  p.chosen = res.index;
  p.tuned = true;
  p.tune = res;
  lt_keep_tune(p.tune_slot, res.index, res.times);
  return res;
}

void add_bias_rows(int device, DType dtype, void* d, int64_t m, int64_t n, int64_t ld,
                   const void* bias, bool relu) {
  EMBER_CHECK(dtype == kFloat32 || dtype == kBFloat16 || dtype == kFloat16,
              "add_bias_rows: float32, bfloat16 or float16 only, got ", dtype_name(dtype));
  if (m <= 0 || n <= 0) return;
  DeviceGuard guard(device);
  if (dtype == kFloat32) {
    launch_add_bias_rows<float>(device, d, m, n, ld, bias, relu);
  } else if (dtype == kBFloat16) {
    launch_add_bias_rows<__nv_bfloat16>(device, d, m, n, ld, bias, relu);
  } else {
    launch_add_bias_rows<__half>(device, d, m, n, ld, bias, relu);
  }
  check_launch("add_bias_rows");
}

}  // namespace ember::kernels::cuda
