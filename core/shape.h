#pragma once
// Shapes and strides: a fixed-capacity small vector so the dispatch path never allocates for them.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace ember {

inline constexpr int kMaxDims = 8;

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> v);
  explicit Dims(const std::vector<int64_t>& v);
  static Dims filled(int n, int64_t value);

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  int64_t back() const { return d_[n_ - 1]; }
  void push_back(int64_t v);
  void insert(int pos, int64_t v);
  void erase(int pos);
  void resize(int n, int64_t fill = 0);
  void clear() { n_ = 0; }
  std::vector<int64_t> vec() const { return {d_, d_ + n_}; }

  bool operator==(const Dims& o) const { return n_ == o.n_ && std::equal(d_, d_ + n_, o.d_); }
  std::string str() const;  // "[2, 3]"

 private:
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};
std::ostream& operator<<(std::ostream& os, const Dims& d);

using Shape = Dims;
using Strides = Dims;

// The element count, unchecked: for shapes of tensors that exist (validated when made).
int64_t numel_of(const Shape& s);
// The element count of a shape a tensor is about to be made or viewed with: throws naming `op`
// and the shape when a size is negative or the count overflows int64.
int64_t checked_numel(const Shape& s, const char* op);
// checked_numel times `element_size`, also checked for overflow.
int64_t checked_nbytes(const Shape& s, int64_t element_size, const char* op);
Strides contiguous_strides(const Shape& s);
// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int wrap_dim(int64_t dim, int ndim, const char* op);
// Broadcast two shapes (numpy rules); throws naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Strides that make a tensor of (shape, strides) read as `target` (size-1 and missing dims get 0).
Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& target);

// Strides that let a tensor of (sizes, strides) be read as `shape` (same numel) without a copy;
// false when its memory layout does not allow it (then a reshape must copy).
bool compute_view_strides(const Shape& sizes, const Strides& strides, const Shape& shape,
                          Strides& out);

}  // namespace ember
