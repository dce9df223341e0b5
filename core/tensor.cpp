#include "core/tensor.h"

#include <cstring>

#include "core/cuda_runtime.h"
#include "core/dispatch.h"
#include "core/ops.h"
#include "core/trace_hooks.h"

namespace ember {

namespace detail {
thread_local const TraceHooks* t_trace_hooks = nullptr;
}

void note_host_read(const Tensor& t, const char* what, const std::source_location& where) {
  const TraceHooks* h = detail::t_trace_hooks;
  if (h && h->on_host_read) h->on_host_read(t, what, where);
}

bool TensorImpl::is_contiguous() const {
  int64_t expected = 1;
  for (int i = sizes.size() - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

void Tensor::throw_undefined(const char* accessor) {
  EMBER_FAIL("Tensor::", accessor,
             ": undefined tensor (a default-constructed Tensor holds no data)");
}

Tensor make_empty(const Shape& shape, DType dtype, Device device, const char* op) {
  const size_t nbytes = static_cast<size_t>(checked_nbytes(shape, element_size(dtype), op));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nbytes, device, allocator_for(device));
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  Tensor t(std::move(impl));
  if (detail::t_trace_hooks && detail::t_trace_hooks->on_new_tensor)
    detail::t_trace_hooks->on_new_tensor(t);
  return t;
}

namespace {
template <class T>
void store_as(void* dst, DType dtype, T v) {
  visit_dtype(dtype, [&](auto tag) {
    using U = typename decltype(tag)::type;
    if constexpr (std::is_same_v<U, Half> || std::is_same_v<U, BFloat16>) {
      *static_cast<U*>(dst) = U(static_cast<float>(v));
    } else {
      *static_cast<U*>(dst) = static_cast<U>(v);
    }
  });
}
}  // namespace

Tensor wrap_scalar(const Scalar& v, DType dtype) {
  Tensor t = make_empty({}, dtype, Device::cpu());
  if (v.is_floating())
    store_as(t.raw_data(), dtype, v.to_double());
  else
    store_as(t.raw_data(), dtype, v.to_int());
  t.impl()->wrapped_number = true;
  if (detail::t_trace_hooks && detail::t_trace_hooks->on_host_data)
    detail::t_trace_hooks->on_host_data(t);
  return t;
}

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

namespace {
// Reads element 0 of `t` (one element, any device) into host bytes.
void read_one(const Tensor& t, void* dst) {
  EMBER_CHECK(t.defined(), "item: undefined tensor");
  EMBER_CHECK(t.numel() == 1, "item: a tensor with ", t.numel(), " elements (shape ", t.sizes(),
              ") cannot be converted to a scalar");
  if (t.device().is_cpu()) {
    std::memcpy(dst, t.raw_data(), t.element_size());
    return;
  }
  const Storage& st = *t.impl()->storage;
  const PendingHostRead& p = st.pending_read;
  if (p.source && t.impl()->offset == 0 && st.version == p.version &&
      p.source->read(p.tag, dst, static_cast<size_t>(t.element_size())))
    return;
  cuda::copy_device_to_host(dst, t.raw_data(), t.element_size(), t.device().index);
}

template <class T>
T convert_from(const void* src, DType dtype) {
  return visit_dtype(dtype, [&](auto tag) -> T {
    using U = typename decltype(tag)::type;
    const U v = *static_cast<const U*>(src);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return T(static_cast<float>(v));
    } else if constexpr (std::is_same_v<U, Half> || std::is_same_v<U, BFloat16>) {
      return static_cast<T>(static_cast<float>(v));
    } else {
      return static_cast<T>(v);
    }
  });
}
}  // namespace

template <class T>
T Tensor::item(std::source_location where) const {
  if (detail::t_trace_hooks) note_host_read(*this, "item", where);
  alignas(8) char buf[8];
  read_one(*this, buf);
  return convert_from<T>(buf, dtype());
}

Scalar Tensor::item(std::source_location where) const {
  if (detail::t_trace_hooks) note_host_read(*this, "item", where);
  alignas(8) char buf[8];
  read_one(*this, buf);
  if (is_floating(dtype())) return Scalar(convert_from<double>(buf, dtype()));
  if (dtype() == kBool) return Scalar(convert_from<bool>(buf, dtype()));
  return Scalar(convert_from<int64_t>(buf, dtype()));
}

template <class T>
std::vector<T> Tensor::to_vector(std::source_location where) const {
  if (detail::t_trace_hooks) note_host_read(*this, "to_vector", where);
  Tensor h = *this;
  if (h.dtype() != DTypeOf<T>::value) h = h.to(DTypeOf<T>::value);
  if (!h.device().is_cpu()) h = h.cpu();
  if (!h.is_contiguous()) h = h.contiguous();
  const T* p = static_cast<const T*>(h.raw_data());
  return std::vector<T>(p, p + h.numel());
}

#define EMBER_INSTANTIATE(T)                              \
  template T Tensor::item<T>(std::source_location) const; \
  template std::vector<T> Tensor::to_vector<T>(std::source_location) const;
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
EMBER_INSTANTIATE(int32_t)
EMBER_INSTANTIATE(int64_t)
EMBER_INSTANTIATE(Half)
EMBER_INSTANTIATE(BFloat16)
#undef EMBER_INSTANTIATE
template bool Tensor::item<bool>(std::source_location) const;
template <>
std::vector<bool> Tensor::to_vector<bool>(std::source_location where) const {
  if (detail::t_trace_hooks) note_host_read(*this, "to_vector", where);
  Tensor h = dtype() == kBool ? *this : ne(*this, wrap_scalar(0, dtype()));
  h = h.cpu().contiguous();
  const bool* p = static_cast<const bool*>(h.raw_data());
  return std::vector<bool>(p, p + h.numel());
}

Tensor Tensor::to(Device d, std::source_location where) const {
  EMBER_CHECK(defined(), "to: undefined tensor");
  if (d == device()) return *this;
  if (detail::t_trace_hooks && d.is_cpu()) note_host_read(*this, "to(cpu)", where);
  return to_device(*this, d);
}

Tensor Tensor::to(DType t) const {
  EMBER_CHECK(defined(), "to: undefined tensor");
  if (t == dtype()) return *this;
  return cast(*this, t);
}

Tensor Tensor::contiguous() const {
  EMBER_CHECK(defined(), "contiguous: undefined tensor");
  return is_contiguous() ? *this : cast(*this, dtype());
}

Tensor Tensor::clone() const {
  EMBER_CHECK(defined(), "clone: undefined tensor");
  return cast(*this, dtype());
}

// ---- views ------------------------------------------------------------------------------

namespace {
// Resolves one -1 in a requested shape against `numel`.
Shape infer_size(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int infer = -1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      EMBER_CHECK(infer < 0, op, ": only one dim can be -1, got shape ", shape);
      infer = i;
      out[i] = 1;  // stands in while the known sizes are multiplied
    } else {
      EMBER_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", shape);
    }
  }
  const int64_t known = checked_numel(out, op);
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape,
                " is invalid for input of ", numel, " elements");
    out[infer] = numel / known;
  }
  EMBER_CHECK(checked_numel(out, op) == numel, op, ": shape ", shape, " is invalid for input of ",
              numel, " elements");
  return out;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Attrs a;
  a.shape = infer_size(shape, numel(), "view");
  return dispatch(OpId::view, {*this}, a);
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape s = infer_size(shape, numel(), "reshape");
  Attrs a;
  a.shape = s;
  // A view when the strides allow it, else a copy (like PyTorch).
  Strides unused;
  if (compute_view_strides(sizes(), strides(), s, unused)) return dispatch(OpId::view, {*this}, a);
  return dispatch(OpId::view, {contiguous()}, a);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  EMBER_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape;
  for (int i = 0; i < s; ++i) shape.push_back(size(i));
  int64_t n = 1;
  for (int i = s; i <= e; ++i) n *= size(i);
  shape.push_back(n);
  for (int i = e + 1; i < dim(); ++i) shape.push_back(size(i));
  return reshape(shape);
}

Tensor Tensor::permute(const Dims& order) const {
  Attrs a;
  for (int64_t d : order) a.dims.push_back(wrap_dim(d, dim(), "permute"));
  return dispatch(OpId::permute, {*this}, a);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() < 2 && dim() > 0) {
    wrap_dim(d0, dim(), "transpose");
    wrap_dim(d1, dim(), "transpose");
    return *this;
  }
  const int a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
  Dims order;
  for (int i = 0; i < dim(); ++i) order.push_back(i);
  std::swap(order[a], order[b]);
  return permute(order);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dims, got shape ", sizes());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  const int dd = wrap_dim(d, dim(), "slice");
  EMBER_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = size(dd);
  // Python-style clamping of the bounds.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Attrs a;
  a.dim = dd;
  a.start = start;
  a.end = end;
  a.step = step;
  return dispatch(OpId::slice, {*this}, a);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  const int dd = wrap_dim(d, dim(), "narrow");
  const int64_t n = size(dd);
  const int64_t s = start < 0 ? start + n : start;
  EMBER_CHECK(s >= 0 && length >= 0 && s + length <= n, "narrow: start ", start, " and length ",
              length, " are out of range for dim ", dd, " of size ", n);
  start = s;
  Attrs a;
  a.dim = dd;
  a.start = start;
  a.end = start + length;
  return dispatch(OpId::slice, {*this}, a);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  EMBER_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  const int dd = wrap_dim(d, dim(), "select");
  const int64_t n = size(dd);
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", dd,
              " of size ", n);
  if (index < 0) index += n;
  Shape s = sizes();
  s.erase(dd);
  return narrow(dd, index, 1).view(s);
}

Tensor Tensor::expand(const Shape& shape) const {
  Attrs a;
  a.shape = shape;
  return dispatch(OpId::expand, {*this}, a);
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t x : sizes())
    if (x != 1) s.push_back(x);
  return view(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  const int dd = wrap_dim(d, dim(), "squeeze");
  if (size(dd) != 1) return *this;
  Shape s = sizes();
  s.erase(dd);
  return view(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  EMBER_CHECK(dim() < kMaxDims, "unsqueeze: tensor of shape ", sizes(), " already has ", dim(),
              " dims, the most supported is ", kMaxDims);
  const int dd = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = sizes();
  s.insert(dd, 1);
  return view(s);
}

// ---- in place ---------------------------------------------------------------------------

Tensor& Tensor::copy_(const Tensor& src) {
  EMBER_CHECK(defined() && src.defined(), "copy_: undefined tensor");
  EMBER_CHECK(broadcast_shapes(sizes(), src.sizes(), "copy_") == sizes(), "copy_: source of shape ",
              src.sizes(), " cannot be broadcast to destination shape ", sizes());
  Tensor s = src.sizes() == sizes() ? src : src.expand(sizes());
  if (s.device() != device() && !(s.device().is_cpu() && s.dim() == 0)) s = s.to(device());
  Attrs a;
  a.dtype = dtype();
  dispatch(OpId::cast, {s}, a, this);
  return *this;
}

Tensor& Tensor::fill_(const Scalar& v) {
  EMBER_CHECK(defined(), "fill_: undefined tensor");
  Attrs a;
  a.value = v;
  dispatch(OpId::fill, {}, a, this);
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

namespace {
// Same-category casts and widening into floats are allowed in place; float into int or
// anything into bool (but bool) is not, as in PyTorch.
bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

Tensor& inplace_binary(Tensor& self, OpId op, const Tensor& other, const char* name) {
  EMBER_CHECK(self.defined() && other.defined(), name, ": undefined tensor");
  const Tensor operands[2] = {self, other};
  const DType rt = result_type(operands);
  EMBER_CHECK(can_cast(rt, self.dtype()), name, ": result type ", dtype_name(rt),
              " cannot be cast to the destination dtype ", dtype_name(self.dtype()));
  if (rt != self.dtype()) {
    // Compute in the wider type, then write back.
    const Tensor r = op == OpId::add ? add(self, other) : mul(self, other);
    self.copy_(r);
    return self;
  }
  const Tensor o = other.dtype() == rt ? other : other.to(rt);
  dispatch(op, {self, o}, {}, &self);
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other) {
  return inplace_binary(*this, OpId::add, other, "add_");
}
Tensor& Tensor::add_(const Scalar& other) {
  return inplace_binary(*this, OpId::add, wrap_scalar(other, other.natural_dtype()), "add_");
}
Tensor& Tensor::mul_(const Tensor& other) {
  return inplace_binary(*this, OpId::mul, other, "mul_");
}
Tensor& Tensor::mul_(const Scalar& other) {
  return inplace_binary(*this, OpId::mul, wrap_scalar(other, other.natural_dtype()), "mul_");
}

// ---- methods that forward to ops ----------------------------------------------------------

Tensor Tensor::sum() const { return ember::sum(*this); }
Tensor Tensor::sum(const Dims& dims, bool keepdim) const {
  return ember::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return ember::mean(*this); }
Tensor Tensor::mean(const Dims& dims, bool keepdim) const {
  return ember::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const { return ember::max(*this); }
Tensor Tensor::min() const { return ember::min(*this); }
Tensor Tensor::argmax() const { return ember::argmax(*this); }
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return ember::argmax(*this, d, keepdim); }
Tensor Tensor::exp() const { return ember::exp(*this); }
Tensor Tensor::log() const { return ember::log(*this); }
Tensor Tensor::relu() const { return ember::relu(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return ember::matmul(*this, other); }

}  // namespace ember
