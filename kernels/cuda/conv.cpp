// conv2d and its backward rows on cuDNN (the legacy convolution API of cuDNN 9: descriptors,
// heuristics, one call per direction).
//
// A plan per problem (direction, shapes, dtype, stride/padding/dilation/groups, TF32 setting,
// device) holds the descriptors and the algorithm, built once and kept for the process, so the
// eager kernel and the JIT's replays of a problem run the same algorithm and agree bit for bit.
// The algorithm: the fastest that is deterministic (no atomics: two runs give the same bits) and
// fits the workspace. cudnnFind*AlgorithmEx lists the candidates (cudnn.benchmark in PyTorch's
// terms), then each usable one is timed again by us, warm, since Find's single cold runs can
// order them wrongly (bench/NOTES.md). A problem first met while a CUDA graph is being captured
// takes the heuristic's order instead (timing synchronizes). The workspace: cuBLASLt's
// (kernels/cuda/runtime.h) where the algorithm fits in it, else cuDNN's own, grown to the largest
// plan's need: every kernel queues on the one stream of its device, so a convolution and a GEMM
// never use a workspace at the same time. A buffer outgrown is kept, not freed, since a captured
// CUDA graph may still name its address. float32 runs without TF32 unless allow_tf32()
// (core/ops.h); float16/bfloat16 accumulate in float32 on tensor cores; float64 in float64.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/error.h"
#include "core/log.h"
#include "core/ops.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/cuda/runtime.h"

#if EMBER_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace ember {

namespace cuda {
#if EMBER_HAVE_CUDNN
bool has_cudnn() { return true; }
#else
bool has_cudnn() { return false; }
#endif
}  // namespace cuda

namespace kernels::cuda {

#if EMBER_HAVE_CUDNN
namespace {

[[noreturn]] void throw_cudnn(cudnnStatus_t st, const char* call, const char* what) {
  EMBER_FAIL(what, ": cuDNN call ", call, " failed: ", cudnnGetErrorString(st));
}
#define EMBER_CUDNN_CHECK(call, what)                                           \
  do {                                                                          \
    const cudnnStatus_t ember_st_ = (call);                                     \
    if (ember_st_ != CUDNN_STATUS_SUCCESS) throw_cudnn(ember_st_, #call, what); \
  } while (0)

uint64_t hash_mix(uint64_t h, int64_t v) {
  return h ^ (static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

// The most workspace a timing run offers cuDNN's algorithms (FFT and Winograd ones can ask for
// hundreds of MiB); what the chosen algorithm needs is kept, the rest given back.
constexpr size_t kTrialWorkspaceBytes = size_t{1} << 30;

enum class Direction : uint8_t { Forward, BackwardData, BackwardFilter };

struct ConvKey {
  int device;
  Direction dir;
  DType dtype;
  bool tf32;
  bool deterministic;  // deterministic_algorithms() (core/ops.h)
  int64_t x[4], w[4];
  int64_t stride[2], pad[2], dil[2], groups;
  bool operator==(const ConvKey& o) const {
    return device == o.device && dir == o.dir && dtype == o.dtype && tf32 == o.tf32 &&
           deterministic == o.deterministic && std::equal(x, x + 4, o.x) &&
           std::equal(w, w + 4, o.w) && std::equal(stride, stride + 2, o.stride) &&
           std::equal(pad, pad + 2, o.pad) && std::equal(dil, dil + 2, o.dil) && groups == o.groups;
  }
};
struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    uint64_t h =
        hash_mix(0, static_cast<uint64_t>(k.device) << 16 | static_cast<uint64_t>(k.dir) << 8 |
                        static_cast<uint64_t>(k.dtype) | (k.tf32 ? 1u << 24 : 0u));
    for (int i = 0; i < 4; ++i) h = hash_mix(hash_mix(h, k.x[i]), k.w[i]);
    for (int i = 0; i < 2; ++i)
      h = hash_mix(hash_mix(hash_mix(h, k.stride[i]), k.pad[i]), k.dil[i]);
    return static_cast<size_t>(hash_mix(h, k.groups));
  }
};

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t of the plan's direction
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

struct Handles {
  std::mutex mutex;
  std::unordered_map<int, cudnnHandle_t> handles;  // per device, bound to stream(device)
  std::unordered_map<ConvKey, Plan, ConvKeyHash> plans;
  std::unordered_map<int, Workspace> own;  // per device: cuDNN's workspace beyond cuBLASLt's
  std::vector<void*> outgrown;             // never freed: captured graphs may name them
};
Handles& state() {
  static Handles* h = new Handles;  // never destroyed: kernels may run during static teardown
  return *h;
}

cudnnHandle_t handle(int device) {  // state().mutex held
  auto& hs = state().handles;
  auto it = hs.find(device);
  if (it != hs.end()) return it->second;
  cudnnHandle_t h = nullptr;
  EMBER_CUDNN_CHECK(cudnnCreate(&h), "conv2d");
  EMBER_CUDNN_CHECK(cudnnSetStream(h, stream(device)), "conv2d");
  hs.emplace(device, h);
  return h;
}

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case kFloat64:
      return CUDNN_DATA_DOUBLE;
    case kFloat16:
      return CUDNN_DATA_HALF;
    case kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

const char* direction_name(Direction d) {
  return d == Direction::Forward        ? "forward"
         : d == Direction::BackwardData ? "backward-data"
                                        : "backward-filter";
}

// One result of cuDNN's Find or heuristic, whatever the direction.
struct Candidate {
  int algo = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  size_t memory = 0;
  bool deterministic = false;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  float time_ms = -1;  // cuDNN's (Find; the heuristic reports none); ours are kept apart
};

template <class Perf>
std::vector<Candidate> candidates(const Perf* perf, int n) {
  std::vector<Candidate> c(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    c[i] = {static_cast<int>(perf[i].algo),
            perf[i].status,
            perf[i].memory,
            perf[i].determinism == CUDNN_DETERMINISTIC,
            perf[i].mathType,
            perf[i].time};
  return c;
}

// One call of the plan's direction with `algo` (a, b, out as in conv()).
cudnnStatus_t run_algo(cudnnHandle_t hd, const Plan& p, Direction dir, int algo, void* work,
                       size_t work_bytes, const void* a, const void* b, void* out, DType dtype) {
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;  // alpha and beta are double for float64 data only
  const void* one = dtype == kFloat64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = dtype == kFloat64 ? static_cast<const void*>(&zero_d) : &zero_f;
  if (dir == Direction::Forward)
    return cudnnConvolutionForward(hd, one, p.x, a, p.w, b, p.conv,
                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), work, work_bytes,
                                   zero, p.y, out);
  if (dir == Direction::BackwardData)
    return cudnnConvolutionBackwardData(hd, one, p.w, b, p.y, a, p.conv,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), work,
                                        work_bytes, zero, p.x, out);
  return cudnnConvolutionBackwardFilter(hd, one, p.x, b, p.y, a, p.conv,
                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), work,
                                        work_bytes, zero, p.w, out);
}

// EMBER_LOGS=autotune: every candidate of a new plan, with cuDNN's time and ours. (A stream,
// not string concatenation: GCC 12 reports a false -Wrestrict for the latter.)
void log_candidates(const ConvKey& k, bool timed, const std::vector<Candidate>& cs,
                    const std::vector<float>& ours) {
  if (!log_enabled(Log::autotune)) return;
  std::ostringstream os;
  auto dims = [&](const int64_t* v) {
    os << '[' << v[0] << ',' << v[1] << ',' << v[2] << ',' << v[3] << ']';
  };
  os << "cuDNN " << direction_name(k.dir) << ' ' << dtype_name(k.dtype) << (k.tf32 ? " tf32" : "")
     << " x";
  dims(k.x);
  os << " w";
  dims(k.w);
  os << " stride " << k.stride[0] << " pad " << k.pad[0] << " groups " << k.groups
     << (timed ? ", timed:" : ", heuristic order:");
  for (size_t i = 0; i < cs.size(); ++i) {
    const Candidate& c = cs[i];
    os << "\n  algo " << c.algo << " status " << static_cast<int>(c.status) << " cudnn "
       << c.time_ms << " ms, ours ";
    if (i < ours.size() && ours[i] >= 0)
      os << ours[i] << " ms";
    else
      os << '-';
    os << ", " << (c.memory >> 10) << " KiB, "
       << (c.deterministic ? "deterministic" : "non-deterministic") << ", math "
       << static_cast<int>(c.math);
  }
  log(Log::autotune, os.str());
}

// Whether a result may be used: it ran, fits `limit`, and for float32 without TF32 is not a
// tensor-op one. The plan then keeps FMA math there, as PyTorch does (cuDNN reports algorithms
// such as Winograd with the default math type even when the descriptor asked for FMA); other
// dtypes run in the math type the result names (cuDNN refuses an algorithm run in another).
bool usable(const Candidate& c, size_t limit, bool fma_only) {
  if (c.status != CUDNN_STATUS_SUCCESS || c.memory > limit) return false;
  return !fma_only ||
         (c.math != CUDNN_TENSOR_OP_MATH && c.math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}
cudnnMathType_t plan_math(const Candidate& c, bool fma_only) {
  return fma_only ? CUDNN_FMA_MATH : c.math;
}

// Our own time of each usable candidate: one warm-up call, then the median of kTimedRuns. cuDNN's
// Find times each algorithm once, and a first launch loads the kernel's module, so its order can
// be several times off in a step (bench/NOTES.md).
std::vector<float> time_candidates(cudnnHandle_t hd, Plan& p, const ConvKey& k,
                                   const std::vector<Candidate>& cs, size_t limit, bool fma_only,
                                   void* work, const void* a, const void* b, void* out,
                                   const char* what) {
  constexpr int kTimedRuns = 5;
  std::vector<float> ours(cs.size(), -1);
  cudaStream_t s = stream(k.device);
  cudaEvent_t ev[kTimedRuns + 1];
  for (auto& e : ev) EMBER_CUDA_CHECK(cudaEventCreate(&e));
  for (size_t i = 0; i < cs.size(); ++i) {
    const Candidate& c = cs[i];
    if (!usable(c, limit, fma_only)) continue;
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, plan_math(c, fma_only)), what);
    if (run_algo(hd, p, k.dir, c.algo, work, c.memory, a, b, out, k.dtype) != CUDNN_STATUS_SUCCESS)
      continue;  // refused in this math type: not a candidate
    EMBER_CUDA_CHECK(cudaEventRecord(ev[0], s));
    for (int r = 0; r < kTimedRuns; ++r) {
      EMBER_CUDNN_CHECK(run_algo(hd, p, k.dir, c.algo, work, c.memory, a, b, out, k.dtype), what);
      EMBER_CUDA_CHECK(cudaEventRecord(ev[r + 1], s));
    }
    EMBER_CUDA_CHECK(cudaEventSynchronize(ev[kTimedRuns]));
    float t[kTimedRuns];
    for (int r = 0; r < kTimedRuns; ++r)
      EMBER_CUDA_CHECK(cudaEventElapsedTime(&t[r], ev[r], ev[r + 1]));
    std::nth_element(t, t + kTimedRuns / 2, t + kTimedRuns);
    ours[i] = t[kTimedRuns / 2];
  }
  for (auto& e : ev) EMBER_CUDA_CHECK(cudaEventDestroy(e));
  return ours;
}

// The candidate to run: deterministic ones first (two runs give the same bits) unless
// deterministic_algorithms() is off, anything that runs as a last resort; the fastest by our times
// where there are any, else the first in the order given. -1 when none is usable.
int choose(const std::vector<Candidate>& cs, const std::vector<float>& ours, size_t limit,
           bool fma_only, bool deterministic) {
  for (int pass = deterministic ? 0 : 1; pass < 2; ++pass) {
    int best = -1;
    for (size_t i = 0; i < cs.size(); ++i) {
      if (!usable(cs[i], limit, fma_only) || (pass == 0 && !cs[i].deterministic)) continue;
      const bool timed = i < ours.size() && ours[i] >= 0;
      if (!ours.empty() && !timed) continue;  // refused when we ran it
      if (best < 0) {
        best = static_cast<int>(i);
        if (ours.empty()) break;
      } else if (ours[i] < ours[best]) {
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) return best;
  }
  return -1;
}

// a, b: the call's inputs; out: its output (see conv()).
Plan make_plan(const ConvKey& k, const char* what, const void* a, const void* b, void* out) {
  Plan p;
  const cudnnDataType_t dt = data_type(k.dtype);
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x), what);
  EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y), what);
  EMBER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w), what);
  EMBER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.conv), what);
  EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, dt, i(k.x[0]), i(k.x[1]),
                                               i(k.x[2]), i(k.x[3])),
                    what);
  EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, dt, CUDNN_TENSOR_NCHW, i(k.w[0]), i(k.w[1]),
                                               i(k.w[2]), i(k.w[3])),
                    what);
  const cudnnDataType_t compute = k.dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.conv, i(k.pad[0]), i(k.pad[1]),
                                                    i(k.stride[0]), i(k.stride[1]), i(k.dil[0]),
                                                    i(k.dil[1]), CUDNN_CROSS_CORRELATION, compute),
                    what);
  EMBER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p.conv, i(k.groups)), what);
  const cudnnMathType_t math = k.dtype == kFloat16 || k.dtype == kBFloat16 ? CUDNN_TENSOR_OP_MATH
                               : k.dtype == kFloat32 && k.tf32             ? CUDNN_DEFAULT_MATH
                                                                           : CUDNN_FMA_MATH;
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, math), what);
  int n = 0, c = 0, h = 0, w = 0;
  EMBER_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &c, &h, &w), what);
  EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, dt, n, c, h, w), what);

  cudnnHandle_t hd = handle(k.device);
  DeviceGuard guard(k.device);
  const Workspace shared = cublas_workspace(k.device);
  Workspace& own = state().own[k.device];
  const size_t have = std::max(shared.size, own.size);
  size_t limit = have;
  void* ws = shared.size >= own.size ? shared.ptr : own.ptr;
  // Timed on the call's own tensors (the output is rewritten by the call itself afterwards),
  // unless a CUDA graph is being captured: timing synchronizes, so that plan takes the
  // heuristic's order within the workspace there is. Timing runs in a trial workspace of up to
  // kTrialWorkspaceBytes (a quarter of the free memory at most), so that algorithms needing more
  // than the current workspace are measured too.
  const bool timed = !stream_capturing(k.device);
  const bool fma_only = k.dtype == kFloat32 && !k.tf32;
  void* trial = nullptr;
  if (timed) {
    size_t free_bytes = 0, total_bytes = 0;
    EMBER_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t want = std::min(kTrialWorkspaceBytes, free_bytes / 4);
    if (want > have) {
      if (cudaMalloc(&trial, want) == cudaSuccess) {
        ws = trial;
        limit = want;
      } else {
        (void)cudaGetLastError();  // out of memory: time within the workspace there is
        trial = nullptr;
      }
    }
  }
  constexpr int kAsk = 8;
  int got = 0;
  std::vector<Candidate> cs;
  if (k.dir == Direction::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kAsk];
    EMBER_CUDNN_CHECK(
        timed ? cudnnFindConvolutionForwardAlgorithmEx(hd, p.x, a, p.w, b, p.conv, p.y, out, kAsk,
                                                       &got, perf, ws, limit)
              : cudnnGetConvolutionForwardAlgorithm_v7(hd, p.x, p.w, p.conv, p.y, kAsk, &got, perf),
        what);
    cs = candidates(perf, got);
  } else if (k.dir == Direction::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kAsk];
    EMBER_CUDNN_CHECK(timed ? cudnnFindConvolutionBackwardDataAlgorithmEx(
                                  hd, p.w, b, p.y, a, p.conv, p.x, out, kAsk, &got, perf, ws, limit)
                            : cudnnGetConvolutionBackwardDataAlgorithm_v7(hd, p.w, p.y, p.conv, p.x,
                                                                          kAsk, &got, perf),
                      what);
    cs = candidates(perf, got);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kAsk];
    EMBER_CUDNN_CHECK(timed ? cudnnFindConvolutionBackwardFilterAlgorithmEx(
                                  hd, p.x, b, p.y, a, p.conv, p.w, out, kAsk, &got, perf, ws, limit)
                            : cudnnGetConvolutionBackwardFilterAlgorithm_v7(hd, p.x, p.y, p.conv,
                                                                            p.w, kAsk, &got, perf),
                      what);
    cs = candidates(perf, got);
  }
  const std::vector<float> ours =
      timed ? time_candidates(hd, p, k, cs, limit, fma_only, ws, a, b, out, what)
            : std::vector<float>{};
  if (trial) EMBER_CUDA_CHECK(cudaFree(trial));
  log_candidates(k, timed, cs, ours);
  int best = choose(cs, ours, limit, fma_only, k.deterministic);
  if (best >= 0 && cs[best].memory > have) {  // cuDNN's own workspace grows to the choice's need
    constexpr size_t kMiB = size_t{1} << 20;
    const size_t size = (cs[best].memory + kMiB - 1) / kMiB * kMiB;
    void* grown = nullptr;
    if (cudaMalloc(&grown, size) == cudaSuccess) {
      if (own.ptr) state().outgrown.push_back(own.ptr);
      own = Workspace{grown, size};
    } else {  // out of memory: the best within the workspace there is
      (void)cudaGetLastError();
      limit = have;
      best = choose(cs, ours, limit, fma_only, k.deterministic);
    }
  }
  if (best >= 0) {
    p.algo = cs[best].algo;
    p.workspace = cs[best].memory;
    p.math = plan_math(cs[best], fma_only);
  } else {
    p.algo = -1;
  }
  EMBER_CHECK(p.algo >= 0, what, ": cuDNN has no algorithm for input [", k.x[0], ", ", k.x[1], ", ",
              k.x[2], ", ", k.x[3], "] and weight [", k.w[0], ", ", k.w[1], ", ", k.w[2], ", ",
              k.w[3], "] ", dtype_name(k.dtype), " within ", limit >> 20, " MiB of workspace");
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.math), what);
  if (log_enabled(Log::autotune)) {
    std::ostringstream os;
    os << "cuDNN " << direction_name(k.dir) << ": algo " << p.algo << " math "
       << static_cast<int>(p.math) << ", workspace " << (p.workspace >> 10) << " KiB";
    log(Log::autotune, os.str());
  }
  return p;
}

}  // namespace

void conv(const KernelCall& call) {
  const char* what = op_name(call.op).data();
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.out;
  EMBER_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(), what,
              ": the cuDNN kernel takes contiguous tensors");
  const Direction dir = call.op == OpId::conv2d                  ? Direction::Forward
                        : call.op == OpId::conv2d_backward_input ? Direction::BackwardData
                                                                 : Direction::BackwardFilter;
  const Shape& xs = dir == Direction::Forward        ? a.sizes()
                    : dir == Direction::BackwardData ? out.sizes()
                                                     : b.sizes();
  const Shape& ws = dir == Direction::BackwardFilter ? out.sizes() : b.sizes();
  for (int d = 0; d < 4; ++d)
    EMBER_CHECK(xs[d] <= INT32_MAX && ws[d] <= INT32_MAX, what, ": sizes beyond cuDNN's int");
  if (out.numel() == 0) return;
  if (a.numel() == 0 || b.numel() == 0) {  // an empty sum (no samples or channels): zeros
    EMBER_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), stream(out.device().index)));
    return;
  }
  const Attrs& at = call.attrs;
  ConvKey k{};
  k.device = out.device().index;
  k.dir = dir;
  k.dtype = a.dtype();
  k.tf32 = a.dtype() == kFloat32 && allow_tf32();
  k.deterministic = deterministic_algorithms();
  for (int d = 0; d < 4; ++d) {
    k.x[d] = xs[d];
    k.w[d] = ws[d];
  }
  for (int d = 0; d < 2; ++d) {
    k.stride[d] = at.conv_stride[d];
    k.pad[d] = at.conv_padding[d];
    k.dil[d] = at.conv_dilation[d];
  }
  k.groups = at.groups;
  cudnnHandle_t hd;
  Plan p;
  void* work = nullptr;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    hd = handle(k.device);
    auto it = state().plans.find(k);
    if (it == state().plans.end())
      it = state()
               .plans.emplace(k, make_plan(k, what, a.raw_data(), b.raw_data(), out.raw_data()))
               .first;
    p = it->second;
    const Workspace shared = cublas_workspace(k.device);
    work = p.workspace <= shared.size ? shared.ptr : state().own[k.device].ptr;
  }
  EMBER_CUDNN_CHECK(run_algo(hd, p, dir, p.algo, work, p.workspace, a.raw_data(), b.raw_data(),
                             out.raw_data(), k.dtype),
                    what);
}

#else  // built without cuDNN: nn's convolutions take another path (see nn/conv.cpp)

void conv(const KernelCall& call) {
  EMBER_FAIL(op_name(call.op), ": Ember was built without cuDNN (CMake did not find it)");
}

#endif

}  // namespace kernels::cuda
}  // namespace ember
