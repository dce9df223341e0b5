// Op-table trials of factories, random draws and device transfers.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/op_table_harness.h"
#include "core/ops.h"
#include "core/philox.h"

namespace ember::test::optable {

void arange_trials(const Coverage&, DType dt, Rng&, std::vector<Trial>& out) {
  struct Case {
    double start, end, step;
    bool floats_only;
  };
  const std::vector<Case> cases = {{0, 7, 1, false}, {2, -5, -3, false},   {-3, 40, 7, false},
                                   {5, 5, 1, false}, {0.5, 3, 0.25, true}, {1, -1, -0.375, true}};
  for (const Case& k : cases) {
    if (k.floats_only && !is_floating(dt)) continue;
    Trial t;
    std::ostringstream w;
    w << "arange(" << k.start << ", " << k.end << ", " << k.step << ", " << dtype_name(dt) << ")";
    t.what = w.str();
    const Case kc = k;
    t.call = [kc, dt](const std::vector<Tensor>&, Device dev) {
      const auto s = [&](double v) {
        return kc.floats_only ? Scalar(v) : Scalar(static_cast<int64_t>(v));
      };
      return arange(s(kc.start), s(kc.end), s(kc.step), TensorOptions(dt).device(dev));
    };
    const int64_t n = static_cast<int64_t>(std::ceil((k.end - k.start) / k.step));
    t.expect.shape = {std::max<int64_t>(n, 0)};
    t.expect.dtype = dt;
    for (int64_t i = 0; i < n; ++i) t.expect.v.push_back(k.start + static_cast<double>(i) * k.step);
    out.push_back(std::move(t));
  }
  // The one-argument form.
  Trial t;
  t.what = "arange(5, " + std::string(dtype_name(dt)) + ")";
  t.call = [dt](const std::vector<Tensor>&, Device dev) {
    return arange(Scalar(int64_t(5)), TensorOptions(dt).device(dev));
  };
  t.expect.shape = {5};
  t.expect.dtype = dt;
  t.expect.v = {0, 1, 2, 3, 4};
  out.push_back(std::move(t));
}

namespace {

// The Philox stream as core/philox.h documents it, rebuilt here from the block function
// (itself checked against the published known-answer vectors in test_random.cpp).
uint64_t stream_bits(uint64_t seed, uint64_t offset, uint64_t i, uint64_t* other = nullptr) {
  const uint64_t ctr = offset + i / 2;
  const philox::U32x4 r = philox::philox4x32_10(
      philox::U32x4{{static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 0u, 0u}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint64_t lo = (uint64_t(r.v[1]) << 32) | r.v[0], hi = (uint64_t(r.v[3]) << 32) | r.v[2];
  if (other) *other = (i & 1) ? lo : hi;
  return (i & 1) ? hi : lo;
}
double stream_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return std::ldexp(static_cast<double>(stream_bits(seed, offset, i) >> 11), -53);
}
// float64 randn: Box-Muller on the two 64-bit halves, in double.
double stream_normal(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t other;
  const uint64_t mine = stream_bits(seed, offset, i, &other);
  const uint64_t a = (i & 1) ? other : mine, b = (i & 1) ? mine : other;  // a: words 0-1
  const double u1 = 1.0 - std::ldexp(static_cast<double>(a >> 11), -53);
  const double u2 = std::ldexp(static_cast<double>(b >> 11), -53);
  const double rad = std::sqrt(-2.0 * std::log(u1));
  return (i & 1) ? rad * std::sin(2 * std::numbers::pi * u2)
                 : rad * std::cos(2 * std::numbers::pi * u2);
}

// float32/float16/bfloat16 randn: element i uses counter offset + i / 4, words 0 and 1 of its
// block for elements 4q and 4q + 1, words 2 and 3 for 4q + 2 and 4q + 3: the 64 bits that
// stream_bits gives element i / 2. Box-Muller on those two words, u1 = float(w0 | 1) * 2^-32
// (the conversion rounds to float, as the draw defines it) and the angle 2*pi*w1/2^32; even
// elements take the cosine. Evaluated here in double.
double stream_normal_f32(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t words = stream_bits(seed, offset, i / 2);  // first word low, second high
  const uint32_t w0 = static_cast<uint32_t>(words), w1 = static_cast<uint32_t>(words >> 32);
  const double u1 = std::ldexp(static_cast<double>(static_cast<float>(w0 | 1u)), -32);
  const double angle = 2 * std::numbers::pi * std::ldexp(static_cast<double>(w1), -32);
  const double rad = std::sqrt(-2.0 * std::log(u1));
  return (i & 1) ? rad * std::sin(angle) : rad * std::cos(angle);
}

}  // namespace

void random_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  const std::vector<Shape> shapes = {{}, {1}, {7}, {3, 5}, {2, 3, 17}, {1031}};
  const OpId op = c.op;
  for (const Shape& s : shapes) {
    const uint64_t seed = r(), offset = integer(r, 0, 1000);
    Trial t;
    std::ostringstream w;
    w << op_name(op) << "(" << s << ", " << dtype_name(dt) << ", seed " << seed << ", offset "
      << offset << ")";
    t.what = w.str();
    const int64_t lo = is_floating(dt) && dt != kFloat32 && dt != kFloat64 ? -7 : -1000;
    const int64_t hi = is_floating(dt) && dt != kFloat32 && dt != kFloat64 ? 50 : 1000003;
    t.call = [op, s, dt, seed, offset, lo, hi](const std::vector<Tensor>&, Device dev) {
      Generator g(seed);
      g.set_offset(offset);
      const TensorOptions o = TensorOptions(dt).device(dev);
      if (op == OpId::rand) return rand(s, o, &g);
      if (op == OpId::randn) return randn(s, o, &g);
      return randint(lo, hi, s, o, &g);
    };
    t.expect.shape = s;
    t.expect.dtype = dt;
    for (int64_t i = 0; i < numel_of(s); ++i) {
      const uint64_t u = static_cast<uint64_t>(i);
      if (op == OpId::rand) {
        t.expect.v.push_back(stream_uniform(seed, offset, u));
      } else if (op == OpId::randn) {
        t.expect.v.push_back(dt == kFloat64 ? stream_normal(seed, offset, u)
                                            : stream_normal_f32(seed, offset, u));
        t.expect.scale.push_back(1);  // values near 0 are as accurate as values near 1
      } else {
        const uint64_t range = static_cast<uint64_t>(hi - lo);
        t.expect.v.push_back(
            static_cast<double>(lo + static_cast<int64_t>(stream_bits(seed, offset, u) % range)));
      }
    }
    // Draws agree bitwise across devices, except float64 randn: it computes in double with
    // each device's own log/sin/cos, which may differ in the last bits.
    t.expect.cuda_rtol = op == OpId::randn && dt == kFloat64 ? 1e-14 : 0;
    out.push_back(std::move(t));
  }
}

void to_device_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  const std::vector<ShapeLayout> cases = {{{}, Layout::Contiguous},
                                          {{7}, Layout::Strided},
                                          {{3, 5}, Layout::Transposed},
                                          {{2, 3, 17}, Layout::Expanded}};
  for (const ShapeLayout& sl : cases) {
    for (const bool to_host : {true, false}) {
      Trial t;
      Vec x;
      t.inputs.push_back(make_input(sl.shape, sl.layout, dt, c.domain, r, x));
      t.what = std::string("to_device(") + t.inputs[0].str() + (to_host ? ", cpu)" : ", dev)");
      t.call = [to_host](const std::vector<Tensor>& in, Device dev) {
        return to_device(in[0], to_host ? Device::cpu() : dev);
      };
      t.expect.shape = sl.shape;
      t.expect.dtype = dt;
      t.expect.v = x;
      t.expect.on_host = to_host;
      out.push_back(std::move(t));
    }
  }
}

}  // namespace ember::test::optable
