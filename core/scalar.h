#pragma once
// A host number of one of three kinds; ops take it where PyTorch takes a Python number.
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace ember {

class Scalar {
 public:
  enum class Kind : uint8_t { Float, Int, Bool };
  Scalar() : kind_(Kind::Int), i_(0) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), d_(static_cast<double>(v)) {}  // NOLINT
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}  // NOLINT
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}                    // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  // The dtype a bare number takes (float32 default like torch.get_default_dtype()).
  DType natural_dtype() const {
    return kind_ == Kind::Float ? kFloat32 : kind_ == Kind::Int ? kInt64 : kBool;
  }

 private:
  Kind kind_;
  union {
    double d_;
    int64_t i_;
  };
};

}  // namespace ember
