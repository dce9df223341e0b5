#pragma once
/// \file
/// Shapes and strides (Dims), and the shape arithmetic of views and broadcasting.
///
/// Dims is a fixed-capacity small vector, so the dispatch path never allocates for them.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace ember {

/// The most dims a tensor may have; a Shape with more throws ember::Error.
inline constexpr int kMaxDims = 8;

/// A list of at most kMaxDims int64 values, stored inline: a tensor's sizes (Shape), its strides
/// (Strides), or a list of dims for reductions and permute.
///
/// Written as a braced list: `Shape{64, 784}`, `t.sum({0, 1})`. Growing past kMaxDims (the
/// constructors, push_back, insert, resize) throws ember::Error; operator[], back() and erase()
/// do not check their index.
class Dims {
 public:
  /// An empty list (the shape of a 0-dim tensor).
  Dims() = default;
  /// The given values, e.g. `{2, 3}`; more than kMaxDims throws ember::Error.
  Dims(std::initializer_list<int64_t> v);
  /// The values of `v`; more than kMaxDims throws ember::Error.
  explicit Dims(const std::vector<int64_t>& v);
  /// `n` copies of `value`.
  static Dims filled(int n, int64_t value);

  /// The number of values (a shape's dim count).
  int size() const { return n_; }
  /// True when there are no values.
  bool empty() const { return n_ == 0; }
  /// Value `i` (unchecked).
  int64_t operator[](int i) const { return d_[i]; }
  /// Value `i`, writable (unchecked).
  int64_t& operator[](int i) { return d_[i]; }
  /// Iterator to the first value.
  const int64_t* begin() const { return d_; }
  /// Iterator past the last value.
  const int64_t* end() const { return d_ + n_; }
  /// Writable iterator to the first value.
  int64_t* begin() { return d_; }
  /// Writable iterator past the last value.
  int64_t* end() { return d_ + n_; }
  /// The last value (the list must not be empty).
  int64_t back() const { return d_[n_ - 1]; }
  /// Appends `v`; throws ember::Error when the list is full.
  void push_back(int64_t v);
  /// Inserts `v` before position `pos` (0 to size()); throws ember::Error when the list is full.
  void insert(int pos, int64_t v);
  /// Removes the value at `pos` (unchecked).
  void erase(int pos);
  /// Truncates or pads with `fill` to `n` values; `n` outside [0, kMaxDims] throws ember::Error.
  void resize(int n, int64_t fill = 0);
  /// Removes every value.
  void clear() { n_ = 0; }
  /// The values as a std::vector.
  std::vector<int64_t> vec() const { return {d_, d_ + n_}; }

  /// Same length and values.
  bool operator==(const Dims& o) const { return n_ == o.n_ && std::equal(d_, d_ + n_, o.d_); }
  /// The values as "[2, 3]" ("[]" when empty).
  std::string str() const;

 private:
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};
/// Writes `d` as "[2, 3]".
std::ostream& operator<<(std::ostream& os, const Dims& d);

/// A tensor's sizes, outermost dim first (like `torch.Size`).
using Shape = Dims;
/// A tensor's strides, in elements (not bytes), one per dim, as `torch.Tensor.stride()`.
using Strides = Dims;

/// The element count (product of the sizes; 1 for `{}`), unchecked: for shapes of tensors that
/// exist (validated when made).
int64_t numel_of(const Shape& s);
/// The element count of a shape a tensor is about to be made or viewed with: throws ember::Error
/// naming `op` and the shape when a size is negative or the count overflows int64.
int64_t checked_numel(const Shape& s, const char* op);
/// checked_numel times `element_size`, also checked for overflow (throws ember::Error naming
/// `op`).
int64_t checked_nbytes(const Shape& s, int64_t element_size, const char* op);
/// The row-major (C-contiguous) strides of `s`: the last dim has stride 1. Size-0 dims count as
/// 1, so no stride is 0.
Strides contiguous_strides(const Shape& s);
/// Wraps a possibly negative dim into [0, ndim), Python style (-1 is the last dim); throws
/// ember::Error naming `op` when out of range. A 0-dim tensor accepts 0 and -1, as in PyTorch.
int wrap_dim(int64_t dim, int ndim, const char* op);
/// The broadcast of two shapes (NumPy / PyTorch rules: align at the last dim, sizes must match
/// or be 1), like `torch.broadcast_shapes`; throws ember::Error naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
/// Strides that make a tensor of (shape, strides) read as the broadcast shape `target`
/// (size-1 and missing leading dims get stride 0). `target` must be a broadcast of `shape`.
Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& target);

/// Strides that let a tensor of (sizes, strides) be read as `shape` (same numel) without a copy,
/// written to `out`; false when its memory layout does not allow it (then a reshape must copy).
/// The rule of `torch.Tensor.view`.
bool compute_view_strides(const Shape& sizes, const Strides& strides, const Shape& shape,
                          Strides& out);

}  // namespace ember
