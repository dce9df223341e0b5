// rand / randn / randint on CUDA: element i of the output is the closed-form draw of
// core/philox.h for (attrs.seed, attrs.offset, i), converted exactly as the CPU kernel
// (kernels/cpu/random.cpp) converts it, so both devices yield the same numbers (bit for bit,
// except float64 randn, which uses CUDA's double log/sin/cos and agrees within an ulp).
#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/philox.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/pointwise.cuh"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {
namespace {

namespace ew = elementwise;
constexpr int kThreads = 256;

enum class Draw { Uniform, Normal, Integer };

// The largest value below 1 in S: a uniform draw is clamped to it before rounding, so rounding
// to a short type never yields 1.
template <class S>
constexpr double below_one() {
  if constexpr (std::is_same_v<S, float>)
    return 0.99999994039535522;  // 1 - 2^-24
  else if constexpr (std::is_same_v<S, __half>)
    return 0.99951171875;  // 1 - 2^-11
  else if constexpr (std::is_same_v<S, __nv_bfloat16>)
    return 0.99609375;  // 1 - 2^-8
  else
    return 0.99999999999999989;  // 1 - 2^-53
}

// The type a draw is computed in before it is converted to S: normals for float32, float16 and
// bfloat16 are the float draw (philox::normal_quad_f32, bit-identical to the CPU's; drawn by
// normal_f32_kernel), everything else double.
template <Draw D, class S>
using draw_t = std::conditional_t<D == Draw::Normal && !std::is_same_v<S, double>, float, double>;

// Draw D for both elements of pair p (2p and 2p + 1), which share one Philox call.
template <Draw D, class S>
__device__ __forceinline__ void draw_pair(uint64_t seed, uint64_t offset, uint64_t p, int64_t lo,
                                          int64_t hi, draw_t<D, S>& even, draw_t<D, S>& odd) {
  if constexpr (D == Draw::Normal) {
    static_assert(std::is_same_v<S, double>, "float normals: normal_f32_kernel");
    philox::normal_pair(seed, offset, p, even, odd);
  } else {
    const philox::Bits64Pair b = philox::bits64_pair(seed, offset, p);
    if constexpr (D == Draw::Uniform) {
      const double ue = philox::uniform_from_bits(b.even), uo = philox::uniform_from_bits(b.odd);
      even = below_one<S>() < ue ? below_one<S>() : ue;
      odd = below_one<S>() < uo ? below_one<S>() : uo;
    } else {
      // Through double, as on the CPU.
      even = static_cast<double>(philox::integer_from_bits(b.even, lo, hi));
      odd = static_cast<double>(philox::integer_from_bits(b.odd, lo, hi));
    }
  }
}

// One thread per pair of elements: the pair's Philox call (and, for normals, its logarithm and
// square root) is done once instead of once per element, about half the work of a draw per
// element; the values are those of the per-element formulas in core/philox.h, bit for bit.
template <Draw D, class S>
__global__ void __launch_bounds__(kThreads)
    random_kernel(S* out, int64_t n, uint64_t seed, uint64_t offset, const uint64_t* state,
                  int64_t lo, int64_t hi) {
  if (state != nullptr) {  // a captured replay: the key and base live in device memory
    seed = state[0];
    offset += state[1];
  }
  const int64_t pairs = (n + 1) / 2;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += step) {
    draw_t<D, S> even, odd;
    draw_pair<D, S>(seed, offset, static_cast<uint64_t>(p), lo, hi, even, odd);
    out[2 * p] = ew::convert<S>(even);
    if (2 * p + 1 < n) out[2 * p + 1] = ew::convert<S>(odd);
  }
}

// The float normal draw (float32, float16, bfloat16): one thread per four elements, the four
// of one Philox call (philox::normal_quad_f32), stored as one 16-byte vector where the output
// allows (a Philox call per pair would do twice the calls and store in 8-byte pieces).
template <class S>
__global__ void __launch_bounds__(kThreads)
    normal_f32_kernel(S* out, int64_t n, uint64_t seed, uint64_t offset, const uint64_t* state) {
  if (state != nullptr) {
    seed = state[0];
    offset += state[1];
  }
  const int64_t quads = (n + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool vec = std::is_same_v<S, float> && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < quads;
       q += step) {
    float v[4];
    philox::normal_quad_f32(seed, offset, static_cast<uint64_t>(q), v);
    if (vec && 4 * q + 4 <= n) {
      reinterpret_cast<float4*>(out)[q] = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q + e < n) out[4 * q + e] = ew::convert<S>(v[e]);
    }
  }
}

template <Draw D, class S>
void launch(const KernelCall& call, int64_t lo, int64_t hi) {
  const Tensor& out = call.out;
  const int dev = out.device().index;
  const int64_t n = out.numel();
  if constexpr (D == Draw::Normal && !std::is_same_v<S, double>) {
    normal_f32_kernel<S>
        <<<grid_stride_blocks((n + 3) / 4, kThreads, dev), kThreads, 0, stream(dev)>>>(
            static_cast<S*>(out.raw_data()), n, call.attrs.seed, call.attrs.offset,
            call.attrs.rng_state);
  } else {
    random_kernel<D, S>
        <<<grid_stride_blocks((n + 1) / 2, kThreads, dev), kThreads, 0, stream(dev)>>>(
            static_cast<S*>(out.raw_data()), n, call.attrs.seed, call.attrs.offset,
            call.attrs.rng_state, lo, hi);
  }
  check_launch(op_name(call.op).data());
}

}  // namespace

void random(const KernelCall& call) {
  const Tensor& out = call.out;
  const char* name = op_name(call.op).data();
  EMBER_CHECK(out.is_contiguous(), name, ": internal error: output must be contiguous");
  if (out.numel() == 0) return;
  switch (call.op) {
    case OpId::rand:
      return visit_float_dtype(out.dtype(), name, [&](auto tag) {
        launch<Draw::Uniform, typename decltype(tag)::type>(call, 0, 1);
      });
    case OpId::randn:
      return visit_float_dtype(out.dtype(), name, [&](auto tag) {
        launch<Draw::Normal, typename decltype(tag)::type>(call, 0, 1);
      });
    case OpId::randint: {
      const int64_t lo = call.attrs.lo.to_int(), hi = call.attrs.hi.to_int();
      EMBER_CHECK(lo < hi, "randint: low (", lo, ") must be below high (", hi, ")");
      return visit_numeric_dtype(out.dtype(), name, [&](auto tag) {
        launch<Draw::Integer, typename decltype(tag)::type>(call, lo, hi);
      });
    }
    default:
      break;
  }
  EMBER_FAIL(name, ": internal error: not a random op");
}

}  // namespace ember::kernels::cuda
