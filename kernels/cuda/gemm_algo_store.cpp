// The store of cuBLASLt algorithm choices (gemm_algo_store.h) and the heuristic query that goes
// through it (gemm_algo_heuristic.h).
#include "kernels/cuda/gemm_algo_store.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_map>

#include "kernels/blas_layout.h"
#include "kernels/cuda/gemm_algo_heuristic.h"
#include "kernels/cuda/key_hash.h"
#include "kernels/cuda/runtime.h"

extern char** environ;

namespace ember::kernels::cuda {
namespace {

static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(StoredGemmAlgo::algo),
              "cublasLtMatmulAlgo_t is 8 uint64_t words; the stored format assumes it");

std::atomic<nvrtc::BinaryStore*> g_store{nullptr};
std::atomic<GemmAlgoLogSink> g_log{nullptr};
std::atomic<bool> g_check{false};  // see passes_check

std::mutex& stats_mutex() {
  static std::mutex mu;
  return mu;
}
GemmAlgoStoreStats& stats() {
  static GemmAlgoStoreStats s;
  return s;
}
template <class F>
void update_stats(F&& f) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  f(stats());
}

void say(const std::string& msg) {
  if (GemmAlgoLogSink sink = g_log.load(std::memory_order_acquire)) sink("gemm algorithms: " + msg);
}

double micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// ---- the stored format ----------------------------------------------------------------------

constexpr char kMagic[8] = {'E', 'M', 'B', 'L', 'T', 'A', 'L', 'G'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kAlgoBytes = sizeof(StoredGemmAlgo::algo);
constexpr size_t kHeaderBytes = sizeof kMagic + 5 * sizeof(uint32_t);
constexpr size_t kRecordBytes = kAlgoBytes + sizeof(uint64_t) + sizeof(int32_t) + sizeof(float);
constexpr size_t kMaxFingerprintBytes = size_t{1} << 16;

template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T take(std::string_view bytes, size_t& at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

// ---- the problem's fingerprint --------------------------------------------------------------

// How an attribute's bytes enter the fingerprint. Attribute ids are numbers, not the header's
// enumerators, so a toolkit whose header lacks some still builds; one the library does not know
// reads as absent.
enum class Kind : uint8_t { Value, Pointer, MustBeNull };
struct Attr {
  int id;
  Kind kind;
};
constexpr Attr kDescAttrs[] = {
    {0, Kind::Value},     // COMPUTE_TYPE
    {1, Kind::Value},     // SCALE_TYPE
    {2, Kind::Value},     // POINTER_MODE
    {3, Kind::Value},     // TRANSA
    {4, Kind::Value},     // TRANSB
    {5, Kind::Value},     // TRANSC
    {6, Kind::Value},     // FILL_MODE
    {7, Kind::Value},     // EPILOGUE
    {8, Kind::Pointer},   // BIAS_POINTER
    {10, Kind::Value},    // BIAS_BATCH_STRIDE
    {11, Kind::Pointer},  // EPILOGUE_AUX_POINTER
    {12, Kind::Value},    // EPILOGUE_AUX_LD
    {13, Kind::Value},    // EPILOGUE_AUX_BATCH_STRIDE
    {14, Kind::Value},    // ALPHA_VECTOR_BATCH_STRIDE
    {15, Kind::Value},    // SM_COUNT_TARGET
    {17, Kind::Pointer},  // A_SCALE_POINTER
    {18, Kind::Pointer},  // B_SCALE_POINTER
    {19, Kind::Pointer},  // C_SCALE_POINTER
    {20, Kind::Pointer},  // D_SCALE_POINTER
    {21, Kind::Pointer},  // AMAX_D_POINTER
    {22, Kind::Value},    // EPILOGUE_AUX_DATA_TYPE
    {23, Kind::Pointer},  // EPILOGUE_AUX_SCALE_POINTER
    {24, Kind::Pointer},  // EPILOGUE_AUX_AMAX_POINTER
    {25, Kind::Value},    // FAST_ACCUM
    {26, Kind::Value},    // BIAS_DATA_TYPE
    {31, Kind::Value},    // A_SCALE_MODE
    {32, Kind::Value},    // B_SCALE_MODE
    {33, Kind::Value},    // C_SCALE_MODE
    {34, Kind::Value},    // D_SCALE_MODE
    {35, Kind::Value},    // EPILOGUE_AUX_SCALE_MODE
    {36, Kind::Pointer},  // D_OUT_SCALE_POINTER
    {37, Kind::Value},    // D_OUT_SCALE_MODE
    // EMULATION_DESCRIPTOR: another object whose settings this cannot read; set, the problem is
    // not stored.
    {38, Kind::MustBeNull},
};
constexpr Attr kLayoutAttrs[] = {
    {0, Kind::Value},  // TYPE
    {1, Kind::Value},  // ORDER
    {2, Kind::Value},  // ROWS
    {3, Kind::Value},  // COLS
    {4, Kind::Value},  // LD
    {5, Kind::Value},  // BATCH_COUNT
    {6, Kind::Value},  // STRIDED_BATCH_OFFSET
    {7, Kind::Value},  // PLANE_OFFSET
    {8, Kind::Value},  // BATCH_MODE
};
constexpr Attr kPrefAttrs[] = {
    {0, Kind::Value},   // SEARCH_MODE
    {1, Kind::Value},   // MAX_WORKSPACE_BYTES
    {3, Kind::Value},   // REDUCTION_SCHEME_MASK
    {5, Kind::Value},   // MIN_ALIGNMENT_A_BYTES
    {6, Kind::Value},   // MIN_ALIGNMENT_B_BYTES
    {7, Kind::Value},   // MIN_ALIGNMENT_C_BYTES
    {8, Kind::Value},   // MIN_ALIGNMENT_D_BYTES
    {9, Kind::Value},   // MAX_WAVES_COUNT
    {12, Kind::Value},  // IMPL_MASK
};

// cuBLASLt's ...GetAttribute for one kind of object, taking it as const void*.
using GetAttr = cublasStatus_t (*)(const void*, int, void*, size_t, size_t*);

// One attribute of a known type, or `fallback` when it cannot be read.
template <class T>
T read_attr(GetAttr get, const void* obj, int id, T fallback) {
  T v{};
  size_t w = 0;
  return get(obj, id, &v, sizeof v, &w) == CUBLAS_STATUS_SUCCESS && w == sizeof v ? v : fallback;
}
cublasStatus_t get_layout(const void* l, int id, void* buf, size_t size, size_t* w) {
  return cublasLtMatrixLayoutGetAttribute(static_cast<cublasLtMatrixLayout_t>(const_cast<void*>(l)),
                                          static_cast<cublasLtMatrixLayoutAttribute_t>(id), buf,
                                          size, w);
}
cublasStatus_t get_desc(const void* d, int id, void* buf, size_t size, size_t* w) {
  return cublasLtMatmulDescGetAttribute(static_cast<cublasLtMatmulDesc_t>(const_cast<void*>(d)),
                                        static_cast<cublasLtMatmulDescAttributes_t>(id), buf, size,
                                        w);
}
cublasStatus_t get_pref(const void* p, int id, void* buf, size_t size, size_t* w) {
  return cublasLtMatmulPreferenceGetAttribute(
      static_cast<cublasLtMatmulPreference_t>(const_cast<void*>(p)),
      static_cast<cublasLtMatmulPreferenceAttributes_t>(id), buf, size, w);
}

// Appends " <tag><id>=<hex bytes>" per attribute of `obj` read through `get`; false when the
// problem cannot be described.
template <size_t N>
bool add_attrs(std::string& fp, char tag, const Attr (&attrs)[N], GetAttr get, const void* obj) {
  for (const Attr& at : attrs) {
    char head[16];
    std::snprintf(head, sizeof head, " %c%d=", tag, at.id);
    fp += head;
    size_t size = 0;
    if (get(obj, at.id, nullptr, 0, &size) != CUBLAS_STATUS_SUCCESS) {
      fp += "absent";
      continue;
    }
    unsigned char buf[64];
    if (size == 0 || size > sizeof buf) return false;
    size_t written = 0;
    if (get(obj, at.id, buf, size, &written) != CUBLAS_STATUS_SUCCESS || written != size)
      return false;
    if (at.kind != Kind::Value) {
      void* p = nullptr;
      if (size != sizeof p) return false;
      std::memcpy(&p, buf, sizeof p);
      if (at.kind == Kind::MustBeNull && p != nullptr) return false;
      fp += p == nullptr ? std::string("null") : "align" + std::to_string(alignment_of(p));
      continue;
    }
    static const char kHex[] = "0123456789abcdef";
    for (size_t i = 0; i < size; ++i) {
      fp += kHex[buf[i] >> 4];
      fp += kHex[buf[i] & 15];
    }
  }
  return true;
}

// "m=512 n=64 k=784 epilogue 1" for the logs: cuBLASLt's (column-major) view of the problem.
std::string describe_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                             cublasLtMatrixLayout_t d) {
  const auto m = read_attr<uint64_t>(get_layout, d, CUBLASLT_MATRIX_LAYOUT_ROWS, 0);
  const auto n = read_attr<uint64_t>(get_layout, d, CUBLASLT_MATRIX_LAYOUT_COLS, 0);
  const auto trans_a = read_attr<int32_t>(get_desc, desc, CUBLASLT_MATMUL_DESC_TRANSA, 0);
  const auto k = read_attr<uint64_t>(
      get_layout, a,
      trans_a != CUBLAS_OP_N ? CUBLASLT_MATRIX_LAYOUT_ROWS : CUBLASLT_MATRIX_LAYOUT_COLS, 0);
  const auto batch = read_attr<int32_t>(get_layout, d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 1);
  const auto epi = read_attr<uint32_t>(get_desc, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, 0);
  char buf[160];
  std::snprintf(buf, sizeof buf, "m=%llu n=%llu k=%llu batch=%d epilogue=%u",
                static_cast<unsigned long long>(m), static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(k), batch, epi);
  return buf;
}

// ---- the environment ------------------------------------------------------------------------

// cuBLAS's own environment variables (emulation strategies and the like) may change what the
// heuristic picks; its logging ones do not.
// Sorted: the order of the environment is no part of it.
std::string cublas_environment() {
  std::vector<std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view v(*e);
    if (v.rfind("CUBLAS", 0) != 0) continue;
    if (v.rfind("CUBLASLT_LOG", 0) == 0 || v.rfind("CUBLAS_LOG", 0) == 0) continue;
    vars.emplace_back(v);
  }
  std::sort(vars.begin(), vars.end());
  std::string out;
  for (const std::string& v : vars) out += v + '\n';
  return out;
}

// The environment of `dev`, queried once per device; nullopt when a query fails (then nothing is
// stored, and the heuristic reports whatever is wrong), or while Ember's stream is being captured
// into a CUDA graph (the queries are not stream work, but nothing here risks a capture).
std::optional<GemmAlgoEnv> env_of(int dev) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<int, GemmAlgoEnv>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(dev); it != cache->end()) return it->second;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream(dev), &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone)
    return std::nullopt;
  GemmAlgoEnv env;
  env.cublaslt_version = cublasLtGetVersion();
  cudaDeviceProp prop{};
  int major = 0, minor = 0, sms = 0;
  const bool ok =
      cudaRuntimeGetVersion(&env.runtime_version) == cudaSuccess &&
      cudaDriverGetVersion(&env.driver_version) == cudaSuccess &&
      cudaGetDeviceProperties(&prop, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess;
  if (!ok) {
    (void)cudaGetLastError();  // not sticky, but do not leave it for an unrelated later check
    return std::nullopt;
  }
  env.device_name = prop.name;
  env.arch = major * 10 + minor;
  env.sm_count = sms;
  env.environment = cublas_environment();
  return cache->emplace(dev, std::move(env)).first->second;
}

// ---- validation of a stored answer ----------------------------------------------------------

// The one place a stored answer is checked against this process before use: every usable
// result must fit the preference's workspace and, when set_gemm_algo_check(true), pass
// cublasLtMatmulAlgoCheck for these descriptors. The check is off by default: its first call in
// a process costs about as much as the heuristic query it would save, so it would undo the
// store's purpose; and the key already pins cuBLASLt's version,
// the device and the whole problem, the disk cache checksums every entry, and the stored problem
// is compared on load; a launch cuBLASLt still refused would raise ember::Error, not compute.
bool passes_check(const StoredGemmAnswer& ans, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                  cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                  cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, std::string* why) {
  const auto max_ws =
      read_attr<uint64_t>(get_pref, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, 0);
  const bool check = g_check.load(std::memory_order_relaxed);
  for (size_t i = 0; i < ans.algos.size(); ++i) {
    const StoredGemmAlgo& s = ans.algos[i];
    if (s.state != CUBLAS_STATUS_SUCCESS) continue;  // never run: the callers skip it
    size_t need = s.workspace;
    if (check) {
      cublasLtMatmulAlgo_t algo;
      std::memcpy(algo.data, s.algo.data(), sizeof algo.data);
      cublasLtMatmulHeuristicResult_t r{};
      const cublasStatus_t st = cublasLtMatmulAlgoCheck(handle, desc, a, b, c, d, &algo, &r);
      if (st != CUBLAS_STATUS_SUCCESS) {
        *why = "algorithm " + std::to_string(i) + " fails cublasLtMatmulAlgoCheck (" +
               cublasLtGetStatusName(st) + ")";
        return false;
      }
      need = std::max<size_t>(need, r.workspaceSize);
    }
    if (need > max_ws) {
      *why = "algorithm " + std::to_string(i) + " needs " + std::to_string(need) +
             " bytes of workspace, more than the " + std::to_string(max_ws) + " allowed";
      return false;
    }
  }
  return true;
}

// Whether a decoded answer is one the heuristic could have given for this request.
bool plausible(const StoredGemmAnswer& ans, int requested, std::string* why) {
  if (ans.algos.size() > static_cast<size_t>(requested)) {
    *why =
        std::to_string(ans.algos.size()) + " results for a request of " + std::to_string(requested);
    return false;
  }
  const bool ok = (ans.status == CUBLAS_STATUS_SUCCESS && !ans.algos.empty()) ||
                  (ans.status == CUBLAS_STATUS_NOT_SUPPORTED && ans.algos.empty());
  if (!ok)
    *why = "status " + std::to_string(ans.status) + " with " + std::to_string(ans.algos.size()) +
           " results";
  return ok;
}

}  // namespace

// ---- gemm_algo_store.h ----------------------------------------------------------------------

void set_gemm_algo_store(nvrtc::BinaryStore* store) {
  g_store.store(store, std::memory_order_release);
}
nvrtc::BinaryStore* gemm_algo_store() { return g_store.load(std::memory_order_acquire); }
GemmAlgoLogSink set_gemm_algo_log(GemmAlgoLogSink sink) {
  return g_log.exchange(sink, std::memory_order_acq_rel);
}
void set_gemm_algo_check(bool on) { g_check.store(on, std::memory_order_relaxed); }

GemmAlgoStoreStats gemm_algo_store_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex());
  return stats();
}
void reset_gemm_algo_store_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex());
  stats() = GemmAlgoStoreStats{};
}

std::string gemm_algo_key(std::string_view fingerprint, const GemmAlgoEnv& env) {
  KeyHash h;
  h.add("ember ltalgo key v1");
  h.add(fingerprint);
  h.add(env.cublaslt_version);
  h.add(static_cast<uint64_t>(env.runtime_version));
  h.add(static_cast<uint64_t>(env.driver_version));
  h.add(env.device_name);
  h.add(static_cast<uint64_t>(env.arch));
  h.add(static_cast<uint64_t>(env.sm_count));
  h.add(env.environment);
  return "ltalgo-" + h.hex();
}

std::string gemm_tune_key(std::string_view fingerprint, const GemmAlgoEnv& env) {
  // The algorithms' key, hashed once more under another name: the winner belongs to exactly
  // the candidates stored under the algorithms' key.
  KeyHash h;
  h.add("ember lttune key v1");
  h.add(gemm_algo_key(fingerprint, env));
  return "lttune-" + h.hex();
}

namespace {
constexpr char kTuneMagic[8] = {'E', 'M', 'B', 'L', 'T', 'T', 'U', 'N'};
constexpr uint32_t kTuneFormatVersion = 1;
}  // namespace

std::string encode_gemm_tune(const StoredGemmTune& tune) {
  std::string out(kTuneMagic, sizeof kTuneMagic);
  put(out, kTuneFormatVersion);
  put(out, static_cast<uint32_t>(tune.fingerprint.size()));
  out += tune.fingerprint;
  put(out, tune.index);
  put(out, static_cast<uint32_t>(tune.times_us.size()));
  for (float t : tune.times_us) put(out, t);
  return out;
}

std::optional<StoredGemmTune> decode_gemm_tune(std::string_view bytes, std::string* why) {
  auto fail = [why](std::string msg) -> std::optional<StoredGemmTune> {
    if (why) *why = std::move(msg);
    return std::nullopt;
  };
  constexpr size_t kHead = sizeof kTuneMagic + 2 * sizeof(uint32_t);
  if (bytes.size() < kHead) return fail("is truncated");
  if (std::memcmp(bytes.data(), kTuneMagic, sizeof kTuneMagic) != 0)
    return fail("has no EMBLTTUN magic");
  size_t at = sizeof kTuneMagic;
  const auto version = take<uint32_t>(bytes, at);
  if (version != kTuneFormatVersion)
    return fail("has format version " + std::to_string(version) + ", expected " +
                std::to_string(kTuneFormatVersion));
  const auto fp_bytes = take<uint32_t>(bytes, at);
  if (bytes.size() - at < size_t{fp_bytes} + sizeof(int32_t) + sizeof(uint32_t))
    return fail("is truncated");
  StoredGemmTune t;
  t.fingerprint.assign(bytes.substr(at, fp_bytes));
  at += fp_bytes;
  t.index = take<int32_t>(bytes, at);
  const auto count = take<uint32_t>(bytes, at);
  if (count > kMaxStoredGemmAlgos) return fail("holds " + std::to_string(count) + " times");
  if (bytes.size() - at != size_t{count} * sizeof(float))
    return fail("has " + std::to_string(bytes.size() - at) + " bytes of times for " +
                std::to_string(count) + " candidates");
  for (uint32_t i = 0; i < count; ++i) t.times_us.push_back(take<float>(bytes, at));
  if (t.index < 0 || static_cast<uint32_t>(t.index) >= count || !std::isfinite(t.times_us[t.index]))
    return fail("names winner " + std::to_string(t.index) + " of " + std::to_string(count) +
                " candidates without a time");
  for (float x : t.times_us)
    if (x < t.times_us[t.index]) return fail("names a winner slower than another candidate");
  return t;
}

std::string encode_gemm_answer(const StoredGemmAnswer& answer) {
  std::string out;
  out.reserve(kHeaderBytes + answer.fingerprint.size() + answer.algos.size() * kRecordBytes);
  out.append(kMagic, sizeof kMagic);
  put(out, kFormatVersion);
  put(out, static_cast<uint32_t>(kAlgoBytes));
  put(out, answer.status);
  put(out, static_cast<uint32_t>(answer.fingerprint.size()));
  put(out, static_cast<uint32_t>(answer.algos.size()));
  out += answer.fingerprint;
  for (const StoredGemmAlgo& a : answer.algos) {
    for (uint64_t w : a.algo) put(out, w);
    put(out, a.workspace);
    put(out, a.state);
    put(out, a.waves);
  }
  return out;
}

std::optional<StoredGemmAnswer> decode_gemm_answer(std::string_view bytes, std::string* why) {
  auto fail = [why](std::string msg) -> std::optional<StoredGemmAnswer> {
    if (why) *why = std::move(msg);
    return std::nullopt;
  };
  if (bytes.size() < kHeaderBytes)
    return fail("is truncated (" + std::to_string(bytes.size()) + " bytes, the header alone is " +
                std::to_string(kHeaderBytes) + ")");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return fail("has no EMBLTALG magic");
  size_t at = sizeof kMagic;
  const auto version = take<uint32_t>(bytes, at);
  const auto algo_bytes = take<uint32_t>(bytes, at);
  StoredGemmAnswer ans;
  ans.status = take<int32_t>(bytes, at);
  const auto fp_bytes = take<uint32_t>(bytes, at);
  const auto count = take<uint32_t>(bytes, at);
  if (version != kFormatVersion)
    return fail("has format version " + std::to_string(version) + ", expected " +
                std::to_string(kFormatVersion));
  if (algo_bytes != kAlgoBytes)
    return fail("holds " + std::to_string(algo_bytes) + "-byte algorithms, expected " +
                std::to_string(kAlgoBytes));
  if (fp_bytes > kMaxFingerprintBytes || count > kMaxStoredGemmAlgos)
    return fail("has an implausible header (" + std::to_string(fp_bytes) + "-byte fingerprint, " +
                std::to_string(count) + " results)");
  const size_t want = kHeaderBytes + fp_bytes + size_t{count} * kRecordBytes;
  if (bytes.size() != want)
    return fail(std::string(bytes.size() < want ? "is truncated" : "has trailing bytes") + " (" +
                std::to_string(bytes.size()) + " bytes, expected " + std::to_string(want) + ")");
  ans.fingerprint.assign(bytes.data() + at, fp_bytes);
  at += fp_bytes;
  ans.algos.resize(count);
  for (StoredGemmAlgo& a : ans.algos) {
    for (uint64_t& w : a.algo) w = take<uint64_t>(bytes, at);
    a.workspace = take<uint64_t>(bytes, at);
    a.state = take<int32_t>(bytes, at);
    a.waves = take<float>(bytes, at);
  }
  return ans;
}

std::string gemm_algo_fingerprint_for_testing(const GemmAlgoTestProblem& p) {
  const cudaDataType_t data = p.f64 ? CUDA_R_64F : CUDA_R_32F;
  const cublasComputeType_t compute = p.f64    ? CUBLAS_COMPUTE_64F
                                      : p.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                               : CUBLAS_COMPUTE_32F;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  auto layout = [&](int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, data, static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
    if (p.batch > 1) {
      const int32_t count = static_cast<int32_t>(p.batch);
      EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                          &count, sizeof count));
      EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
    return l;
  };
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, compute, p.f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const auto epi = static_cast<cublasLtEpilogue_t>(p.epilogue);
  EMBER_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  EMBER_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  EMBER_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (p.bias)
    EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &p.bias, sizeof p.bias));
  a = layout(p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda, p.stride_a);
  b = layout(p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb, p.stride_b);
  d = layout(p.m, p.n, p.ldd, p.stride_d);
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p.workspace, sizeof p.workspace));
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p.align_a, sizeof p.align_a));
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p.align_b, sizeof p.align_b));
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p.align_d, sizeof p.align_d));
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p.align_d, sizeof p.align_d));
  std::string fp = lt_fingerprint(desc, a, b, d, d, pref, p.requested);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(d);
  cublasLtMatmulDescDestroy(desc);
  return fp;
}

void drop_gemm_plans_for_testing() { drop_gemm_epilogue_plans_for_testing(); }

// ---- gemm_algo_heuristic.h ------------------------------------------------------------------

std::string lt_fingerprint(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                           cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                           cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                           int requested) {
  std::string fp = "v1 requested=" + std::to_string(requested);
  const bool ok = add_attrs(fp, 'M', kDescAttrs, get_desc, desc) &&
                  add_attrs(fp, 'A', kLayoutAttrs, get_layout, a) &&
                  add_attrs(fp, 'B', kLayoutAttrs, get_layout, b) &&
                  add_attrs(fp, 'C', kLayoutAttrs, get_layout, c) &&
                  add_attrs(fp, 'D', kLayoutAttrs, get_layout, d) &&
                  add_attrs(fp, 'P', kPrefAttrs, get_pref, pref);
  return ok ? fp : std::string();
}

GemmTuneSlot lt_tune_slot(int device, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                          cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                          cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                          int requested) {
  GemmTuneSlot slot;
  if (!gemm_algo_store() || requested <= 0 || static_cast<size_t>(requested) > kMaxStoredGemmAlgos)
    return slot;
  std::string fp = lt_fingerprint(desc, a, b, c, d, pref, requested);
  const std::optional<GemmAlgoEnv> env = fp.empty() ? std::nullopt : env_of(device);
  if (!env) return slot;
  slot.key = gemm_tune_key(fp, *env);
  slot.fingerprint = std::move(fp);
  return slot;
}

int32_t lt_load_tune(const GemmTuneSlot& slot, int candidates, std::vector<float>* times) {
  nvrtc::BinaryStore* store = gemm_algo_store();
  if (slot.key.empty() || !store) return -1;
  std::optional<std::string> bytes;
  try {
    bytes = store->load(slot.key);
  } catch (const std::exception& e) {
    say("autotune winner " + slot.key + ": the store failed to load it: " + e.what());
  }
  std::string why;
  std::optional<StoredGemmTune> t;
  if (bytes) {
    t = decode_gemm_tune(*bytes, &why);
    if (t && t->fingerprint != slot.fingerprint) {
      why = "is for another problem (a key collision)";
      t.reset();
    }
    if (t && t->times_us.size() != static_cast<size_t>(candidates)) {
      why = "timed " + std::to_string(t->times_us.size()) + " candidates, this problem has " +
            std::to_string(candidates);
      t.reset();
    }
    if (!t) say("autotune winner " + slot.key + " " + why + "; ignoring it (timing again)");
  }
  if (!t) {
    update_stats([](GemmAlgoStoreStats& s) { ++s.tune_misses; });
    return -1;
  }
  update_stats([](GemmAlgoStoreStats& s) { ++s.tune_hits; });
  say("autotune winner hit " + slot.key + ": candidate " + std::to_string(t->index) + " of " +
      std::to_string(candidates));
  *times = std::move(t->times_us);
  return t->index;
}

void lt_keep_tune(const GemmTuneSlot& slot, int32_t index, const std::vector<float>& times) {
  nvrtc::BinaryStore* store = gemm_algo_store();
  if (slot.key.empty() || !store) return;
  StoredGemmTune t;
  t.fingerprint = slot.fingerprint;
  t.index = index;
  t.times_us = times;
  try {
    store->store(slot.key, encode_gemm_tune(t));
    update_stats([](GemmAlgoStoreStats& s) { ++s.tune_stores; });
    say("autotune winner stored " + slot.key + ": candidate " + std::to_string(index) + " of " +
        std::to_string(times.size()));
  } catch (const std::exception& e) {
    say("autotune winner " + slot.key + ": the store failed to keep it: " + e.what());
  }
}

cublasStatus_t lt_heuristic(int device, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                            cublasLtMatmulPreference_t pref, int requested,
                            cublasLtMatmulHeuristicResult_t* results, int* found) {
  auto ask = [&] {
    return cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, requested, results,
                                          found);
  };
  nvrtc::BinaryStore* store = gemm_algo_store();
  if (!store || requested <= 0 || static_cast<size_t>(requested) > kMaxStoredGemmAlgos)
    return ask();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string fp = lt_fingerprint(desc, a, b, c, d, pref, requested);
  const std::optional<GemmAlgoEnv> env = fp.empty() ? std::nullopt : env_of(device);
  if (!env) {
    update_stats([](GemmAlgoStoreStats& s) { ++s.uncacheable; });
    return ask();
  }
  const std::string key = gemm_algo_key(fp, *env);
  const std::string problem = describe_problem(desc, a, d);
  update_stats([](GemmAlgoStoreStats& s) { ++s.lookups; });

  std::optional<std::string> bytes;
  try {
    bytes = store->load(key);
  } catch (const std::exception& e) {
    say(key + " (" + problem + "): the store failed to load it: " + e.what());
  }
  if (bytes) {
    std::string why;
    std::optional<StoredGemmAnswer> ans = decode_gemm_answer(*bytes, &why);
    if (ans && ans->fingerprint != fp) {
      why = "is for another problem (a key collision)";
      ans.reset();
    }
    if (ans && !plausible(*ans, requested, &why)) ans.reset();
    if (!ans) {
      update_stats([](GemmAlgoStoreStats& s) { ++s.bad_entries; });
      say(key + " (" + problem + ") " + why + "; ignoring it (asking the heuristic, rewriting it)");
    } else if (!passes_check(*ans, handle, desc, a, b, c, d, pref, &why)) {
      update_stats([](GemmAlgoStoreStats& s) { ++s.check_failures; });
      say(key + " (" + problem + "): stored " + why + "; asking the heuristic, rewriting it");
    } else {
      for (size_t i = 0; i < ans->algos.size(); ++i) {
        const StoredGemmAlgo& s = ans->algos[i];
        results[i] = cublasLtMatmulHeuristicResult_t{};
        std::memcpy(results[i].algo.data, s.algo.data(), sizeof results[i].algo.data);
        results[i].workspaceSize = s.workspace;
        results[i].state = static_cast<cublasStatus_t>(s.state);
        results[i].wavesCount = s.waves;
      }
      *found = static_cast<int>(ans->algos.size());
      const double us = micros_since(t0);
      update_stats([us](GemmAlgoStoreStats& s) {
        ++s.hits;
        s.hit_us += us;
      });
      say("hit " + key + " (" + problem + "): " + std::to_string(ans->algos.size()) +
          " algorithms from the store in " + std::to_string(static_cast<int64_t>(us)) + " us");
      return static_cast<cublasStatus_t>(ans->status);
    }
  }

  const auto t1 = std::chrono::steady_clock::now();
  *found = 0;
  const cublasStatus_t st = ask();
  const double heuristic_us = micros_since(t1);
  update_stats([heuristic_us](GemmAlgoStoreStats& s) {
    ++s.misses;
    s.heuristic_us += heuristic_us;
  });
  const int n = st == CUBLAS_STATUS_SUCCESS ? *found : 0;
  const bool storable = (st == CUBLAS_STATUS_SUCCESS && n > 0 && n <= requested) ||
                        (st == CUBLAS_STATUS_NOT_SUPPORTED && n == 0);
  std::string note = "not stored (status " + std::string(cublasLtGetStatusName(st)) + ")";
  if (storable) {
    StoredGemmAnswer ans;
    ans.status = st;
    ans.fingerprint = fp;
    ans.algos.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      StoredGemmAlgo& s = ans.algos[static_cast<size_t>(i)];
      std::memcpy(s.algo.data(), results[i].algo.data, sizeof results[i].algo.data);
      s.workspace = results[i].workspaceSize;
      s.state = results[i].state;
      s.waves = results[i].wavesCount;
    }
    try {
      store->store(key, encode_gemm_answer(ans));
      update_stats([](GemmAlgoStoreStats& s) { ++s.stores; });
      note = "stored " + std::to_string(n) + " algorithms";
    } catch (const std::exception& e) {
      note = std::string("the store failed to keep it: ") + e.what();
    }
  }
  say("miss " + key + " (" + problem + "): heuristic in " +
      std::to_string(static_cast<int64_t>(heuristic_us)) + " us, " + note);
  return st;
}

}  // namespace ember::kernels::cuda
