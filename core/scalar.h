#pragma once
/// \file
/// Scalar: a host number of one of three kinds (float, int, bool).
///
/// Ops take a Scalar where PyTorch takes a Python number (`add(t, 2)`, `t * 0.5`, `full`'s
/// value).
#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace ember {

/// A host number, like `c10::Scalar`: a double, an int64 or a bool, remembering which.
///
/// Constructs implicitly from any C++ arithmetic type (floating types become Kind::Float, integer
/// types Kind::Int, `bool` Kind::Bool), so ops accept plain numbers. An op against a tensor
/// treats it as a wrapped number: it does not widen the tensor's dtype within the same category
/// (`int32_tensor + 1` stays int32, `half_tensor * 0.5` stays float16), as in PyTorch.
class Scalar {
 public:
  /// Which of the three values a Scalar holds.
  enum class Kind : uint8_t {
    Float,  ///< A double (made from any floating-point type).
    Int,    ///< An int64 (made from any integer type but bool).
    Bool    ///< A bool.
  };
  /// The integer 0.
  Scalar() : kind_(Kind::Int), i_(0) {}
  /// A Kind::Float scalar holding `v` as a double.
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), d_(static_cast<double>(v)) {}  // NOLINT
  /// A Kind::Int scalar holding `v` as an int64.
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}  // NOLINT
  /// A Kind::Bool scalar.
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}  // NOLINT

  /// Which kind of value this holds.
  Kind kind() const { return kind_; }
  /// True for Kind::Float.
  bool is_floating() const { return kind_ == Kind::Float; }
  /// The value as a double (an int or bool converts exactly up to 2^53).
  double to_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  /// The value as an int64; a float is truncated toward zero (like a C++ cast).
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  /// The dtype a bare number takes: float32 for a float (the default dtype, like
  /// `torch.get_default_dtype()`), int64 for an int, bool for a bool.
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
