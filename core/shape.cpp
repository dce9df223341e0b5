#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace ember {

Dims::Dims(std::initializer_list<int64_t> v) {
  EMBER_CHECK(v.size() <= kMaxDims, "Shape: ", v.size(), " dims given, at most ", kMaxDims,
              " are supported");
  for (int64_t x : v) d_[n_++] = x;
}

Dims::Dims(const std::vector<int64_t>& v) {
  EMBER_CHECK(v.size() <= kMaxDims, "Shape: ", v.size(), " dims given, at most ", kMaxDims,
              " are supported");
  for (int64_t x : v) d_[n_++] = x;
}

Dims Dims::filled(int n, int64_t value) {
  Dims d;
  d.resize(n, value);
  return d;
}

void Dims::push_back(int64_t v) {
  EMBER_CHECK(n_ < kMaxDims, "Shape: more than ", kMaxDims, " dims are not supported");
  d_[n_++] = v;
}

void Dims::insert(int pos, int64_t v) {
  EMBER_CHECK(n_ < kMaxDims, "Shape: more than ", kMaxDims, " dims are not supported");
  for (int i = n_; i > pos; --i) d_[i] = d_[i - 1];
  d_[pos] = v;
  ++n_;
}

void Dims::erase(int pos) {
  for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
  --n_;
}

void Dims::resize(int n, int64_t fill) {
  EMBER_CHECK(n >= 0 && n <= kMaxDims, "Shape: ", n, " dims are not supported (at most ", kMaxDims,
              ")");
  for (int i = n_; i < n; ++i) d_[i] = fill;
  n_ = n;
}

std::string Dims::str() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Dims& d) {
  os << '[';
  for (int i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  return os << ']';
}

int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

int64_t checked_numel(const Shape& s, const char* op) {
  // The product of the non-zero sizes must fit too, even when a zero makes the count 0: the
  // contiguous strides (and every offset computed from them) multiply those sizes.
  int64_t nonzero = 1;
  bool empty = false;
  for (int i = 0; i < s.size(); ++i) {
    EMBER_CHECK(s[i] >= 0, op, ": negative size ", s[i], " at dim ", i, " in shape ", s);
    empty = empty || s[i] == 0;
    EMBER_CHECK(!__builtin_mul_overflow(nonzero, std::max<int64_t>(s[i], 1), &nonzero), op,
                ": shape ", s, " has more elements than fit in int64");
  }
  return empty ? 0 : nonzero;
}

int64_t checked_nbytes(const Shape& s, int64_t element_size, const char* op) {
  int64_t bytes = 0;
  EMBER_CHECK(!__builtin_mul_overflow(checked_numel(s, op), element_size, &bytes), op, ": shape ",
              s, " of ", element_size, "-byte elements needs more bytes than fit in int64");
  return bytes;
}

Strides contiguous_strides(const Shape& s) {
  Strides st;
  st.resize(s.size());
  int64_t acc = 1;
  for (int i = s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  const int64_t n = std::max(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1, like PyTorch
  EMBER_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
              " dims (expected in [", -n, ", ", n - 1, "])");
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    const int ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    EMBER_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                " cannot be broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& target) {
  Strides out;
  out.resize(target.size());
  const int off = target.size() - shape.size();
  for (int i = 0; i < target.size(); ++i) {
    const int j = i - off;
    out[i] = (j < 0 || shape[j] == 1) ? 0 : strides[j];
  }
  return out;
}

// Strides that let a tensor of (sizes, strides) be read as `shape` without a copy, if any.
bool compute_view_strides(const Shape& sizes, const Strides& strides, const Shape& shape,
                          Strides& out) {
  out.resize(shape.size());
  if (numel_of(sizes) == 0 || sizes.size() == 0) {
    out = contiguous_strides(shape);
    return true;
  }
  int vd = shape.size() - 1;
  int64_t chunk_stride = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int td = sizes.size() - 1; td >= 0; --td) {
    tensor_numel *= sizes[td];
    const bool chunk_ends =
        td == 0 || (sizes[td - 1] != 1 && strides[td - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (vd >= 0 && (view_numel < tensor_numel || shape[vd] == 1)) {
      out[vd] = view_numel * chunk_stride;
      view_numel *= shape[vd];
      --vd;
    }
    if (view_numel != tensor_numel) return false;
    if (td > 0) {
      chunk_stride = strides[td - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  return vd == -1;
}

}  // namespace ember
