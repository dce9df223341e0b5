#pragma once
// Helpers for the nn tests: float64 host data, error capture and gradcheck with a report.
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/error.h"
#include "core/host_values.h"
#include "test_util.h"

namespace ember::nntest {

using Vec = std::vector<double>;

// The message of the ember::Error `f` throws; a failure (and "") if it throws nothing or
// something else.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a non-ember exception: " << e.what());
    return "";
  }
  FAIL_CHECK("did not throw");
  return "";
}

inline Vec uniform_values(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// A float64 CPU tensor of random values in [lo, hi).
inline Tensor f64(const Shape& s, uint32_t seed, double lo = -1, double hi = 1) {
  return test::make(uniform_values(static_cast<size_t>(numel_of(s)), lo, hi, seed), s, kFloat64);
}
inline Tensor f64v(const Vec& v, const Shape& s) { return test::make(v, s, kFloat64); }
inline Tensor i64(const std::vector<int64_t>& v, const Shape& s) {
  return test::make(Vec(v.begin(), v.end()), s, kInt64);
}

inline bool close(double a, double b, double rtol, double atol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::fabs(a - b) <= atol + rtol * std::fabs(b);
}

}  // namespace ember::nntest

// Every element of tensor `t` within tolerance of the reference vector `ref`.
#define CHECK_VALUES(t, ref, rtol, atol)                                           \
  do {                                                                             \
    const std::vector<double> got_ = ::ember::test::read(t);                       \
    const std::vector<double>& ref_ = (ref);                                       \
    REQUIRE(got_.size() == ref_.size());                                           \
    for (size_t i_ = 0; i_ < got_.size(); ++i_) {                                  \
      INFO("element " << i_ << ": got " << got_[i_] << ", expected " << ref_[i_]); \
      CHECK(::ember::nntest::close(got_[i_], ref_[i_], rtol, atol));               \
    }                                                                              \
  } while (0)

// gradcheck(fn, inputs) with the report shown on failure.
#define CHECK_GRADCHECK(fn, inputs)                                              \
  do {                                                                           \
    const std::string report_ = ::ember::autograd::gradcheck_report(fn, inputs); \
    INFO(report_);                                                               \
    CHECK(report_.empty());                                                      \
  } while (0)

#define CHECK_ERROR(expr, matcher) \
  CHECK_THAT(::ember::nntest::error_of([&] { (void)(expr); }), matcher)
