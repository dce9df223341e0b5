#pragma once
// Host-side element access for tests, written without the library's kernels: strides are walked
// here and 16-bit floats are encoded/decoded here, so what a test compares against was not
// produced by the code under test. Only plain std:: math is used.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/tensor.h"

namespace ember::test {

// IEEE binary16 / bfloat16 bits from a double, rounding to nearest even (no double rounding
// through float: the test's values go straight to the 16-bit grid).
inline uint16_t encode_16bit(double x, int mant_bits, int exp_bias) {
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const int exp_all_ones = 2 * exp_bias + 1;
  if (std::isnan(x))
    return sign | uint16_t(exp_all_ones << mant_bits) | uint16_t(1u << (mant_bits - 1));
  const double a = std::fabs(x);
  if (a == 0) return sign;
  const int min_exp = 1 - exp_bias;  // exponent of the smallest normal
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  --e;                // a = m' * 2^e, m' in [1, 2)
  if (e < min_exp) {  // subnormal: units of 2^(min_exp - mant_bits); r may round up to min normal
    const double r = std::nearbyint(std::ldexp(a, mant_bits - min_exp));
    return sign | uint16_t(r);
  }
  double r = std::nearbyint(std::ldexp(a, mant_bits - e));  // in [2^mant, 2^(mant+1)]
  if (r == std::ldexp(1.0, mant_bits + 1)) {
    r /= 2;
    ++e;
  }
  if (e > exp_bias) return sign | uint16_t(exp_all_ones << mant_bits);  // overflow: inf
  const uint32_t field = uint32_t(e + exp_bias) << mant_bits;
  return sign | uint16_t(field | (uint32_t(r) - (1u << mant_bits)));
}

inline double decode_16bit(uint16_t b, int mant_bits, int exp_bias) {
  const double sign = (b & 0x8000u) ? -1.0 : 1.0;
  const int e = (b & 0x7fffu) >> mant_bits;
  const uint32_t m = b & ((1u << mant_bits) - 1);
  if (e == 2 * exp_bias + 1) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(double(m), 1 - exp_bias - mant_bits);
  return sign * std::ldexp(double(m + (1u << mant_bits)), e - exp_bias - mant_bits);
}

inline uint16_t encode_f16(double x) { return encode_16bit(x, 10, 15); }
inline uint16_t encode_bf16(double x) { return encode_16bit(x, 7, 127); }
inline double decode_f16(uint16_t b) { return decode_16bit(b, 10, 15); }
inline double decode_bf16(uint16_t b) { return decode_16bit(b, 7, 127); }

// The value `x` takes once stored in `t` (floats rounded to nearest, ints truncated toward zero).
inline double round_to(DType t, double x) {
  switch (t) {
    case DType::Float64:
      return x;
    case DType::Float32:
      return static_cast<double>(static_cast<float>(x));
    case DType::Float16:
      return decode_f16(encode_f16(x));
    case DType::BFloat16:
      return decode_bf16(encode_bf16(x));
    case DType::Int32:
    case DType::Int64:
      return std::trunc(x);
    case DType::Bool:
      return x != 0 ? 1.0 : 0.0;
  }
  return x;
}

inline double load(const char* p, DType t) {
  switch (t) {
    case DType::Float32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::Float64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DType::Float16:
    case DType::BFloat16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      return t == DType::Float16 ? decode_f16(b) : decode_bf16(b);
    }
    case DType::Int32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      return i;
    }
    case DType::Int64: {
      int64_t i;
      std::memcpy(&i, p, 8);
      return static_cast<double>(i);
    }
    case DType::Bool: {
      uint8_t b;
      std::memcpy(&b, p, 1);
      return b ? 1.0 : 0.0;
    }
  }
  return 0;
}

inline void store(char* p, DType t, double x) {
  switch (t) {
    case DType::Float32: {
      const float f = static_cast<float>(x);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::Float64:
      std::memcpy(p, &x, 8);
      return;
    case DType::Float16: {
      const uint16_t b = encode_f16(x);
      std::memcpy(p, &b, 2);
      return;
    }
    case DType::BFloat16: {
      const uint16_t b = encode_bf16(x);
      std::memcpy(p, &b, 2);
      return;
    }
    case DType::Int32: {
      const int32_t i = static_cast<int32_t>(x);
      std::memcpy(p, &i, 4);
      return;
    }
    case DType::Int64: {
      const int64_t i = static_cast<int64_t>(x);
      std::memcpy(p, &i, 8);
      return;
    }
    case DType::Bool: {
      const uint8_t b = x != 0;
      std::memcpy(p, &b, 1);
      return;
    }
  }
}

// Index helpers over row-major logical positions.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int d = s.size() - 1; d >= 0; --d) {
    idx[d] = s[d] ? flat % s[d] : 0;
    if (s[d]) flat /= s[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (int d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

// Every element of `t` in row-major logical order, read by walking its strides in host memory
// (a CUDA tensor is first moved to the host with .cpu()).
inline std::vector<double> read(const Tensor& t) {
  const Tensor h = t.is_cuda() ? t.cpu() : t;
  const int64_t n = h.numel();
  std::vector<double> out(static_cast<size_t>(n));
  const char* base = static_cast<const char*>(h.raw_data());
  const int64_t es = element_size(h.dtype());
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> idx = unravel(i, h.sizes());
    int64_t off = 0;
    for (int d = 0; d < h.dim(); ++d) off += idx[d] * h.strides()[d];
    out[static_cast<size_t>(i)] = load(base + off * es, h.dtype());
  }
  return out;
}

// A new contiguous tensor holding `v` (row-major) on `device`. Values are stored with this
// file's own encoders and copied as raw bytes.
inline Tensor make(const std::vector<double>& v, const Shape& shape, DType dtype,
                   Device device = Device::cpu()) {
  const int64_t es = element_size(dtype);
  std::vector<char> bytes(v.size() * static_cast<size_t>(es));
  for (size_t i = 0; i < v.size(); ++i) store(bytes.data() + i * es, dtype, v[i]);
  return from_blob_copy(bytes.data(), shape, dtype, device);
}

inline std::string join(const std::vector<double>& v, size_t max_items = 16) {
  std::ostringstream os;
  os.precision(9);
  os << '[';
  for (size_t i = 0; i < v.size() && i < max_items; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > max_items) os << ", ...";
  os << ']';
  return os.str();
}

}  // namespace ember::test
