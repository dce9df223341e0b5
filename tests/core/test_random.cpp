// Philox4x32-10 against the published known answers, the statistics of rand/randn/randint,
// reproducibility and generator offsets, and identical streams on CPU and CUDA.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "core/philox.h"
#include "test_util.h"

using namespace ember;

namespace {

using Vec = std::vector<double>;

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.is_cuda() ? t.cpu() : t;
  REQUIRE(h.is_contiguous());
  const auto* p = static_cast<const uint8_t*>(h.raw_data());
  return std::vector<uint8_t>(p, p + h.nbytes());
}

double mean_of(const Vec& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double var_of(const Vec& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (v.size() - 1);
}

// Pearson's statistic of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& counts, const Vec& probs, int64_t n) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// A 64-bit Philox output as Ember's stream assembles it: words (0,1) for even elements.
double u53(uint32_t lo, uint32_t hi) {
  const uint64_t bits = (uint64_t(hi) << 32) | lo;
  return std::ldexp(static_cast<double>(bits >> 11), -53);
}

}  // namespace

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[random]") {
  struct Kat {
    philox::U32x4 ctr;
    uint32_t k0, k1;
    uint32_t want[4];
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const philox::U32x4 r = philox::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) {
      INFO("counter word " << k.ctr.v[0] << ", output word " << i);
      CHECK(r.v[i] == k.want[i]);
    }
  }
  // The (64-bit counter, 64-bit seed) form puts the counter in words 0-1 and the seed in the key.
  const philox::U32x4 z = philox::philox4x32_10(uint64_t{0}, uint64_t{0});
  CHECK(z.v[0] == 0x6627e8d5u);
  CHECK(z.v[3] == 0x9b00dbd8u);
  const philox::U32x4 pi =
      philox::philox4x32_10(philox::U32x4{{0x243f6a88, 0x85a308d3, 0, 0}}, 0xa4093822, 0x299f31d0);
  const philox::U32x4 pi64 = philox::philox4x32_10(0x85a308d3243f6a88ull, 0x299f31d0a4093822ull);
  for (int i = 0; i < 4; ++i) CHECK(pi.v[i] == pi64.v[i]);
}

TEST_CASE("rand's first draws are the known Philox words", "[random]") {
  // Seed 0, offset 0: counter 0 gives the first known-answer block; elements 0 and 1 are its
  // two 64-bit halves with 53 bits kept.
  Generator g(0);
  const Vec v = test::read(rand({3}, kFloat64, &g));
  CHECK(v[0] == u53(0x6627e8d5, 0xe169c58d));
  CHECK(v[1] == u53(0xbc57ac4c, 0x9b00dbd8));
  const philox::U32x4 c1 = philox::philox4x32_10(philox::U32x4{{1, 0, 0, 0}}, 0, 0);
  CHECK(v[2] == u53(c1.v[0], c1.v[1]));
  CHECK(g.offset() == 2);  // ceil(3 / 2) counters
}

TEST_CASE("rand is uniform on 0 to 1 (excluding 1) in every float dtype", "[random]") {
  for (const DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO("dtype " << dtype_name(dt));
    Generator g(1234 + static_cast<int>(dt));
    const int64_t n = 100003;
    const Tensor t = rand({n}, dt, &g);
    REQUIRE(t.dtype() == dt);
    REQUIRE(t.sizes() == Shape{n});
    const Vec v = test::read(t);
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
    CHECK(std::fabs(mean_of(v) - 0.5) < 0.01);
    CHECK(std::fabs(var_of(v) - 1.0 / 12) < 0.01);
    // 16 equal buckets (edges exact in every dtype); df 15 has mean 15 and sd ~5.5, so 70
    // fails only on a real bias. bfloat16's coarse grid shifts a little mass at binade edges.
    std::vector<int64_t> counts(16, 0);
    for (double x : v) ++counts[std::min<size_t>(15, static_cast<size_t>(x * 16))];
    const double chi = chi_square(counts, Vec(16, 1.0 / 16), n);
    CHECK(chi < (dt == kBFloat16 ? 100.0 : 70.0));
  }
}

TEST_CASE("randn is standard normal", "[random]") {
  for (const DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO("dtype " << dtype_name(dt));
    Generator g(99 + static_cast<int>(dt));
    const int64_t n = 200001;
    const Vec v = test::read(randn({n}, dt, &g));
    const double m = mean_of(v), var = var_of(v);
    CHECK(std::fabs(m) < 0.015);
    CHECK(std::fabs(var - 1) < 0.03);
    double skew = 0, kurt = 0;
    for (double x : v) {
      const double z = (x - m) / std::sqrt(var);
      skew += z * z * z;
      kurt += z * z * z * z;
    }
    CHECK(std::fabs(skew / n) < 0.05);
    CHECK(std::fabs(kurt / n - 3) < 0.1);
    // Buckets between normal quantiles, each ~1/10 of the mass.
    const Vec edges = {-1.2816, -0.8416, -0.5244, -0.2533, 0, 0.2533, 0.5244, 0.8416, 1.2816};
    std::vector<int64_t> counts(edges.size() + 1, 0);
    Vec probs;
    double prev = 0;
    for (double e : edges) {
      probs.push_back(normal_cdf(e) - prev);
      prev = normal_cdf(e);
    }
    probs.push_back(1 - prev);
    for (double x : v) ++counts[std::upper_bound(edges.begin(), edges.end(), x) - edges.begin()];
    CHECK(chi_square(counts, probs, n) < (dt == kFloat32 || dt == kFloat64 ? 60.0 : 150.0));
    // The tails exist (Box-Muller reaches beyond 4 sigma at this n with high probability).
    const double far = static_cast<double>(
        std::count_if(v.begin(), v.end(), [](double x) { return std::fabs(x) > 3; }));
    CHECK(std::fabs(far / n - 0.0027) < 0.001);
  }
}

TEST_CASE("randint covers low to high-1 uniformly", "[random]") {
  for (const DType dt : {kInt64, kInt32, kFloat32}) {
    INFO("dtype " << dtype_name(dt));
    Generator g(5 + static_cast<int>(dt));
    const int64_t lo = -3, hi = 14, n = 50001;
    const Tensor t = randint(lo, hi, {n}, dt, &g);
    REQUIRE(t.dtype() == dt);
    const Vec v = test::read(t);
    std::vector<int64_t> counts(hi - lo, 0);
    bool in_range = true, integral = true;
    for (double x : v) {
      in_range = in_range && x >= lo && x < hi;
      integral = integral && x == std::floor(x);
      if (x >= lo && x < hi) ++counts[static_cast<size_t>(x - lo)];
    }
    CHECK(in_range);
    CHECK(integral);
    for (int64_t c : counts) CHECK(c > 0);
    CHECK(chi_square(counts, Vec(hi - lo, 1.0 / (hi - lo)), n) < 60);
  }
  CHECK(randint(0, 10, {4}).dtype() == kInt64);  // default dtype, like PyTorch
  const Vec big = test::read(randint(int64_t{1} << 40, (int64_t{1} << 40) + 3, {1000}));
  CHECK(*std::min_element(big.begin(), big.end()) >= std::ldexp(1.0, 40));
  CHECK(*std::max_element(big.begin(), big.end()) < std::ldexp(1.0, 40) + 3);
}

TEST_CASE("manual_seed makes draws reproducible", "[random]") {
  manual_seed(123);
  const Tensor a = randn({1000});
  const Tensor a2 = rand({17});
  const Tensor a3 = randint(0, 100, {9});
  manual_seed(123);
  const Tensor b = randn({1000});
  const Tensor b2 = rand({17});
  const Tensor b3 = randint(0, 100, {9});
  CHECK(bytes_of(a) == bytes_of(b));
  CHECK(bytes_of(a2) == bytes_of(b2));
  CHECK(bytes_of(a3) == bytes_of(b3));
  manual_seed(124);
  CHECK(bytes_of(randn({1000})) != bytes_of(a));
  CHECK(default_generator().seed() == 124);
}

TEST_CASE("a per-call generator leaves the global one alone", "[random]") {
  manual_seed(77);
  const uint64_t before = default_generator().offset();
  Generator g(42);
  const Tensor x = randn({10}, {}, &g);
  CHECK(default_generator().offset() == before);
  CHECK(g.offset() == 5);
  // The same seed gives the same stream whether it is the global or a private generator.
  Generator h(42);
  CHECK(bytes_of(randn({10}, {}, &h)) == bytes_of(x));
  manual_seed(42);
  CHECK(bytes_of(randn({10})) == bytes_of(x));
  CHECK(default_generator().offset() == 5);
}

TEST_CASE("generator offsets advance so consecutive draws differ", "[random]") {
  Generator g(2024);
  const Tensor a = rand({7}, kFloat64, &g);
  CHECK(g.offset() == 4);  // ceil(7 / 2)
  const Tensor b = rand({5}, kFloat64, &g);
  CHECK(g.offset() == 7);
  const Vec va = test::read(a), vb = test::read(b);
  CHECK_FALSE(std::equal(vb.begin(), vb.end(), va.begin()));
  // The second draw continues the stream at the new offset.
  Generator h(2024);
  h.set_offset(4);
  CHECK(test::read(rand({5}, kFloat64, &h)) == vb);
  // A draw of n elements is the first n of a longer draw at the same offset.
  Generator k(2024);
  const Vec longer = test::read(rand({12}, kFloat64, &k));
  CHECK(std::equal(va.begin(), va.end(), longer.begin()));
  // An odd-sized draw skips the unused half of its last counter.
  Generator k2(2024);
  CHECK(vb[0] == test::read(rand({16}, kFloat64, &k2))[8]);
  // Consecutive global draws differ too.
  manual_seed(3);
  CHECK(bytes_of(randn({64})) != bytes_of(randn({64})));
  CHECK(bytes_of(randint(0, 1000000, {64})) != bytes_of(randint(0, 1000000, {64})));
}

TEST_CASE("narrower float dtypes draw the same stream, rounded", "[random]") {
  Generator g64(8), g32(8);
  const Vec n64 = test::read(randn({999}, kFloat64, &g64));
  const Vec n32 = test::read(randn({999}, kFloat32, &g32));
  int bad = 0;
  for (size_t i = 0; i < n64.size(); ++i) bad += n32[i] != static_cast<float>(n64[i]);
  CHECK(bad == 0);
  Generator u64(9), u16(9);
  const Vec r64 = test::read(rand({999}, kFloat64, &u64));
  const Vec r16 = test::read(rand({999}, kFloat16, &u16));
  // Each float16 value is the float64 one rounded to the float16 grid (within half an ulp, a
  // hair more for rounding through float32) and kept below 1.
  bad = 0;
  for (size_t i = 0; i < r64.size(); ++i) {
    const double x = r64[i], y = r16[i];
    const double half_ulp =
        x < std::ldexp(1.0, -14) ? std::ldexp(1.0, -25) : std::ldexp(1.0, std::ilogb(x) - 11);
    const bool on_grid = test::round_to(kFloat16, y) == y;
    const bool near = std::fabs(y - x) <= half_ulp * (1 + std::ldexp(1.0, -12)) ||
                      (x >= 1 - std::ldexp(1.0, -12) && y == 1 - std::ldexp(1.0, -11));
    bad += !(on_grid && near && y < 1);
  }
  CHECK(bad == 0);
}

TEST_CASE("CPU and CUDA draw identical numbers", "[random][cuda]") {
  EMBER_REQUIRE_CUDA();
  const std::vector<int64_t> sizes = {1, 2, 3, 7, 1000, 1001, 65537, (1 << 20) + 3};
  for (const int64_t n : sizes) {
    INFO("n = " << n);
    const uint64_t seed = 1000 + n;
    const auto draw = [&](Device d, int which, DType dt) {
      Generator g(seed);
      g.set_offset(11);
      const TensorOptions o = TensorOptions(dt).device(d);
      const Tensor t = which == 0   ? rand({n}, o, &g)
                       : which == 1 ? randint(-5, 1 << 30, {n}, o, &g)
                                    : randn({n}, o, &g);
      CHECK(g.offset() == 11 + (static_cast<uint64_t>(n) + 1) / 2);
      return t;
    };
    for (const DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      INFO("rand " << dtype_name(dt));
      CHECK(bytes_of(draw(Device::cpu(), 0, dt)) == bytes_of(draw(Device::cuda(), 0, dt)));
    }
    for (const DType dt : {kInt64, kInt32}) {
      INFO("randint " << dtype_name(dt));
      CHECK(bytes_of(draw(Device::cpu(), 1, dt)) == bytes_of(draw(Device::cuda(), 1, dt)));
    }
    {
      const Vec c = test::read(draw(Device::cpu(), 2, kFloat32));
      const Vec d = test::read(draw(Device::cuda(), 2, kFloat32));
      int over = 0;
      double worst = 0;
      for (size_t i = 0; i < c.size(); ++i) {
        const float a = static_cast<float>(c[i]);
        const double ulp = std::nextafter(std::fabs(a), INFINITY) - std::fabs(a);
        const double diff = std::fabs(c[i] - d[i]);
        worst = std::max(worst, diff / ulp);
        over += diff > ulp;
      }
      INFO("randn float32: worst difference " << worst << " ulp");
      CHECK(over == 0);
    }
    {
      const Vec c = test::read(draw(Device::cpu(), 2, kFloat64));
      const Vec d = test::read(draw(Device::cuda(), 2, kFloat64));
      double worst = 0;
      for (size_t i = 0; i < c.size(); ++i)
        worst = std::max(worst, std::fabs(c[i] - d[i]) / std::max(1.0, std::fabs(c[i])));
      CHECK(worst < 1e-14);
    }
  }
  // The global generator serves both devices from one stream.
  manual_seed(31);
  const Tensor g1 = randn({1001}, Device::cuda());
  const uint64_t after_cuda = default_generator().offset();
  manual_seed(31);
  const Tensor c1 = randn({1001}, Device::cpu());
  CHECK(default_generator().offset() == after_cuda);
  CHECK(allclose(g1.cpu(), c1, 1e-6, 1e-6));
}
