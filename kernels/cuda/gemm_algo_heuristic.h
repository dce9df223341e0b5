#pragma once
// cublasLtMatmulAlgoGetHeuristic through the process's algorithm store (gemm_algo_store.h): the
// one call the cuBLASLt plan builders (matmul.cu, gemm_epilogue.cu) make instead of asking the
// heuristic directly. CUDA host code (cuBLASLt types); defined in gemm_algo_store.cpp.
#include <cublasLt.h>

#include <string>

namespace ember::kernels::cuda {

// Same contract as cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, requested,
// results, found): with no store installed it is that call. With one, a stored answer for this
// exact problem on `device` (its workspace checked, and cublasLtMatmulAlgoCheck when
// set_gemm_algo_check(true)) is returned instead, and an answer the heuristic gives is stored
// for the next process. Whatever the store holds, the
// returned status, results and count are what the heuristic returns: a malformed, mismatched or
// refused entry is ignored (reported on the store's log) and rewritten. Only successful answers
// and "no algorithm" (CUBLAS_STATUS_NOT_SUPPORTED) answers are stored. The descriptor's pointers
// (bias, aux, ...) must be set as the heuristic needs them (it checks their alignment).
cublasStatus_t lt_heuristic(int device, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                            cublasLtMatmulPreference_t pref, int requested,
                            cublasLtMatmulHeuristicResult_t* results, int* found);

// Every attribute of the descriptor, the four layouts and the preference, plus `requested`, as
// text: what the heuristic's answer depends on besides the environment. Pointers count by
// whether they are set and their alignment (alignment_of, kernels/blas_layout.h). Empty when the
// problem cannot be described (an attribute too large to read, an emulation descriptor set).
std::string lt_fingerprint(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                           cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                           cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                           int requested);

// Where autotune_gemm keeps a problem's winner: the store key and the problem's fingerprint for
// these descriptors (the ones the heuristic was asked with), or an empty key when no store is
// installed or the problem cannot be described.
struct GemmTuneSlot {
  std::string key, fingerprint;
};
GemmTuneSlot lt_tune_slot(int device, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                          cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                          cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested);
// The winner stored in `slot` for `candidates` candidates, or -1 (a miss, or an entry that is
// malformed, for another problem or for another number of candidates: reported and ignored).
// `times` receives the stored times on a hit.
int32_t lt_load_tune(const GemmTuneSlot& slot, int candidates, std::vector<float>* times);
// Keeps a winner (index into `times`) in the store; a failure to write is reported, not thrown.
void lt_keep_tune(const GemmTuneSlot& slot, int32_t index, const std::vector<float>& times);

// The plan cache's test hook (gemm_epilogue.cu); see drop_gemm_plans_for_testing.
void drop_gemm_epilogue_plans_for_testing();

}  // namespace ember::kernels::cuda
