#pragma once
/// \file
/// Host-side 16-bit float storage types, Half (IEEE binary16) and BFloat16.
///
/// Arithmetic happens in float: these only store and convert. On the device the CUDA kernels use
/// `__half` / `__nv_bfloat16`, which share the bit layout, so a tensor's bytes mean the same on
/// both sides.
#include <cstdint>
#include <cstring>

namespace ember {

/// An IEEE 754 half-precision float (1 sign, 5 exponent, 10 mantissa bits), the host type of
/// kFloat16 (like `c10::Half`).
///
/// Converts implicitly from and to float; conversions round to nearest even, overflow to
/// infinity and keep NaN, subnormals and signed zeros.
struct Half {
  uint16_t bits = 0;  ///< The raw binary16 bit pattern.
  /// Positive zero.
  Half() = default;
  /// Rounds `f` to the nearest half (ties to even).
  Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a numeric type
  /// The exact float value of this half.
  operator float() const { return to_float(bits); }

  /// The binary16 bits nearest to `f` (round to nearest even; NaN stays a quiet NaN).
  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return uint16_t(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past the largest half
    if (x < 0x38800000u) {                                  // result is subnormal or zero
      if (x < 0x33000000u) return uint16_t(sign);
      const uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126 - e;  // 14 + (112 - e) ... aligns the mantissa to 2^-24
      uint32_t h = m >> shift;
      const uint32_t rem = m & ((1u << shift) - 1), half_ulp = 1u << (shift - 1);
      if (rem > half_ulp || (rem == half_ulp && (h & 1u))) ++h;
      return uint16_t(sign | h);
    }
    uint32_t h = ((x >> 13) - (112u << 10));
    const uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  /// The float that binary16 bits `h` encode (exact: every half is a float).
  static float to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
      if (m == 0) {
        x = sign;
      } else {  // subnormal: normalise
        e = 113;
        while (!(m & 0x400u)) {
          m <<= 1;
          --e;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
      }
    } else if (e == 31) {
      x = sign | 0x7f800000u | (m << 13);
    } else {
      x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

/// A bfloat16 (the upper 16 bits of a float: 8 exponent, 7 mantissa bits), the host type of
/// kBFloat16 (like `c10::BFloat16`).
///
/// Same range as float, less precision. Converts implicitly from and to float.
struct BFloat16 {
  uint16_t bits = 0;  ///< The raw bfloat16 bit pattern.
  /// Positive zero.
  BFloat16() = default;
  /// Rounds `f` to the nearest bfloat16 (ties to even).
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT
  /// The exact float value of this bfloat16.
  operator float() const { return to_float(bits); }

  /// The bfloat16 bits nearest to `f` (round to nearest even; NaN stays a quiet NaN).
  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
    return uint16_t(x >> 16);
  }
  /// The float that bfloat16 bits `b` encode (exact).
  static float to_float(uint16_t b) {
    const uint32_t x = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

}  // namespace ember
