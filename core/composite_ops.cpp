// Ops composed of other public ops (views, comparisons, where): autograd and the JIT see only
// those, so these need no formula, kernel or lowering of their own.
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"

namespace ember {
namespace {

int wrap(const Tensor& a, int64_t dim, const char* who) {
  EMBER_CHECK(a.defined(), who, ": undefined tensor");
  EMBER_CHECK(a.dim() > 0, who, ": a 0-dim tensor has no dim to cut, got shape ", a.sizes());
  const int64_t n = a.dim();
  EMBER_CHECK(dim >= -n && dim < n, who, ": dim ", dim, " is out of range for shape ", a.sizes());
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

// Keeps (i, j) of the last two dims where (j - i) compared with `diagonal` holds.
Tensor triangle(const Tensor& a, int64_t diagonal, bool lower, const char* who) {
  EMBER_CHECK(a.defined() && a.dim() >= 2, who, ": expected at least 2 dims, got shape ",
              a.defined() ? a.sizes() : Shape{});
  const int64_t rows = a.size(-2), cols = a.size(-1);
  const TensorOptions o = TensorOptions(kInt64).device(a.device());
  const Tensor offset = sub(arange(cols, o).view({1, cols}), arange(rows, o).view({rows, 1}));
  const Tensor d = full({}, diagonal, o);
  const Tensor keep = lower ? le(offset, d) : ge(offset, d);
  // A zero of a's own dtype: a wrapped 0 would promote a bool input to int64.
  return where(keep, a, zeros({}, TensorOptions(a.dtype()).device(a.device())));
}

}  // namespace

std::vector<Tensor> split(const Tensor& a, int64_t size, int64_t dim) {
  const int d = wrap(a, dim, "split");
  EMBER_CHECK(size > 0 || (size == 0 && a.size(d) == 0), "split: split_size must be positive, got ",
              size, " for shape ", a.sizes());
  std::vector<Tensor> out;
  const int64_t n = a.size(d);
  if (n == 0) return {a};
  for (int64_t at = 0; at < n; at += size) out.push_back(a.narrow(d, at, std::min(size, n - at)));
  return out;
}

std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim) {
  const int d = wrap(a, dim, "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    EMBER_CHECK(s >= 0, "split: sizes must be non-negative, got ", s);
    total += s;
  }
  EMBER_CHECK(total == a.size(d), "split: sizes sum to ", total, " but dim ", d, " of shape ",
              a.sizes(), " has ", a.size(d));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(a.narrow(d, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  const int d = wrap(a, dim, "chunk");
  EMBER_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t n = a.size(d);
  return split(a, n == 0 ? 0 : (n + chunks - 1) / chunks, d);
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value) {
  EMBER_CHECK(a.defined() && mask.defined(), "masked_fill: undefined tensor");
  EMBER_CHECK(mask.dtype() == kBool, "masked_fill: the mask must be bool, got ",
              dtype_name(mask.dtype()));
  EMBER_CHECK(broadcast_shapes(a.sizes(), mask.sizes(), "masked_fill") == a.sizes(),
              "masked_fill: mask of shape ", mask.sizes(), " does not broadcast to ", a.sizes());
  return where(mask, value, a);
}

Tensor tril(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, true, "tril"); }
Tensor triu(const Tensor& a, int64_t diagonal) { return triangle(a, diagonal, false, "triu"); }

}  // namespace ember
