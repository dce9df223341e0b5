#pragma once
// One cuBLASLt matmul with a fused epilogue: D[M,N] = A[M,K] B[K,N], then a bias, a ReLU (with
// its bit mask), the ReLU gradient with the bias gradient, or the bias gradient of an operand,
// all inside the GEMM kernel; or a strided batch of plain products. The one cuBLASLt entry
// point: the eager mm and bmm (kernels/cuda/matmul.cu) and the JIT's GEMM lowering
// (jit/lower_gemm_cuda.cpp) both call it, so they share one plan cache. No CUDA types here, so
// jit/ can include it. Everything runs on stream(device) with the per-device
// cuBLASLt workspace (kernels/cuda/runtime.h); nothing synchronizes except the autotuner.
//
// Everything is stated in Ember's row-major terms. cuBLASLt is column-major, so the call is
// made as D^T = B^T A^T: an operand stored row-major is a column-major transpose for free, and
// a transposed view (column-major in memory) is a transpose flag. The bias of a row-major D (one
// value per column n, broadcast over the M rows) is then cuBLASLt's per-row bias of D^T.
//
// Descriptors, layouts and the heuristic's top algorithms are built once per problem (shapes,
// layouts, epilogue, dtype, TF32 setting and the pointers' alignments) and cached for the life
// of the process. The bias and mask pointers are set on the descriptor before the heuristic
// query (cuBLASLt checks their alignment) and again before every call.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace ember::kernels::cuda {

enum class GemmEpilogue : uint8_t {
  None,         // D = A B
  Bias,         // D = A B + bias                      bias [N], broadcast over the M rows
  ReluBias,     // D = relu(A B + bias)
  ReluAuxBias,  // D = relu(A B + bias); aux = bit mask of (A B + bias > 0)
  DReluBGrad,   // D = (A B) where aux's bit is set, else 0; bias_grad[n] = sum_m D[m, n]
  BGradA,       // D = A B; bias_grad[m] = sum_k A[m, k]   (row sums of A, length M)
  BGradB,       // D = A B; bias_grad[n] = sum_k B[k, n]   (column sums of B, length N)
};
const char* gemm_epilogue_name(GemmEpilogue e);  // "RELU_AUX_BIAS", ...

// A matrix X[rows, cols]: element (i, j) at ptr + (i * row_stride + j * col_stride) elements.
// A GEMM operand needs a unit stride along one dim (row-major or a transposed view).
struct GemmMatrix {
  const void* ptr = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 0;
};

// The ReLU bit mask of an [M, N] output: bit (m, n) at m * ld + n, ld in bits (a multiple of 128
// that is at least N, as cuBLASLt requires). The same layout serves RELU_AUX_BIAS (written) and
// DRELU_BGRAD (read) of two GEMMs with equal [M, N] outputs.
int64_t relu_mask_ld(int64_t n);
int64_t relu_mask_bytes(int64_t m, int64_t n);

struct GemmCall {
  int device = 0;
  DType dtype = kFloat32;  // float32 uses TF32 only if allow_tf32() (core/ops.h)
  GemmMatrix a;            // [M, K]
  GemmMatrix b;            // [K, N]
  void* d = nullptr;       // [M, N], row-major with leading dimension ld_d
  int64_t ld_d = 0;        // 0: N
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;  // Bias, ReluBias, ReluAuxBias: [N], contiguous, `dtype`
  void* bias_grad = nullptr;   // DReluBGrad, BGradB: [N]; BGradA: [M]; contiguous, `dtype`
  void* aux = nullptr;         // ReluAuxBias: the mask written; DReluBGrad: the mask read
  int64_t aux_ld = 0;          // bits; 0: relu_mask_ld(N)
  // Batched products (epilogue None only): `batch` products D_i = A_i B_i, the i-th matrices of
  // a, b and d `stride_*` elements after the first (0: every product reads the same matrix).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
};

// Throws ember::Error naming the problem when a shape, layout or pointer does not fit the
// epilogue (before anything is queued).
void check_gemm_call(const GemmCall& call);

struct GemmAlgorithm {
  int32_t index = 0;           // position in the heuristic's order (0: its first choice)
  size_t workspace_bytes = 0;  // what it needs of the shared workspace
  float waves = 0;             // cuBLASLt's wavesCount: << 1 means an under-filled GPU
  std::string describe;        // "algo 21 tile 15 splitK 1 waves 0.06"
};
// The heuristic's top `k` (<= 8) algorithms for this problem, best first; empty when cuBLASLt
// has none (an epilogue it does not support for these types or layouts).
std::vector<GemmAlgorithm> top_algorithms(const GemmCall& call, int k);

// Runs the call. algorithm -1: the autotuned winner of this problem if autotune_gemm chose one,
// else the heuristic's first choice; otherwise an index into top_algorithms(call, 8). Throws
// ember::Error when cuBLASLt has no algorithm (or the index is out of range).
void gemm_epilogue(const GemmCall& call, int algorithm = -1);
// The same, but returns false (queuing nothing) where cuBLASLt has no algorithm for the problem,
// so a caller can fall back (e.g. to epilogue None + add_bias_rows).
bool try_gemm_epilogue(const GemmCall& call, int algorithm = -1);

// MaxAutotune: times the heuristic's top `k` (<= 8) algorithms on the call's own operands
// (each run rewrites D / bias_grad / aux with the same values) with CUDA events, `repeats` runs
// each after a warm-up, best mean wins, stopping early past `budget_ms` of measured time. The
// winner becomes this problem's default for gemm_epilogue(call). A problem tuned before returns
// its earlier result without timing again. Synchronizes the stream; must not run while the
// stream is being captured (returns index -1, nothing timed, when it is).
struct GemmAutotuneResult {
  int32_t index = -1;        // the winner, or -1 when nothing was timed
  float microseconds = 0;    // its mean time per run
  std::vector<float> times;  // per candidate (microseconds; +inf: failed or skipped)
  bool cached = false;       // an earlier autotune of the same problem
  bool from_store = false;   // timed by an earlier process: read from the algorithm store
  std::string describe;      // the winner's GemmAlgorithm::describe
};
GemmAutotuneResult autotune_gemm(const GemmCall& call, int k = 8, int repeats = 5,
                                 double budget_ms = 100.0);

// Whether stream(device) is being captured into a CUDA graph right now.
bool stream_capturing(int device);

// D[m, n] = act(D[m, n] + bias[n]) in place over a row-major [M, N] float32, bfloat16 or
// float16 matrix with leading dimension ld (act: identity, or Ember's relu, NaN passing through): the lowering's fallback
// when cuBLASLt has no epilogue algorithm for a problem. Same rounding as eager add then relu.
void add_bias_rows(int device, DType dtype, void* d, int64_t m, int64_t n, int64_t ld,
                   const void* bias, bool relu);

}  // namespace ember::kernels::cuda
