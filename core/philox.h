#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// mapping from its output to uniform, normal and integer draws. Host, nvcc and NVRTC compile
// this same header, so a given (seed, offset) yields the same numbers on CPU and CUDA.
//
// Stream layout: element i of a draw at generator offset `off` uses counter c = off + i / 2;
// one Philox call gives four 32-bit words: words (0,1) serve even i, words (2,3) odd i, each
// pair a 64-bit value. The float normal draw (normal_quad_f32) instead makes four elements from
// one call: element i uses counter off + i / 4, words (0,1) for the pair i / 2 when it is even,
// (2,3) when odd. A draw of n elements advances the offset by ceil(n / 2) either way.
#include "core/macros.h"
#if !defined(__CUDACC_RTC__)
#include <bit>
#include <cmath>
#include <cstdint>
#endif

namespace ember::philox {

struct U32x4 {
  uint32_t v[4];
};

EMBER_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// The full block function: 128-bit counter, 64-bit key.
EMBER_HD U32x4 philox4x32_10(U32x4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = ctr.v[0], c1 = ctr.v[1], c2 = ctr.v[2], c3 = ctr.v[3];
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// Ember's use: a 64-bit counter in the low words, the seed as the key.
EMBER_HD U32x4 philox4x32_10(uint64_t counter, uint64_t seed) {
  return philox4x32_10(
      U32x4{{static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// The two 64-bit values of counter `offset + pair`: element 2*pair takes words (0,1), element
// 2*pair + 1 words (2,3).
struct Bits64Pair {
  uint64_t even, odd;
};
EMBER_HD Bits64Pair bits64_pair(uint64_t seed, uint64_t offset, uint64_t pair) {
  const U32x4 r = philox4x32_10(offset + pair, seed);
  return {(static_cast<uint64_t>(r.v[1]) << 32) | r.v[0],
          (static_cast<uint64_t>(r.v[3]) << 32) | r.v[2]};
}

// The 64-bit value for element i of a draw starting at `offset`.
EMBER_HD uint64_t bits64(uint64_t seed, uint64_t offset, uint64_t i) {
  const Bits64Pair b = bits64_pair(seed, offset, i / 2);
  return (i & 1) ? b.odd : b.even;
}

// Uniform double in [0, 1) with 53 random bits.
EMBER_HD double uniform_from_bits(uint64_t bits) {
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}
EMBER_HD double uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return uniform_from_bits(bits64(seed, offset, i));
}

// Standard normal by Box-Muller on the two 64-bit halves of one Philox call: even i takes the
// cosine branch, odd i the sine branch of the same pair. This is the float64 draw: computed in
// double with the platform's log/sin/cos, so CPU (glibc) and CUDA (libdevice) agree to about
// one ulp of a double, not bit for bit. float32/float16/bfloat16 outputs use normal_f32 below.
// normal_pair() gives both elements of a pair from one Philox call and one logarithm, with the
// same expressions as normal(), so the two agree bit for bit (a kernel that draws pairs does
// half the work).
struct PolarDraw {
  double radius, angle;
};
EMBER_HD PolarDraw box_muller(const Bits64Pair& b) {
  const double u1 = 1.0 - uniform_from_bits(b.even);  // (0, 1]
  const double u2 = uniform_from_bits(b.odd);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return {::sqrt(-2.0 * ::log(u1)), kTwoPi * u2};
}
EMBER_HD double normal(uint64_t seed, uint64_t offset, uint64_t i) {
  const PolarDraw d = box_muller(bits64_pair(seed, offset, i / 2));
  return (i & 1) ? d.radius * ::sin(d.angle) : d.radius * ::cos(d.angle);
}
EMBER_HD void normal_pair(uint64_t seed, uint64_t offset, uint64_t pair, double& even,
                          double& odd) {
  const PolarDraw d = box_muller(bits64_pair(seed, offset, pair));
  even = d.radius * ::cos(d.angle);
  odd = d.radius * ::sin(d.angle);
}

// ---- The float draw: Box-Muller in float, bit-identical on CPU and CUDA ----------------------
//
// Why float: randn of a float32/float16/bfloat16 tensor needs float precision only, and on the
// GPU the double Box-Muller above costs several times the Philox call it transforms (double
// log and sincos run at a fraction of float throughput), and the float version roughly halves it.
//
// Why our own log and sincos: libm's logf/sinf (glibc) and CUDA's are not correctly rounded
// and differ in the last bit for some inputs, so CPU and CUDA would disagree. The functions below
// use only operations that IEEE 754 defines exactly (+, -, *, / and sqrt rounded to nearest,
// integer <-> float conversion, bit manipulation), which every conforming implementation rounds
// identically, so both devices compute the same bits.
//
// Why no contraction: a compiler that fuses a*b + c into one FMA rounds once instead of twice
// and changes the result. nvcc does so by default (even across statements), GCC with
// -ffp-contract=fast on targets with FMA. On the device every operation goes through the
// round-to-nearest intrinsics (__fmul_rn, __fadd_rn, ...), which nvcc never contracts; on the
// host through one-operation helpers, and the CPU source that draws (kernels/cpu/random.cpp) is
// compiled with -ffp-contract=off (CMakeLists.txt); other host code that must match CUDA bit for
// bit needs the same option on a target with FMA (without -march, x86-64 has none).
namespace f32 {

EMBER_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
EMBER_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
EMBER_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
EMBER_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
EMBER_HD float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);  // IEEE square root (one instruction), correctly rounded
#endif
}
EMBER_HD float from_int(int32_t v) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}
EMBER_HD float from_uint(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return __uint2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}
EMBER_HD uint32_t bits_of(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  return std::bit_cast<uint32_t>(v);
#endif
}
EMBER_HD float from_bits(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(v);
#else
  return std::bit_cast<float>(v);
#endif
}

// Number of bits needed to write v, for v != 0 (no zero test: the host loop over many draws
// stays branch-free, so the compiler can vectorise it).
EMBER_HD int bit_width_nonzero(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return 32 - __clz(static_cast<int>(v));
#else
  return 32 - std::countl_zero(v);
#endif
}

// Natural logarithm of a positive normal finite float (Box-Muller needs (0, 1]); error below
// one ulp. x = m * 2^e with m in [sqrt(1/2), sqrt(2)); with f = m - 1 (exact) and
// s = f / (2 + f), log(m) = log((1 + s) / (1 - s)) = 2s + 2s^3/3 + 2s^5/5 + ..., |s| <= 0.1716,
// so terms to s^9 leave a truncation error below 3e-9 of the result. It is evaluated as
// f - (f^2/2 - s (f^2/2 + R)) (R = 2s^2/3 + 2s^4/5 + ..., an identity since 2s = f - s f), so
// the exact f carries the result and the rounded part is small. e ln2 is added as e * ln2_hi
// (exact: ln2_hi has 15 significant bits, |e| < 2^8) plus e * ln2_lo.
EMBER_HD float log(float x) {
  constexpr uint32_t kSqrtHalfBits = 0x3f3504f3u;  // float(sqrt(1/2))
  constexpr float kLn2Hi = 0x1.62e4p-1f, kLn2Lo = 0x1.7f7d1cp-20f;
  constexpr float kL1 = 0x1.555556p-1f, kL2 = 0x1.99999ap-2f;  // 2/3, 2/5
  constexpr float kL3 = 0x1.24924ap-2f, kL4 = 0x1.c71c72p-3f;  // 2/7, 2/9
  // Shifting the bits by (1.0 - sqrt(1/2)) moves the binade edge to sqrt(1/2): the exponent
  // field then holds e + 127 and the low 23 bits, re-based at sqrt(1/2), give m.
  const uint32_t shifted = bits_of(x) + (0x3f800000u - kSqrtHalfBits);
  const int32_t e = static_cast<int32_t>(shifted >> 23) - 127;
  const float m = from_bits((shifted & 0x007fffffu) + kSqrtHalfBits);
  const float f = sub(m, 1.0f);
  const float s = div(f, add(2.0f, f));
  const float z = mul(s, s);
  const float r = mul(z, add(kL1, mul(z, add(kL2, mul(z, add(kL3, mul(z, kL4)))))));
  const float half_f2 = mul(mul(0.5f, f), f);
  const float ef = from_int(e);
  const float tail = add(mul(s, add(half_f2, r)), mul(ef, kLn2Lo));
  return sub(mul(ef, kLn2Hi), sub(sub(half_f2, tail), f));
}

// sin and cos of 2*pi*w/2^32 (one turn of a 32-bit word); error about one ulp, relative also
// near the zeros. The reduction is exact and done on the integer: w = q 2^30 + d with q the
// nearest quarter turn (mod 4) and d in [-2^29, 2^29), so the angle is (pi/2)(q + r) with
// r = d / 2^30. sin and cos of t = (pi/2)|r| <= pi/4 are Taylor polynomials in |r| (to r^9
// for sin, r^10 for cos: truncation below 3e-9 and 2e-10 of the result), then the sign of r
// and q quarter turns are applied. Without FMA the leading terms need care to stay near one
// ulp: |r| = r_hi + r_lo exactly with r_hi of 12 significant bits, so (pi/2)_hi * r_hi (12 bits
// each) and r_hi^2 are exact products and only small terms are rounded.
EMBER_HD void sincos_turn(uint32_t w, float& sin_out, float& cos_out) {
  // (pi/2)^k / k! with alternating signs, rounded to float; pi/2 = kS1Hi + kS1Lo, kS1Hi with
  // 12 significant bits.
  constexpr float kS1Hi = 0x1.92p+0f, kS1Lo = 0x1.fb5444p-12f, kS3 = -0x1.4abbcep-1f;
  constexpr float kS5 = 0x1.466bc6p-4f, kS7 = -0x1.32d2ccp-8f, kS9 = 0x1.507834p-13f;
  constexpr float kC2 = -0x1.3bd3ccp+0f, kC4 = 0x1.03c1f0p-2f, kC6 = -0x1.55d3c8p-6f;
  constexpr float kC8 = 0x1.e1f506p-11f, kC10 = -0x1.a6d1f2p-16f;
  const uint32_t q = (w + 0x20000000u) >> 30;  // wraps to 0 past 3.5 quarter turns: mod 4
  const int32_t d = static_cast<int32_t>(w - (q << 30));
  const uint32_t a = static_cast<uint32_t>(d < 0 ? -d : d);  // <= 2^29
  const int width = bit_width_nonzero(a | 1u);  // a | 1: the same width for a > 0, 1 for 0
  const int low_bits = width > 12 ? width - 12 : 0;
  const uint32_t a_hi = (a >> low_bits) << low_bits;
  const float r_hi = mul(from_uint(a_hi), 0x1p-30f);               // exact: 12 bits
  const float r_lo = mul(from_uint(a - a_hi), 0x1p-30f);           // exact: < 2^18
  const float r = mul(from_uint(a), 0x1p-30f);                     // rounded once
  const float r2 = add(mul(r_hi, r_hi), mul(r_lo, add(r_hi, r)));  // r^2 = r_hi^2 + r_lo(r_hi + r)
  const float sin_tail =
      mul(mul(r, r2), add(kS3, mul(r2, add(kS5, mul(r2, add(kS7, mul(r2, kS9)))))));
  const float sin_abs = add(mul(kS1Hi, r_hi), add(add(mul(kS1Hi, r_lo), mul(kS1Lo, r)), sin_tail));
  const float sin_t = d < 0 ? -sin_abs : sin_abs;
  // cos t = 1 + kC2 r^2 + r^4 (...): the rounding error of 1 + kC2 r^2 is recovered exactly
  // (Fast2Sum, as |kC2 r^2| < 1) and added back with the small terms.
  const float c2r2 = mul(kC2, r2);
  const float cos_head = add(1.0f, c2r2);
  const float cos_err = sub(c2r2, sub(cos_head, 1.0f));
  const float cos_tail =
      mul(mul(r2, r2), add(kC4, mul(r2, add(kC6, mul(r2, add(kC8, mul(r2, kC10)))))));
  const float cos_t = add(cos_head, add(cos_err, cos_tail));
  // A quarter turn maps (sin, cos) to (cos, -sin).
  const bool swap = (q & 1u) != 0;
  const float s = swap ? cos_t : sin_t, c = swap ? sin_t : cos_t;
  sin_out = (q & 2u) ? -s : s;
  cos_out = ((q + 1u) & 2u) ? -c : c;
}

}  // namespace f32

// The float Box-Muller pair of two 32-bit words: u1 = float(w0 | 1) * 2^-32 in (0, 1] (never 0,
// so |z| <= sqrt(64 ln 2) ~ 6.66, like curand), angle 2*pi*w1/2^32; even element: radius * cos,
// odd: radius * sin.
EMBER_HD void box_muller_f32(uint32_t w0, uint32_t w1, float& even, float& odd) {
  const float u1 = f32::mul(f32::from_uint(w0 | 1u), 0x1p-32f);
  const float radius = f32::sqrt(f32::mul(-2.0f, f32::log(u1)));
  float s, c;
  f32::sincos_turn(w1, s, c);
  even = f32::mul(radius, c);
  odd = f32::mul(radius, s);
}

// The float normal draw's elements 4q .. 4q + 3: one Philox call (counter `offset + quad`), words
// 0 and 1 the first pair, 2 and 3 the second. All four words are used: a Philox call costs as
// much as the rest of a pair's math, so this is about a quarter off randn (the offset accounting,
// counters_for, still reserves ceil(n / 2) counters; the upper half goes unused). A different
// stream from the float64 draw.
EMBER_HD void normal_quad_f32(uint64_t seed, uint64_t offset, uint64_t quad, float out[4]) {
  const U32x4 b = philox4x32_10(offset + quad, seed);
  box_muller_f32(b.v[0], b.v[1], out[0], out[1]);
  box_muller_f32(b.v[2], b.v[3], out[2], out[3]);
}
EMBER_HD float normal_f32(uint64_t seed, uint64_t offset, uint64_t i) {
  const U32x4 b = philox4x32_10(offset + i / 4, seed);
  const bool second = (i & 2) != 0;
  float even, odd;
  box_muller_f32(b.v[second ? 2 : 0], b.v[second ? 3 : 1], even, odd);
  return (i & 1) ? odd : even;
}

// Integer in [lo, hi) (hi > lo). The modulo bias is below 2^-32 for ranges under 2^32.
EMBER_HD int64_t integer_from_bits(uint64_t bits, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(bits % static_cast<uint64_t>(hi - lo));
}
EMBER_HD int64_t integer(uint64_t seed, uint64_t offset, uint64_t i, int64_t lo, int64_t hi) {
  return integer_from_bits(bits64(seed, offset, i), lo, hi);
}

// Counters a draw of n elements consumes.
EMBER_HD uint64_t counters_for(uint64_t n) { return (n + 1) / 2; }

}  // namespace ember::philox
