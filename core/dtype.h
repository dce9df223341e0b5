#pragma once
// Element types and PyTorch-style type promotion.
#include <cstdint>
#include <string_view>

#include "core/half.h"

namespace ember {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, Bool };
inline constexpr int kNumDTypes = 7;

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;

constexpr int64_t element_size(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64:
      return 8;
    case DType::Float32:
    case DType::Int32:
      return 4;
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Bool:
      return 1;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
constexpr bool is_integral(DType t) { return t == DType::Int32 || t == DType::Int64; }
std::string_view dtype_name(DType t);  // "float32", ...

// The type two operands of equal standing promote to (torch.promote_types).
DType promote_types(DType a, DType b);

// Sets of dtypes an op accepts, as bit masks over DType.
using DTypeSet = uint32_t;
constexpr DTypeSet dtype_bit(DType t) { return 1u << static_cast<int>(t); }
inline constexpr DTypeSet kFloatTypes =
    dtype_bit(kFloat32) | dtype_bit(kFloat64) | dtype_bit(kFloat16) | dtype_bit(kBFloat16);
inline constexpr DTypeSet kNumericTypes = kFloatTypes | dtype_bit(kInt32) | dtype_bit(kInt64);
inline constexpr DTypeSet kAllTypes = kNumericTypes | dtype_bit(kBool);
inline constexpr DTypeSet kIndexTypes = dtype_bit(kInt32) | dtype_bit(kInt64);
constexpr bool in_set(DTypeSet s, DType t) { return (s & dtype_bit(t)) != 0; }

// C++ type of each dtype on the host.
template <DType T>
struct CppType;
template <>
struct CppType<DType::Float32> {
  using type = float;
};
template <>
struct CppType<DType::Float64> {
  using type = double;
};
template <>
struct CppType<DType::Float16> {
  using type = Half;
};
template <>
struct CppType<DType::BFloat16> {
  using type = BFloat16;
};
template <>
struct CppType<DType::Int32> {
  using type = int32_t;
};
template <>
struct CppType<DType::Int64> {
  using type = int64_t;
};
template <>
struct CppType<DType::Bool> {
  using type = bool;
};

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = kFloat64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = kFloat16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = kBFloat16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = kInt64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = kBool;
};

// Calls f(tag) with tag::type the C++ type of `t`, for each dtype in `allowed`.
template <class T>
struct TypeTag {
  using type = T;
};
#define EMBER_DTYPE_CASE(D, F) \
  case D:                      \
    return F(TypeTag<typename CppType<D>::type>{});
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    EMBER_DTYPE_CASE(DType::Float32, f)
    EMBER_DTYPE_CASE(DType::Float64, f)
    EMBER_DTYPE_CASE(DType::Float16, f)
    EMBER_DTYPE_CASE(DType::BFloat16, f)
    EMBER_DTYPE_CASE(DType::Int32, f)
    EMBER_DTYPE_CASE(DType::Int64, f)
    EMBER_DTYPE_CASE(DType::Bool, f)
  }
  return f(TypeTag<float>{});  // unreachable
}
#undef EMBER_DTYPE_CASE

}  // namespace ember
