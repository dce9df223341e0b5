// The sweep's harness: random values, layouts, comparisons and dtype rules.
#include "core/op_table_harness.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/factory.h"

namespace ember::test::optable {

// ---- random values ------------------------------------------------------------------------

double uniform(Rng& r, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(r);
}
int64_t integer(Rng& r, int64_t lo, int64_t hi_inclusive) {
  return std::uniform_int_distribution<int64_t>(lo, hi_inclusive)(r);
}

// All values drawn here are far from the 16-bit subnormal and overflow ranges.
double quantize8(double x) {
  if (x == 0) return 0;
  int e;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

double draw(Domain d, DType t, Rng& r) {
  if (t == kBool) return static_cast<double>(integer(r, 0, 1));
  if (is_integral(t)) {
    switch (d) {
      case Domain::Any: {
        const int64_t v = integer(r, 1, 9);
        return static_cast<double>(integer(r, 0, 1) ? v : -v);
      }
      case Domain::Positive:
        return static_cast<double>(integer(r, 1, 20));
      case Domain::PowBase:
        return static_cast<double>(integer(r, 1, 4));
      case Domain::PowExp:
        return static_cast<double>(integer(r, -2, 3));
      case Domain::Discrete:
        return static_cast<double>(integer(r, -3, 3));
      case Domain::Wide:
        return static_cast<double>(integer(r, -100, 100));
    }
  }
  double x = 0;
  switch (d) {
    case Domain::Any:
      x = uniform(r, 0.1, 2.0) * (integer(r, 0, 1) ? 1 : -1);
      break;
    case Domain::Positive:
      x = uniform(r, 0.1, 3.0);
      break;
    case Domain::PowBase:
      x = uniform(r, 0.25, 2.5);
      break;
    case Domain::PowExp:
      x = uniform(r, -2.0, 2.0);
      break;
    case Domain::Discrete:
      return static_cast<double>(integer(r, -8, 8)) / 4;  // ties on purpose
    case Domain::Wide: {
      x = integer(r, 0, 4) == 0 ? 0.0 : uniform(r, -20.0, 20.0);
      return quantize8(x);
    }
  }
  if (t == kFloat16 || t == kBFloat16) return quantize8(x);
  if (t == kFloat32) return static_cast<float>(x);
  return x;
}

Vec draws(int64_t n, Domain d, DType t, Rng& r) {
  Vec v(static_cast<size_t>(n));
  for (double& x : v) x = draw(d, t, r);
  return v;
}

// ---- shapes, broadcasting and layouts -----------------------------------------------------

Shape broadcast(const Shape& a, const Shape& b) {
  const int n = std::max(a.size(), b.size());
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    const int ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Vec broadcast_values(const Vec& v, const Shape& from, const Shape& to) {
  Vec out(static_cast<size_t>(numel_of(to)));
  const int lead = to.size() - from.size();
  for (size_t i = 0; i < out.size(); ++i) {
    const std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), to);
    std::vector<int64_t> src(from.size());
    for (int d = 0; d < from.size(); ++d) src[d] = from[d] == 1 ? 0 : idx[d + lead];
    out[i] = v[static_cast<size_t>(ravel(src, from))];
  }
  return out;
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::Strided:
      return "step-2 slice";
    case Layout::Expanded:
      return "expanded";
  }
  return "?";
}

Tensor Input::make(Device dev) const {
  const Tensor b = test::make(base, base_shape, dtype, dev);
  switch (layout) {
    case Layout::Contiguous:
      return b;
    case Layout::Transposed:
      return b.transpose(-1, -2);
    case Layout::Strided:
      return b.slice(-1, 0, b.size(-1), 2);
    case Layout::Expanded:
      return b.expand(shape);
  }
  return b;
}

bool Input::must_be_strided() const {
  const int nd = shape.size();
  switch (layout) {
    case Layout::Contiguous:
      return false;
    case Layout::Transposed:
      return nd >= 2 && shape[nd - 1] > 1 && shape[nd - 2] > 1;
    case Layout::Strided:
      return nd >= 1 && shape[nd - 1] > 1;
    case Layout::Expanded:
      return numel_of(shape) > numel_of(base_shape);
  }
  return false;
}

std::string Input::str() const {
  std::ostringstream os;
  os << dtype_name(dtype) << shape.str() << ' ' << layout_name(layout);
  return os.str();
}

Input make_input(const Shape& shape, Layout layout, DType dtype, Domain dom, Rng& r, Vec& logical) {
  return make_input(
      shape, layout, dtype, [&](int64_t n) { return draws(n, dom, dtype, r); }, logical);
}

Input int64_input(const Vec& v, const Shape& s) {
  Input in;
  in.base = v;
  in.base_shape = in.shape = s;
  in.dtype = kInt64;
  return in;
}

// ---- comparisons --------------------------------------------------------------------------

Tol tol_for(DType t) {
  switch (t) {
    case DType::Float64:
      return {1e-12, 1e-13};
    case DType::Float32:
      return {1e-5, 1e-6};
    case DType::Float16:
      return {1e-3, 1e-5};
    case DType::BFloat16:
      return {1e-2, 1e-4};
    default:
      return {0, 0};
  }
}

namespace {
bool close(double got, double want, double scale, Tol tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol.rtol * scale + tol.atol;
}
}  // namespace

std::string diff(const Tensor& got, Device dev, DType dtype, const Shape& shape, const Vec& want,
                 const Vec& scale, Tol tol) {
  std::ostringstream os;
  if (!got.defined()) return "result is an undefined tensor";
  if (got.device() != dev)
    os << "device " << got.device().str() << ", expected " << dev.str() << "; ";
  if (got.dtype() != dtype)
    os << "dtype " << dtype_name(got.dtype()) << ", expected " << dtype_name(dtype) << "; ";
  if (got.sizes() != shape) {
    os << "shape " << got.sizes() << ", expected " << shape;
    return os.str();
  }
  const Vec v = read(got);
  int bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double s = std::max(std::fabs(want[i]), scale.empty() ? 0.0 : scale[i]);
    if (close(v[i], want[i], s, tol)) continue;
    if (bad++ < 4) {
      const std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), shape);
      os.precision(10);
      os << "at " << test::join(Vec(idx.begin(), idx.end())) << ": got " << v[i] << ", expected "
         << want[i] << "; ";
    }
  }
  if (bad)
    os << bad << " of " << v.size() << " elements differ (rtol " << tol.rtol << ", atol "
       << tol.atol << ")";
  return os.str();
}

// ---- dtype rules --------------------------------------------------------------------------

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == kBool) return b;
  if (b == kBool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;  // any float beats any integer
  if (!fa) return kInt64;           // int32 with int64
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;  // float32 with a 16-bit float, and float16 with bfloat16
}

namespace {
int category(DType t) { return t == kBool ? 0 : is_floating(t) ? 2 : 1; }
}  // namespace

DType result_type2(DType a, bool a_zero_dim, DType b, bool b_zero_dim) {
  if (a_zero_dim == b_zero_dim) return promote(a, b);
  const DType dimmed = a_zero_dim ? b : a, zero = a_zero_dim ? a : b;
  return category(zero) > category(dimmed) ? promote(dimmed, zero) : dimmed;
}

DType out_dtype(OpId op, DType compute) {
  switch (op_info(op).rule) {
    case OutRule::Same:
      return compute;
    case OutRule::IntToFloat:
      return is_floating(compute) ? compute : kFloat32;
    case OutRule::ToBool:
      return kBool;
    case OutRule::ToInt64:
      return is_floating(compute) ? compute : kInt64;
    case OutRule::Index:
      return kInt64;
    case OutRule::Cast:
    case OutRule::Select:
      return compute;
  }
  return compute;
}

DType compute_dtype(OpId op, DType promoted) {
  return op_info(op).rule == OutRule::IntToFloat && !is_floating(promoted) ? kFloat32 : promoted;
}

}  // namespace ember::test::optable
