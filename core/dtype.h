#pragma once
/// \file
/// Element types (DType), their sizes and host C++ types, and PyTorch-style type promotion.
#include <cstdint>
#include <iosfwd>
#include <string_view>

#include "core/half.h"

namespace ember {

/// The element type of a tensor, like `torch.dtype`. The k-constants below are the usual
/// spellings (kFloat32, ...).
enum class DType : uint8_t {
  Float32,   ///< 32-bit IEEE float (`float`), the default dtype.
  Float64,   ///< 64-bit IEEE float (`double`).
  Float16,   ///< 16-bit IEEE half float (Half).
  BFloat16,  ///< 16-bit brain float (BFloat16).
  Int32,     ///< 32-bit signed integer.
  Int64,     ///< 64-bit signed integer, the dtype of indices and class targets.
  Bool       ///< Boolean, one byte per element (comparisons, masks).
};
/// The number of DType values.
inline constexpr int kNumDTypes = 7;

inline constexpr DType kFloat32 = DType::Float32;    ///< `torch.float32`.
inline constexpr DType kFloat64 = DType::Float64;    ///< `torch.float64`.
inline constexpr DType kFloat16 = DType::Float16;    ///< `torch.float16`.
inline constexpr DType kBFloat16 = DType::BFloat16;  ///< `torch.bfloat16`.
inline constexpr DType kInt32 = DType::Int32;        ///< `torch.int32`.
inline constexpr DType kInt64 = DType::Int64;        ///< `torch.int64`.
inline constexpr DType kBool = DType::Bool;          ///< `torch.bool`.

/// Bytes per element of `t` (8, 4, 2 or 1), like `torch.dtype.itemsize`.
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
/// True for the four floating dtypes (float32, float64, float16, bfloat16).
constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
/// True for int32 and int64 (bool is neither integral nor floating here).
constexpr bool is_integral(DType t) { return t == DType::Int32 || t == DType::Int64; }
/// The PyTorch name without the `torch.` prefix: "float32", "bfloat16", "int64", "bool", ...
std::string_view dtype_name(DType t);
/// Writes dtype_name(t), so `std::cout << x.dtype()` prints "float32" (libtorch prints dtypes
/// the same way).
std::ostream& operator<<(std::ostream& os, DType t);

/// The dtype two operands of equal standing promote to, like `torch.promote_types`: bool
/// yields to anything, a floating dtype beats any integer one, int32 with int64 gives int64,
/// float64 beats the other floats, and any other pair of different floats (float16 with
/// bfloat16 included) gives float32. For the full rule of an op's operands (0-dim tensors and
/// wrapped numbers count less) see result_type().
DType promote_types(DType a, DType b);

/// A set of dtypes (which dtypes an op accepts), as a bit mask over DType: bit `dtype_bit(t)`.
using DTypeSet = uint32_t;
/// The one-dtype set {t}.
constexpr DTypeSet dtype_bit(DType t) { return 1u << static_cast<int>(t); }
/// float32, float64, float16 and bfloat16.
inline constexpr DTypeSet kFloatTypes =
    dtype_bit(kFloat32) | dtype_bit(kFloat64) | dtype_bit(kFloat16) | dtype_bit(kBFloat16);
/// The floating dtypes plus int32 and int64 (everything but bool).
inline constexpr DTypeSet kNumericTypes = kFloatTypes | dtype_bit(kInt32) | dtype_bit(kInt64);
/// Every dtype.
inline constexpr DTypeSet kAllTypes = kNumericTypes | dtype_bit(kBool);
/// int32 and int64, the dtypes an index tensor may have.
inline constexpr DTypeSet kIndexTypes = dtype_bit(kInt32) | dtype_bit(kInt64);
/// True when `t` is in the set `s`.
constexpr bool in_set(DTypeSet s, DType t) { return (s & dtype_bit(t)) != 0; }

/// The host C++ type of dtype `T` as `CppType<T>::type` (float, double, Half, BFloat16, int32_t,
/// int64_t, bool); the inverse of DTypeOf.
template <DType T>
struct CppType;
/// float32 is held as `float`.
template <>
struct CppType<DType::Float32> {
  using type = float;  ///< The host type.
};
/// float64 is held as `double`.
template <>
struct CppType<DType::Float64> {
  using type = double;  ///< The host type.
};
/// float16 is held as Half.
template <>
struct CppType<DType::Float16> {
  using type = Half;  ///< The host type.
};
/// bfloat16 is held as BFloat16.
template <>
struct CppType<DType::BFloat16> {
  using type = BFloat16;  ///< The host type.
};
/// int32 is held as `int32_t`.
template <>
struct CppType<DType::Int32> {
  using type = int32_t;  ///< The host type.
};
/// int64 is held as `int64_t`.
template <>
struct CppType<DType::Int64> {
  using type = int64_t;  ///< The host type.
};
/// bool is held as `bool` (one byte).
template <>
struct CppType<DType::Bool> {
  using type = bool;  ///< The host type.
};

/// The dtype of host C++ type `T` as `DTypeOf<T>::value`, for the seven types of CppType; any
/// other `T` does not compile. Used by Tensor::data_ptr, Tensor::item and from_vector.
template <class T>
struct DTypeOf;
/// `float` is float32.
template <>
struct DTypeOf<float> {
  static constexpr DType value = kFloat32;  ///< The dtype.
};
/// `double` is float64.
template <>
struct DTypeOf<double> {
  static constexpr DType value = kFloat64;  ///< The dtype.
};
/// Half is float16.
template <>
struct DTypeOf<Half> {
  static constexpr DType value = kFloat16;  ///< The dtype.
};
/// BFloat16 is bfloat16.
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = kBFloat16;  ///< The dtype.
};
/// `int32_t` is int32.
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = kInt32;  ///< The dtype.
};
/// `int64_t` is int64.
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = kInt64;  ///< The dtype.
};
/// `bool` is bool.
template <>
struct DTypeOf<bool> {
  static constexpr DType value = kBool;  ///< The dtype.
};

/// An empty value that carries a type: visit_dtype passes `TypeTag<T>{}`, and a generic lambda
/// gets `T` back as the member `type` of `decltype(tag)`.
template <class T>
struct TypeTag {
  using type = T;  ///< The carried type.
};
/// One `case` of visit_dtype's switch: calls `F` with the TypeTag of dtype `D`'s host type.
/// Undefined again after visit_dtype.
#define EMBER_DTYPE_CASE(D, F) \
  case D:                      \
    return F(TypeTag<typename CppType<D>::type>{});
/// Calls `f(TypeTag<T>{})` with `T` the host C++ type of `t` (CppType) and returns its result,
/// the C++ counterpart of an ATen dtype switch. `f` must be callable for every dtype, usually a
/// generic lambda:
/// \code
/// double first = visit_dtype(t.dtype(), [&](auto tag) {
///   using T = typename decltype(tag)::type;
///   return static_cast<double>(*t.data_ptr<T>());
/// });
/// \endcode
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
