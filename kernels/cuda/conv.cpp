// conv2d and its backward rows on cuDNN (the legacy convolution API of cuDNN 9: descriptors,
// heuristics, one call per direction).
//
// A plan per problem (direction, shapes, dtype, stride/padding/dilation/groups, TF32 setting,
// device) holds the descriptors and the algorithm, built once and kept for the process, so the
// eager kernel and the JIT's replays of a problem run the same algorithm and agree bit for bit.
// The algorithm: the fastest that is deterministic (no atomics: two runs give the same bits) and
// fits the workspace, timed once per problem by cudnnFind*AlgorithmEx (cudnn.benchmark in
// PyTorch's terms): the heuristic's first deterministic choice can be several times slower than
// the fastest (bench/NOTES.md). A problem first met while a CUDA graph is being captured takes
// the heuristic's order instead (timing synchronizes). The workspace
// is cuBLASLt's (kernels/cuda/runtime.h): every kernel queues on the one stream of its device,
// so a convolution and a GEMM never use it at the same time, and a captured CUDA graph sees a
// fixed address. float32 runs without TF32 unless allow_tf32() (core/ops.h); float16/bfloat16
// accumulate in float32 on tensor cores; float64 in float64.
#include <cuda_runtime.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/error.h"
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
#define EMBER_CUDNN_CHECK(call, what)                             \
  do {                                                            \
    const cudnnStatus_t ember_st_ = (call);                       \
    if (ember_st_ != CUDNN_STATUS_SUCCESS) throw_cudnn(ember_st_, #call, what); \
  } while (0)

uint64_t hash_mix(uint64_t h, int64_t v) {
  return h ^ (static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

enum class Direction : uint8_t { Forward, BackwardData, BackwardFilter };

struct ConvKey {
  int device;
  Direction dir;
  DType dtype;
  bool tf32;
  int64_t x[4], w[4];
  int64_t stride[2], pad[2], dil[2], groups;
  bool operator==(const ConvKey& o) const {
    return device == o.device && dir == o.dir && dtype == o.dtype && tf32 == o.tf32 &&
           std::equal(x, x + 4, o.x) && std::equal(w, w + 4, o.w) &&
           std::equal(stride, stride + 2, o.stride) && std::equal(pad, pad + 2, o.pad) &&
           std::equal(dil, dil + 2, o.dil) && groups == o.groups;
  }
};
struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    uint64_t h = hash_mix(0, static_cast<uint64_t>(k.device) << 16 |
                                 static_cast<uint64_t>(k.dir) << 8 | static_cast<uint64_t>(k.dtype) |
                                 (k.tf32 ? 1u << 24 : 0u));
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

// The first usable result in the order given (timed: fastest first; heuristic: its ranking):
// deterministic first, anything that runs as a last resort. Each result names the math type it
// ran with, which the plan's descriptor must then carry (cuDNN refuses an algorithm run in
// another). float32 without TF32 takes FMA math only.
template <class Perf>
int pick(const Perf* perf, int n, size_t limit, bool fma_only, Plan& plan) {
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < n; ++i) {
      const Perf& p = perf[i];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > limit) continue;
      if (pass == 0 && p.determinism != CUDNN_DETERMINISTIC) continue;
      if (fma_only && p.mathType != CUDNN_FMA_MATH) continue;
      plan.workspace = p.memory;
      plan.math = p.mathType;
      return static_cast<int>(p.algo);
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
                               : k.dtype == kFloat32 && k.tf32           ? CUDNN_DEFAULT_MATH
                                                                         : CUDNN_FMA_MATH;
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, math), what);
  int n = 0, c = 0, h = 0, w = 0;
  EMBER_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &c, &h, &w), what);
  EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, dt, n, c, h, w), what);

  cudnnHandle_t hd = handle(k.device);
  const size_t limit = cublas_workspace(k.device).size;
  constexpr int kAsk = 8;
  int got = 0;
  // Timed on the call's own tensors (the output is rewritten by the call itself afterwards),
  // unless a CUDA graph is being captured: timing synchronizes, so that plan takes the
  // heuristic's order.
  const bool timed = !stream_capturing(k.device);
  const bool fma_only = k.dtype == kFloat32 && !k.tf32;
  void* ws = cublas_workspace(k.device).ptr;
  if (k.dir == Direction::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kAsk];
    if (timed) {
      EMBER_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(hd, p.x, a, p.w, b, p.conv, p.y, out,
                                                               kAsk, &got, perf, ws, limit),
                        what);
    } else {
      EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(hd, p.x, p.w, p.conv, p.y, kAsk,
                                                               &got, perf),
                        what);
    }
    p.algo = pick(perf, got, limit, fma_only, p);
  } else if (k.dir == Direction::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kAsk];
    if (timed) {
      EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(hd, p.w, b, p.y, a, p.conv, p.x,
                                                                    out, kAsk, &got, perf, ws,
                                                                    limit),
                        what);
    } else {
      EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(hd, p.w, p.y, p.conv, p.x,
                                                                    kAsk, &got, perf),
                        what);
    }
    p.algo = pick(perf, got, limit, fma_only, p);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kAsk];
    if (timed) {
      EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(hd, p.x, b, p.y, a, p.conv,
                                                                      p.w, out, kAsk, &got, perf,
                                                                      ws, limit),
                        what);
    } else {
      EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(hd, p.x, p.y, p.conv, p.w,
                                                                      kAsk, &got, perf),
                        what);
    }
    p.algo = pick(perf, got, limit, fma_only, p);
  }
  EMBER_CHECK(p.algo >= 0, what, ": cuDNN has no algorithm for input [", k.x[0], ", ", k.x[1],
              ", ", k.x[2], ", ", k.x[3], "] and weight [", k.w[0], ", ", k.w[1], ", ", k.w[2],
              ", ", k.w[3], "] ", dtype_name(k.dtype), " within ", limit >> 20,
              " MiB of workspace");
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, p.math), what);
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
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    hd = handle(k.device);
    auto it = state().plans.find(k);
    if (it == state().plans.end())
      it = state().plans.emplace(k, make_plan(k, what, a.raw_data(), b.raw_data(), out.raw_data()))
               .first;
    p = it->second;
  }
  const Workspace ws_buf = cublas_workspace(k.device);
  // alpha and beta are double for float64 data, float otherwise.
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const void* one = k.dtype == kFloat64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = k.dtype == kFloat64 ? static_cast<const void*>(&zero_d) : &zero_f;
  if (dir == Direction::Forward) {
    EMBER_CUDNN_CHECK(cudnnConvolutionForward(hd, one, p.x, a.raw_data(), p.w, b.raw_data(), p.conv,
                                              static_cast<cudnnConvolutionFwdAlgo_t>(p.algo),
                                              ws_buf.ptr, p.workspace, zero, p.y, out.raw_data()),
                      what);
  } else if (dir == Direction::BackwardData) {
    EMBER_CUDNN_CHECK(
        cudnnConvolutionBackwardData(hd, one, p.w, b.raw_data(), p.y, a.raw_data(), p.conv,
                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo), ws_buf.ptr,
                                     p.workspace, zero, p.x, out.raw_data()),
        what);
  } else {
    EMBER_CUDNN_CHECK(
        cudnnConvolutionBackwardFilter(hd, one, p.x, b.raw_data(), p.y, a.raw_data(), p.conv,
                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo),
                                       ws_buf.ptr, p.workspace, zero, p.w, out.raw_data()),
        what);
  }
}

#else  // built without cuDNN: nn's convolutions take another path (see nn/conv.cpp)

void conv(const KernelCall& call) {
  EMBER_FAIL(op_name(call.op), ": Ember was built without cuDNN (CMake did not find it)");
}

#endif

}  // namespace kernels::cuda
}  // namespace ember
