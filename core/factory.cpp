#include "core/factory.h"

#include <cmath>
#include <cstring>

#include "core/dispatch.h"
#include "core/philox.h"
#include "core/trace_hooks.h"

namespace ember {

Tensor empty(const Shape& shape, TensorOptions o) {
  return make_empty(shape, o.dtype_, o.device_, "empty");
}

namespace {
// `op` names the public factory in a bad shape's error.
Tensor filled(const Shape& shape, const Scalar& value, TensorOptions o, const char* op) {
  Tensor t = make_empty(shape, o.dtype_, o.device_, op);
  t.fill_(value);
  return t;
}
}  // namespace

Tensor full(const Shape& shape, const Scalar& value, TensorOptions o) {
  return filled(shape, value, o, "full");
}
Tensor zeros(const Shape& shape, TensorOptions o) { return filled(shape, 0, o, "zeros"); }
Tensor ones(const Shape& shape, TensorOptions o) { return filled(shape, 1, o, "ones"); }

Tensor empty_like(const Tensor& t) { return make_empty(t.sizes(), t.dtype(), t.device()); }
Tensor zeros_like(const Tensor& t) {
  return zeros(t.sizes(), TensorOptions(t.dtype()).device(t.device()));
}
Tensor ones_like(const Tensor& t) {
  return ones(t.sizes(), TensorOptions(t.dtype()).device(t.device()));
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions o) {
  const double s = start.to_double(), e = end.to_double(), st = step.to_double();
  EMBER_CHECK(st != 0 && std::isfinite(s) && std::isfinite(e) && std::isfinite(st),
              "arange: start ", s, ", end ", e, " and step ", st, " must be finite, step non-zero");
  EMBER_CHECK((e - s) * st >= 0, "arange: step ", st, " does not lead from ", s, " to ", e);
  const double count = std::ceil((e - s) / st);
  // 2^63 is exact as a double; a count at or past it has no int64 value.
  EMBER_CHECK(count < 9223372036854775808.0, "arange: start ", s, ", end ", e, " and step ", st,
              " give ", count, " elements, more than fit in int64");
  const int64_t n = static_cast<int64_t>(count);
  Attrs a;
  a.shape = {n};
  a.dtype = o.dtype_;
  a.device = o.device_;
  a.range_start = s;
  a.range_end = e;
  a.range_step = st;
  return dispatch(OpId::arange, {}, a);
}

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step) {
  const bool ints = !start.is_floating() && !end.is_floating() && !step.is_floating();
  return arange(start, end, step, TensorOptions(ints ? kInt64 : kFloat32));
}
Tensor arange(const Scalar& end, TensorOptions o) { return arange(0, end, 1, o); }
Tensor arange(const Scalar& end) { return arange(0, end, 1); }

Tensor from_blob_copy(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t = make_empty(shape, dtype, Device::cpu(), "from_blob_copy");
  if (t.nbytes() > 0) std::memcpy(t.raw_data(), data, static_cast<size_t>(t.nbytes()));
  if (const TraceHooks* h = trace_hooks(); h && h->on_host_data) h->on_host_data(t);
  return device.is_cpu() ? t : t.to(device);
}

template <>
Tensor from_vector<bool>(const std::vector<bool>& data, const Shape& shape, TensorOptions opts) {
  EMBER_CHECK(static_cast<int64_t>(data.size()) == checked_numel(shape, "from_vector"),
              "from_vector: ", data.size(), " values for shape ", shape);
  std::vector<uint8_t> bytes(data.begin(), data.end());
  Tensor host = from_blob_copy(bytes.data(), shape, kBool, Device::cpu());
  if (opts.dtype_ != kBool) host = host.to(opts.dtype_);
  return opts.device_.is_cpu() ? host : host.to(opts.device_);
}

Tensor scalar_tensor(const Scalar& v, TensorOptions o) { return full({}, v, o); }

namespace {
Tensor draw(OpId op, const Shape& shape, TensorOptions o, Generator* gen, Attrs a = {}) {
  Generator& g = gen ? *gen : default_generator();
  a.shape = shape;
  a.dtype = o.dtype_;
  a.device = o.device_;
  // Validate before reserving counters so a bad call leaves the stream untouched.
  infer_meta(op, {}, a);
  const uint64_t counters = philox::counters_for(static_cast<uint64_t>(numel_of(shape)));
  const Generator::Reservation r = g.reserve(counters);
  a.seed = r.seed;
  a.offset = r.offset;
  detail::t_draws.last_from_default = &g == &default_generator();
  if (detail::t_draws.last_from_default) detail::t_draws.default_counters += counters;
  return dispatch(op, {}, a);
}
}  // namespace

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) {
  return draw(OpId::rand, shape, o, gen);
}
Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) {
  return draw(OpId::randn, shape, o, gen);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o, Generator* gen) {
  Attrs a;
  a.lo = low;
  a.hi = high;
  return draw(OpId::randint, shape, o, gen, a);
}

}  // namespace ember
