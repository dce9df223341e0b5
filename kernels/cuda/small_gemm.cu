// Launchers of the small GEMMs (small_gemm.h; kernels in small_gemm.cuh). Host work per call is
// a few checks and one launch on stream(device): no allocation, no synchronization, so the call
// may be recorded into a CUDA graph.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/small_gemm.cuh"
#include "kernels/cuda/small_gemm.h"
#include "kernels/cuda/tile_gemm.cuh"

namespace ember::kernels::cuda {
namespace {

static_assert(dev::kSmallNMaxN == kSmallGemmMaxN, "small_gemm.cuh and small_gemm.h disagree");

constexpr int kSmallKThreads = 256;
// From this many rows the SmallK and SmallN float32 kernels walk several rows per thread or
// warp (same bits, fewer loads of B): below it the extra rows leave the GPU under-filled
// (bench/NOTES.md, "Figures moved out of code comments").
constexpr int64_t kSmallGemmRowsMinM = 4096;
static_assert(kSmallGemmRowsMinM >= kSmallGemm16MaxM,
              "16-bit products never take the rows kernels");

// Calls f(std::integral_constant<int, v>) for a runtime v in [kLo, kHi]: the kernels take K or
// N as a template constant.
template <int kLo, int kHi, class F>
void with_constant(int64_t v, F&& f) {
  if constexpr (kLo <= kHi) {
    if (v == kLo) {
      f(std::integral_constant<int, kLo>{});
    } else {
      with_constant<kLo + 1, kHi>(v, f);
    }
  }
}

bool aligned16(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; }

// The kernels that move four elements at a time take float32 and the 16-bit floats (not
// float64); a quad of T is aligned to 4 * sizeof(T) bytes.
template <class T>
constexpr bool kQuads =
    std::is_same_v<T, float> || std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
bool quad_aligned(const void* q) {
  return reinterpret_cast<uintptr_t>(q) % (4 * sizeof(T)) == 0;
}

// The vector SmallK kernel applies: B's rows and D's rows contiguous and quad-aligned.
template <class T>
bool vec4_fits(const dev::SmallGemmArgs<T>& p) {
  if constexpr (!kQuads<T>) {
    return false;
  } else {
    return p.n % 4 == 0 && (p.b_cs == 1 || p.n == 1) && p.b_rs % 4 == 0 && p.ld_d % 4 == 0 &&
           quad_aligned<T>(p.b) && quad_aligned<T>(p.d);
  }
}

// Whether `device` launches thread-block clusters (sm_90 and later), asked once per device.
bool has_clusters(int device) {
  constexpr int kDevices = 64;                      // as runtime.cpp's table
  static std::atomic<int8_t> known[kDevices] = {};  // 0 unknown, 1 no, 2 yes
  EMBER_CHECK(device >= 0 && device < kDevices, "small_gemm: device ", device, " out of range");
  std::atomic<int8_t>& k = known[device];
  int8_t v = k.load(std::memory_order_relaxed);
  if (v == 0) {
    int on = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&on, cudaDevAttrClusterLaunch, device));
    v = on ? 2 : 1;
    k.store(v, std::memory_order_relaxed);
  }
  return v == 2;
}

// The Tiled kernel's plan, a function of (M, N, K, device) alone: the tile from the smaller
// sizes, then k split into up to 8 slices (a cluster) while the tiles are too few to fill the
// GPU, each slice at least 64 long (the timings behind these choices: bench/NOTES.md).
// A product at batch 64 is a step's latency, not its throughput: when even the widest split
// leaves fewer than 64 blocks of 64x64, tiles of 64x32 put more SMs on it. M's tile stays: for
// products of a few columns, narrowing it measured slower.
struct TilePlan {
  int bm = 64, bn = 64, slices = 1, slice = 0;
};
TilePlan tile_plan(int64_t m, int64_t n, int64_t k, bool clusters) {
  TilePlan t;
  t.bm = m <= 16 ? 16 : m <= 32 ? 32 : 64;
  t.bn = t.bm == 16 ? 32 : 64;
  const int64_t widest = clusters ? std::clamp<int64_t>(k / 64, 1, 8) : 1;
  if (t.bm == 64 && n > 32 && ceil_div(m, 64) * ceil_div(n, 64) * widest < 64) t.bn = 32;
  const int64_t tiles = ceil_div(m, t.bm) * ceil_div(n, t.bn);
  int64_t s = 1;
  if (clusters && tiles < 64) s = std::max<int64_t>(1, std::min<int64_t>({8, 128 / tiles, k / 64}));
  t.slice = static_cast<int>(ceil_div(ceil_div(k, s), 4) * 4);
  t.slices = static_cast<int>(ceil_div(k, t.slice));  // no empty slice
  return t;
}

template <int BM, int BN>
void launch_tiled(const dev::SmallGemmArgs<float>& p, const TilePlan& t, bool a_k, bool b_k,
                  cudaStream_t s) {
  // float4 loads when every row start along the contiguous dimension is 16-byte aligned.
  const int64_t a_ld = a_k ? p.a_rs : p.a_cs, b_ld = b_k ? p.b_cs : p.b_rs;
  const bool vec = (a_ld % 4 == 0 || (a_k ? p.m : p.k) == 1) &&
                   (b_ld % 4 == 0 || (b_k ? p.n : p.k) == 1) && aligned16(p.a) && aligned16(p.b);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ceil_div(p.n, BN)),
                     static_cast<unsigned>(ceil_div(p.m, BM)), static_cast<unsigned>(t.slices));
  cfg.blockDim = dim3(dev::kTileThreads);
  cfg.stream = s;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = 1;
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = static_cast<unsigned>(t.slices);
  cfg.attrs = cluster;
  cfg.numAttrs = t.slices > 1 ? 1 : 0;
  auto go = [&](auto kernel) {
    EMBER_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p, t.slice, vec));
  };
  if (a_k) {
    if (b_k)
      go(dev::tile_gemm_kernel<BM, BN, true, true>);
    else
      go(dev::tile_gemm_kernel<BM, BN, true, false>);
  } else {
    if (b_k)
      go(dev::tile_gemm_kernel<BM, BN, false, true>);
    else
      go(dev::tile_gemm_kernel<BM, BN, false, false>);
  }
}

void tiled(const dev::SmallGemmArgs<float>& p, int device, cudaStream_t s) {
  const TilePlan t = tile_plan(p.m, p.n, p.k, has_clusters(device));
  const bool a_k = p.a_cs == 1, b_k = p.b_rs == 1;  // else a_rs == 1, b_cs == 1 (the rule)
  if (t.bm == 16) {
    launch_tiled<16, 32>(p, t, a_k, b_k, s);
  } else if (t.bm == 32) {
    launch_tiled<32, 64>(p, t, a_k, b_k, s);
  } else if (t.bn == 32) {
    launch_tiled<64, 32>(p, t, a_k, b_k, s);
  } else {
    launch_tiled<64, 64>(p, t, a_k, b_k, s);
  }
  check_launch("small_gemm (tiled)");
}

// The Thin kernels' plan, a function of (M, N, K) and the workspace's size alone: slices of
// about 64 k (at most 256), fewer if their partial products would not fit the workspace.
struct ThinPlan {
  int slices = 1;
  int64_t slice = 0;
};
ThinPlan thin_plan(int64_t m, int64_t n, int64_t k, size_t workspace) {
  const int64_t per_slice = m * n * static_cast<int64_t>(sizeof(float));
  int64_t s = std::clamp<int64_t>(ceil_div(k, 64), 1, 256);
  s = std::max<int64_t>(1, std::min<int64_t>(s, static_cast<int64_t>(workspace) / per_slice));
  ThinPlan t;
  t.slice = ceil_div(ceil_div(k, s), dev::kThinLanes) * dev::kThinLanes;
  t.slices = static_cast<int>(ceil_div(k, t.slice));  // no empty slice
  return t;
}

template <class T>
void thin(const dev::SmallGemmArgs<T>& p, int device, cudaStream_t s) {
  const Workspace ws = cublas_workspace(device);
  const ThinPlan t = thin_plan(p.m, p.n, p.k, ws.size);
  auto* partial = static_cast<float*>(ws.ptr);
  const bool vec = quad_aligned<T>(p.b);  // the rule made N and B's row stride multiples of 4
  const dim3 grid(static_cast<unsigned>(t.slices),
                  static_cast<unsigned>(ceil_div(p.n / 4, dev::kThinQuads)));
  const dim3 block(dev::kThinQuads, dev::kThinLanes);
  with_constant<1, kThinGemmMaxM>(p.m, [&](auto mm) {
    constexpr int kM = decltype(mm)::value;
    if (vec) {
      dev::thin_gemm_partial_kernel<T, kM, true><<<grid, block, 0, s>>>(p, t.slice, partial);
    } else {
      dev::thin_gemm_partial_kernel<T, kM, false><<<grid, block, 0, s>>>(p, t.slice, partial);
    }
  });
  const int64_t warps = p.m * (p.n / 4);
  dev::thin_gemm_finish_kernel<T>
      <<<static_cast<unsigned>(ceil_div(warps, 8)), 256, 0, s>>>(p, t.slices, partial);
  check_launch("small_gemm (thin)");
}

template <class T>
void launch(const GemmCall& c, SmallGemmKind kind) {
  dev::SmallGemmArgs<T> p;
  p.a = static_cast<const T*>(c.a.ptr);
  p.a_rs = c.a.row_stride;
  p.a_cs = c.a.col_stride;
  p.b = static_cast<const T*>(c.b.ptr);
  p.b_rs = c.b.row_stride;
  p.b_cs = c.b.col_stride;
  p.d = static_cast<T*>(c.d);
  p.ld_d = c.ld_d > 0 ? c.ld_d : c.b.cols;
  p.bias = c.epilogue == GemmEpilogue::None ? nullptr : static_cast<const T*>(c.bias);
  p.m = c.a.rows;
  p.n = c.b.cols;
  p.k = c.a.cols;
  p.relu = c.epilogue == GemmEpilogue::ReluBias;
  cudaStream_t s = stream(c.device);
  if constexpr (std::is_same_v<T, float>) {
    if (kind == SmallGemmKind::Tiled) {
      tiled(p, c.device, s);
      return;
    }
  }
  if constexpr (kQuads<T>) {
    if (kind == SmallGemmKind::Thin) {
      thin(p, c.device, s);
      return;
    }
  }
  if (kind == SmallGemmKind::SmallK) {
    const bool vec = vec4_fits(p);
    if constexpr (std::is_same_v<T, float>) {
      // Many rows: B's quads kept in registers across rows (small_k_gemm_rows_kernel).
      const int64_t row_blocks = ceil_div(p.m, dev::kSmallKRows);
      if (vec && p.m >= kSmallGemmRowsMinM && row_blocks <= 65535) {
        const dim3 grid(static_cast<unsigned>(ceil_div(p.n / 4, dev::kSmallKRowsThreads)),
                        static_cast<unsigned>(row_blocks));
        with_constant<0, kSmallGemmMaxK>(p.k, [&](auto kk) {
          constexpr int kK = decltype(kk)::value;
          dev::small_k_gemm_rows_kernel<T, kK><<<grid, dev::kSmallKRowsThreads, 0, s>>>(p);
        });
        check_launch("small_gemm (small-K, rows)");
        return;
      }
    }
    const int64_t total = vec ? p.m * (p.n / 4) : p.m * p.n;
    const unsigned blocks = grid_stride_blocks(total, kSmallKThreads, c.device);
    const bool narrow = total < (int64_t{1} << 31);
    with_constant<0, kSmallGemmMaxK>(p.k, [&](auto kk) {
      constexpr int kK = decltype(kk)::value;
      if constexpr (kQuads<T>) {
        if (vec) {
          if (narrow) {
            dev::small_k_gemm_vec4_kernel<T, kK, uint32_t><<<blocks, kSmallKThreads, 0, s>>>(p);
          } else {
            dev::small_k_gemm_vec4_kernel<T, kK, int64_t><<<blocks, kSmallKThreads, 0, s>>>(p);
          }
          return;
        }
      }
      if (narrow) {
        dev::small_k_gemm_kernel<T, kK, uint32_t><<<blocks, kSmallKThreads, 0, s>>>(p);
      } else {
        dev::small_k_gemm_kernel<T, kK, int64_t><<<blocks, kSmallKThreads, 0, s>>>(p);
      }
    });
    check_launch("small_gemm (small-K)");
    return;
  }
  // Rows per block = warps per block; at most 8 blocks per SM (a full SM of warps) before the
  // warps stride over the remaining rows.
  const unsigned blocks = grid_stride_blocks(p.m, dev::kSmallNWarps, c.device);
  bool vec = false;
  if constexpr (kQuads<T>) {
    vec = p.k % 4 == 0 && (p.a_cs == 1 || p.k == 1) && p.b_rs == 1 && p.a_rs % 4 == 0 &&
          p.b_cs % 4 == 0 && quad_aligned<T>(p.a) && quad_aligned<T>(p.b);
  }
  // Many rows: kSmallNRows rows per warp share B's loads (small_n_gemm_rows_kernel).
  const bool rows = vec && p.m >= kSmallGemmRowsMinM;
  const unsigned row_blocks =
      grid_stride_blocks(ceil_div(p.m, dev::kSmallNRows), dev::kSmallNWarps, c.device);
  with_constant<1, kSmallGemmMaxN>(p.n, [&](auto nn) {
    constexpr int kN = decltype(nn)::value;
    if constexpr (std::is_same_v<T, float>) {
      if (rows) {
        dev::small_n_gemm_rows_kernel<T, kN><<<row_blocks, 32 * dev::kSmallNWarps, 0, s>>>(p);
        return;
      }
    }
    if constexpr (kQuads<T>) {
      if (vec) {
        dev::small_n_gemm_vec4_kernel<T, kN><<<blocks, 32 * dev::kSmallNWarps, 0, s>>>(p);
        return;
      }
    }
    dev::small_n_gemm_kernel<T, kN><<<blocks, 32 * dev::kSmallNWarps, 0, s>>>(p);
  });
  check_launch("small_gemm (small-N)");
}

}  // namespace

namespace {

// What any small_gemm call needs, checked before the kernel is chosen.
void check_call(const GemmCall& c) {
  const char* epi = gemm_epilogue_name(c.epilogue);
  EMBER_CHECK(c.epilogue == GemmEpilogue::None || c.epilogue == GemmEpilogue::Bias ||
                  c.epilogue == GemmEpilogue::ReluBias,
              "small_gemm: epilogue ", epi, " is not supported (only DEFAULT, BIAS, RELU_BIAS)");
  EMBER_CHECK(
      c.dtype == kFloat32 || c.dtype == kFloat64 || c.dtype == kFloat16 || c.dtype == kBFloat16,
      "small_gemm ", epi, ": float32, float64, float16 and bfloat16 only, got ",
      dtype_name(c.dtype));
  EMBER_CHECK(c.a.rows >= 0 && c.a.cols >= 0 && c.b.cols >= 0 && c.a.cols == c.b.rows,
              "small_gemm ", epi, ": operands [", c.a.rows, ",", c.a.cols, "] x [", c.b.rows, ",",
              c.b.cols, "] do not multiply");
}

void run(const GemmCall& c, SmallGemmKind kind);

}  // namespace

void small_gemm(const GemmCall& c) {
  check_call(c);
  const SmallGemmKind kind = small_gemm_kind(c.dtype, c.a, c.b);
  EMBER_CHECK(kind != SmallGemmKind::None, "small_gemm ", gemm_epilogue_name(c.epilogue), ": [",
              c.a.rows, ",", c.a.cols, "] x [", c.b.rows, ",", c.b.cols, "] with A strides (",
              c.a.row_stride, ",", c.a.col_stride, ") and B strides (", c.b.row_stride, ",",
              c.b.col_stride, ") is not a small problem (K <= ", kSmallGemmMaxK,
              ", or N <= ", kSmallGemmMaxN, " with K <= ", kSmallGemmMaxNK,
              " and A's rows contiguous, or float32 with M N K <= ", kTiledGemmMaxMNK,
              " and a unit stride in each operand, or float32 with M <= ", kThinGemmMaxM,
              ", B's rows contiguous and N a multiple of 4)");
  run(c, kind);
}

void small_gemm(const GemmCall& c, SmallGemmKind kind) {
  check_call(c);
  EMBER_CHECK(kind != SmallGemmKind::None && small_gemm_fits(kind, c.dtype, c.a, c.b),
              "small_gemm ", gemm_epilogue_name(c.epilogue), ": the ", small_gemm_name(kind),
              " kernel does not take [", c.a.rows, ",", c.a.cols, "] x [", c.b.rows, ",", c.b.cols,
              "] ", dtype_name(c.dtype), " with A strides (", c.a.row_stride, ",", c.a.col_stride,
              ") and B strides (", c.b.row_stride, ",", c.b.col_stride, ")");
  run(c, kind);
}

namespace {

void run(const GemmCall& c, SmallGemmKind kind) {
  const char* epi = gemm_epilogue_name(c.epilogue);
  EMBER_CHECK(c.ld_d == 0 || c.a.rows <= 1 || c.ld_d >= c.b.cols, "small_gemm ", epi,
              ": output ld ", c.ld_d, " < N = ", c.b.cols);
  if (c.a.rows == 0 || c.b.cols == 0) return;
  EMBER_CHECK(c.d && (c.a.cols == 0 || (c.a.ptr && c.b.ptr)), "small_gemm ", epi,
              ": null operand or output");
  EMBER_CHECK(c.epilogue == GemmEpilogue::None || c.bias, "small_gemm ", epi, ": needs a bias");
  DeviceGuard guard(c.device);
  switch (c.dtype) {
    case kFloat32:
      launch<float>(c, kind);
      return;
    case kFloat64:
      launch<double>(c, kind);
      return;
    case kFloat16:
      launch<__half>(c, kind);
      return;
    default:
      launch<__nv_bfloat16>(c, kind);
      return;
  }
}

}  // namespace

}  // namespace ember::kernels::cuda
