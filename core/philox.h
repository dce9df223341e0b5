#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the
// mapping from its output to uniform, normal and integer draws. Host, nvcc and NVRTC compile
// this same header, so a given (seed, offset) yields the same numbers on CPU and CUDA.
//
// Stream layout: element i of a draw at generator offset `off` uses counter c = off + i / 2;
// one Philox call gives four 32-bit words: words (0,1) serve even i, words (2,3) odd i, each
// pair a 64-bit value. A draw of n elements advances the offset by ceil(n / 2).
#include "core/macros.h"
#if !defined(__CUDACC_RTC__)
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
// cosine branch, odd i the sine branch of the same pair. Computed in double on both devices so
// that CPU and CUDA agree after rounding to the output dtype. normal_pair() gives both elements
// of a pair from one Philox call and one logarithm, with the same expressions as normal(), so
// the two agree bit for bit (a kernel that draws pairs does half the work).
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
