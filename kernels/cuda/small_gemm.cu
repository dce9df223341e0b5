// Launchers of the small GEMMs (small_gemm.h; kernels in small_gemm.cuh). Host work per call is
// a few checks and one launch on stream(device): no allocation, no synchronization, so the call
// may be recorded into a CUDA graph.
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/small_gemm.cuh"
#include "kernels/cuda/small_gemm.h"

namespace ember::kernels::cuda {
namespace {

static_assert(dev::kSmallNMaxN == kSmallGemmMaxN, "small_gemm.cuh and small_gemm.h disagree");

constexpr int kSmallKThreads = 256;

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

// The float4 SmallK kernel applies: B's rows and D's rows contiguous and 16-byte aligned.
template <class T>
bool vec4_fits(const dev::SmallGemmArgs<T>& p) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    return p.n % 4 == 0 && (p.b_cs == 1 || p.n == 1) && p.b_rs % 4 == 0 && p.ld_d % 4 == 0 &&
           aligned16(p.b) && aligned16(p.d);
  }
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
  if (kind == SmallGemmKind::SmallK) {
    const bool vec = vec4_fits(p);
    const int64_t total = vec ? p.m * (p.n / 4) : p.m * p.n;
    const unsigned blocks = grid_stride_blocks(total, kSmallKThreads, c.device);
    const bool narrow = total < (int64_t{1} << 31);
    with_constant<0, kSmallGemmMaxK>(p.k, [&](auto kk) {
      constexpr int kK = decltype(kk)::value;
      if constexpr (std::is_same_v<T, float>) {
        if (vec) {
          if (narrow) {
            dev::small_k_gemm_vec4_kernel<kK, uint32_t><<<blocks, kSmallKThreads, 0, s>>>(p);
          } else {
            dev::small_k_gemm_vec4_kernel<kK, int64_t><<<blocks, kSmallKThreads, 0, s>>>(p);
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
  if constexpr (std::is_same_v<T, float>) {
    vec = p.k % 4 == 0 && (p.a_cs == 1 || p.k == 1) && p.b_rs == 1 && p.a_rs % 4 == 0 &&
          p.b_cs % 4 == 0 && aligned16(p.a) && aligned16(p.b);
  }
  with_constant<1, kSmallGemmMaxN>(p.n, [&](auto nn) {
    constexpr int kN = decltype(nn)::value;
    if constexpr (std::is_same_v<T, float>) {
      if (vec) {
        dev::small_n_gemm_vec4_kernel<kN><<<blocks, 32 * dev::kSmallNWarps, 0, s>>>(p);
        return;
      }
    }
    dev::small_n_gemm_kernel<T, kN><<<blocks, 32 * dev::kSmallNWarps, 0, s>>>(p);
  });
  check_launch("small_gemm (small-N)");
}

}  // namespace

void small_gemm(const GemmCall& c) {
  const char* epi = gemm_epilogue_name(c.epilogue);
  EMBER_CHECK(c.epilogue == GemmEpilogue::None || c.epilogue == GemmEpilogue::Bias ||
                  c.epilogue == GemmEpilogue::ReluBias,
              "small_gemm: epilogue ", epi, " is not supported (only DEFAULT, BIAS, RELU_BIAS)");
  EMBER_CHECK(c.dtype == kFloat32 || c.dtype == kFloat64, "small_gemm ", epi,
              ": float32 and float64 only, got ", dtype_name(c.dtype));
  EMBER_CHECK(c.a.rows >= 0 && c.a.cols >= 0 && c.b.cols >= 0 && c.a.cols == c.b.rows,
              "small_gemm ", epi, ": operands [", c.a.rows, ",", c.a.cols, "] x [", c.b.rows, ",",
              c.b.cols, "] do not multiply");
  const SmallGemmKind kind = small_gemm_kind(c.dtype, c.a, c.b);
  EMBER_CHECK(kind != SmallGemmKind::None, "small_gemm ", epi, ": [", c.a.rows, ",", c.a.cols,
              "] x [", c.b.rows, ",", c.b.cols, "] with A strides (", c.a.row_stride, ",",
              c.a.col_stride, ") is not a small problem (K <= ", kSmallGemmMaxK,
              ", or N <= ", kSmallGemmMaxN, " with K <= ", kSmallGemmMaxNK,
              " and A's rows contiguous)");
  EMBER_CHECK(c.ld_d == 0 || c.a.rows <= 1 || c.ld_d >= c.b.cols, "small_gemm ", epi,
              ": output ld ", c.ld_d, " < N = ", c.b.cols);
  if (c.a.rows == 0 || c.b.cols == 0) return;
  EMBER_CHECK(c.d && (c.a.cols == 0 || (c.a.ptr && c.b.ptr)), "small_gemm ", epi,
              ": null operand or output");
  EMBER_CHECK(c.epilogue == GemmEpilogue::None || c.bias, "small_gemm ", epi, ": needs a bias");
  DeviceGuard guard(c.device);
  if (c.dtype == kFloat32) {
    launch<float>(c, kind);
  } else {
    launch<double>(c, kind);
  }
}

}  // namespace ember::kernels::cuda
