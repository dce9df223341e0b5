#pragma once
// A process-wide, optional store of cuBLASLt's algorithm choices, so a new process can skip
// cublasLtMatmulAlgoGetHeuristic (tens of milliseconds for the first query of a process) for the
// GEMM problems an earlier process asked about. The JIT installs one backed by its disk cache
// (jit/disk_store.h); without one, every plan asks the heuristic, as before.
//
// Both places that build cuBLASLt plans (matmul.cu for eager mm/bmm, gemm_epilogue.cu for the
// JIT's GEMMs) ask through lt_heuristic() (gemm_algo_heuristic.h), which looks the problem up
// here first. The key hashes everything the heuristic's answer depends on: every attribute of the
// matmul descriptor, the four matrix layouts and the preference (pointers by their alignment), the
// number of algorithms asked for, cuBLASLt's and the CUDA runtime's versions, and the device's
// name, compute capability and SM count. A stored answer is therefore exactly what the heuristic
// would return, and results are bitwise the same with or without the store.
//
// No CUDA headers here, so the JIT and host-only tests can use it; the definitions exist in CUDA
// builds only.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cuda/nvrtc.h"

namespace ember::kernels::cuda {

// Installs `store` (nullptr: none) for every later plan; not owned, it must outlive its use.
// Lookups happen only when a plan is built (once per problem per process), never per call.
void set_gemm_algo_store(nvrtc::BinaryStore* store);
nvrtc::BinaryStore* gemm_algo_store();

// Where the store's hits, misses and rejected entries are reported (the kernels cannot reach the
// JIT's logs; the JIT installs a sink writing to EMBER_LOGS=cache). nullptr: nowhere. Returns
// the previous sink.
using GemmAlgoLogSink = void (*)(std::string_view line);
GemmAlgoLogSink set_gemm_algo_log(GemmAlgoLogSink sink);

// Whether a stored algorithm is checked with cublasLtMatmulAlgoCheck before it is used (default
// off: the check's first call in a process costs about what the heuristic query does, so a warm
// process would save nothing). Off trusts the key, which pins cuBLASLt's version, the device and
// the whole problem; the stored workspace size is checked either way.
void set_gemm_algo_check(bool on);

struct GemmAlgoStoreStats {
  int64_t lookups = 0;         // plans built while a store was installed
  int64_t hits = 0;            // served from the store (heuristic skipped)
  int64_t misses = 0;          // not in the store (or rejected): the heuristic was asked
  int64_t bad_entries = 0;     // stored bytes that were malformed or for another problem
  int64_t check_failures = 0;  // stored algorithms refused (workspace, or AlgoCheck when on)
  int64_t stores = 0;          // answers written to the store
  int64_t uncacheable = 0;     // problems the store cannot describe (asked the heuristic)
  double heuristic_us = 0;     // time in the heuristic, all misses together
  double hit_us = 0;           // time serving hits (load, decode, check)
  int64_t tune_hits = 0;       // autotune winners served from the store (no timing)
  int64_t tune_misses = 0;     // winners not in the store (or rejected): timed
  int64_t tune_stores = 0;     // winners written to the store
};
GemmAlgoStoreStats gemm_algo_store_stats();
void reset_gemm_algo_store_stats();

// ---- host-only parts (no GPU needed), exposed for tests ---------------------------------------

// What besides the problem decides the heuristic's answer.
struct GemmAlgoEnv {
  uint64_t cublaslt_version = 0;  // cublasLtGetVersion()
  int runtime_version = 0;        // cudaRuntimeGetVersion()
  int driver_version = 0;         // cudaDriverGetVersion()
  std::string device_name;
  int arch = 0;             // compute capability, major * 10 + minor
  int sm_count = 0;         // multiprocessors (a MIG slice has fewer)
  std::string environment;  // cuBLAS environment variables that change its choices
};

// The store key of a problem fingerprint (lt_fingerprint, gemm_algo_heuristic.h) in `env`:
// "ltalgo-" and 32 hex digits, a valid DiskCache key.
std::string gemm_algo_key(std::string_view fingerprint, const GemmAlgoEnv& env);

// One heuristic result as stored: cublasLtMatmulHeuristicResult_t minus its reserved words.
struct StoredGemmAlgo {
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t::data, opaque
  uint64_t workspace = 0;
  int32_t state = 0;  // cublasStatus_t of this result
  float waves = 0;
};
// The heuristic's whole answer to one problem: its status and results, with the fingerprint of
// the problem it answered (compared on load, so a key collision is a miss, never a wrong algo).
struct StoredGemmAnswer {
  int32_t status = 0;  // cublasStatus_t of cublasLtMatmulAlgoGetHeuristic
  std::string fingerprint;
  std::vector<StoredGemmAlgo> algos;
};
// At most this many results per answer (cuBLASLt callers ask for 1 or 8).
inline constexpr size_t kMaxStoredGemmAlgos = 64;

// The stored bytes: a header (magic "EMBLTALG", format version, size of an algo), the status,
// the fingerprint and the results, in this machine's byte order (the key pins the machine).
std::string encode_gemm_answer(const StoredGemmAnswer& answer);
// nullopt, with the reason in `why`, for anything that is not exactly what encode wrote.
std::optional<StoredGemmAnswer> decode_gemm_answer(std::string_view bytes, std::string* why);

// A plain (or batched) cuBLASLt matmul problem, for testing lt_fingerprint without a GPU:
// cuBLASLt's descriptors are host objects. Column-major, as cuBLASLt sees it.
struct GemmAlgoTestProblem {
  bool f64 = false, tf32 = false;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;  // D[m, n] = op(A)[m, k] op(B)[k, n]
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  int32_t epilogue = 1;        // cublasLtEpilogue_t (1: CUBLASLT_EPILOGUE_DEFAULT)
  const void* bias = nullptr;  // set as CUBLASLT_MATMUL_DESC_BIAS_POINTER when not null
  uint32_t align_a = 256, align_b = 256, align_d = 256;
  uint64_t workspace = 0;
  int requested = 1;  // algorithms asked for
};
// The fingerprint lt_fingerprint computes for the descriptors built from `p` (empty when the
// problem cannot be stored).
std::string gemm_algo_fingerprint_for_testing(const GemmAlgoTestProblem& p);

// ---- MaxAutotune's winners ------------------------------------------------------------------
// autotune_gemm (gemm_epilogue.h) keeps the winner it timed for a problem in the same store,
// under "lttune-" and the problem's key, so a new process reuses it instead of timing again.
// The winner indexes the heuristic's candidates, which the store also keeps: a stored winner
// is valid as long as the candidates are the same, which the key guarantees.
struct StoredGemmTune {
  std::string fingerprint;      // of the problem (compared on load, as for the algorithms)
  int32_t index = -1;           // the fastest of `times`
  std::vector<float> times_us;  // per candidate, +inf for one that failed or was skipped
};
std::string encode_gemm_tune(const StoredGemmTune& tune);
std::optional<StoredGemmTune> decode_gemm_tune(std::string_view bytes, std::string* why);
// The store key of a problem's autotune winner: "lttune-" and 32 hex digits.
std::string gemm_tune_key(std::string_view fingerprint, const GemmAlgoEnv& env);

// Forget every cuBLASLt plan (and its algorithms, and gemm_epilogue's autotuned winners) that
// matmul.cu and gemm_epilogue.cu cached, so the next GEMM of a problem builds its plan again,
// through the store. Tests only, with no GEMM running on any thread.
void drop_gemm_plans_for_testing();

}  // namespace ember::kernels::cuda
