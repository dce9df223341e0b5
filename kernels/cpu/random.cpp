// CPU random draws and arange. Both devices compute element i from the same closed-form
// definitions (core/philox.h), so CPU and CUDA draws are identical (float64 randn within an ulp:
// it uses the platform's double log/sin/cos). This file is compiled with -ffp-contract=off
// (CMakeLists.txt) so the float randn's IEEE operations are never fused into FMAs. Element i
// depends on i alone, so the intra-op pool (core/parallel.h) may split the draws anywhere.
#include <cmath>
#include <type_traits>

#include "core/parallel.h"
#include "core/philox.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_clones.h"

namespace ember::kernels::cpu {
namespace {

// Largest value below 1 in T, so rounding a uniform draw never yields 1.
template <class T>
double below_one() {
  if constexpr (std::is_same_v<T, float>)
    return 0.99999994039535522;  // 1 - 2^-24
  else if constexpr (std::is_same_v<T, Half>)
    return 0.99951171875;  // 1 - 2^-11
  else if constexpr (std::is_same_v<T, BFloat16>)
    return 0.99609375;  // 1 - 2^-8
  else
    return 0.99999999999999989;  // 1 - 2^-53
}

template <class T>
T to_storage(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Quads [q0, q1) of the float normal draw into out[4 q0 .. 4 q1): the hot loop of randn,
// branch-free so each clone vectorises it (core/philox.h).
EMBER_VECTOR_CLONES
void normal_quads_f32(float* out, int64_t q0, int64_t q1, uint64_t seed, uint64_t offset) {
  for (int64_t q = q0; q < q1; ++q) {
    float v[4];
    philox::normal_quad_f32(seed, offset, static_cast<uint64_t>(q), v);
    out[4 * q] = v[0];
    out[4 * q + 1] = v[1];
    out[4 * q + 2] = v[2];
    out[4 * q + 3] = v[3];
  }
}

// Draws a piece of the pool takes at least (a draw costs tens of nanoseconds).
constexpr int64_t kDrawGrain = 8192;

template <class F>
void each_index(int64_t n, const F& f) {
  parallel_for(n, kDrawGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

}  // namespace

void random(const KernelCall& c) {
  const Attrs& a = c.attrs;
  const int64_t n = c.out.numel();
  visit_dtype(c.out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(c.out.raw_data());
    if constexpr (std::is_same_v<T, bool>) {
      EMBER_FAIL(op_name(c.op), ": bool draws are not supported");
    } else if (c.op == OpId::randint) {
      const int64_t lo = a.lo.to_int(), hi = a.hi.to_int();
      each_index(n, [&](int64_t i) {
        out[i] = to_storage<T>(static_cast<double>(philox::integer(a.seed, a.offset, i, lo, hi)));
      });
    } else if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
                         std::is_same_v<T, BFloat16>) {
      if (c.op == OpId::rand) {
        each_index(n, [&](int64_t i) {
          out[i] = to_storage<T>(std::min(philox::uniform(a.seed, a.offset, i), below_one<T>()));
        });
      } else if constexpr (std::is_same_v<T, double>) {
        each_index(n, [&](int64_t i) { out[i] = philox::normal(a.seed, a.offset, i); });
      } else {
        // float32 and the 16-bit types: the float draw (bit-identical to CUDA's), four elements
        // per Philox call, rounded from float to T.
        const int64_t full = std::is_same_v<T, float> ? n / 4 : 0;
        if constexpr (std::is_same_v<T, float>) {
          parallel_for(full, kDrawGrain / 4, [&](int64_t q0, int64_t q1) {
            normal_quads_f32(out, q0, q1, a.seed, a.offset);
          });
        }
        parallel_for((n + 3) / 4 - full, kDrawGrain / 4, [&](int64_t b, int64_t e) {
          for (int64_t q = full + b; q < full + e; ++q) {
            float v[4];
            philox::normal_quad_f32(a.seed, a.offset, static_cast<uint64_t>(q), v);
            for (int64_t k = 0; k < 4 && 4 * q + k < n; ++k) out[4 * q + k] = T(v[k]);
          }
        });
      }
    } else {
      EMBER_FAIL(op_name(c.op), ": dtype ", dtype_name(c.out.dtype()), " is not supported");
    }
  });
}

void arange(const KernelCall& c) {
  const Attrs& a = c.attrs;
  const int64_t n = c.out.numel();
  visit_dtype(c.out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(c.out.raw_data());
    for (int64_t i = 0; i < n; ++i)
      out[i] = to_storage<T>(a.range_start + static_cast<double>(i) * a.range_step);
  });
}

}  // namespace ember::kernels::cpu
