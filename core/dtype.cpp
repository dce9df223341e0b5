#include "core/dtype.h"

#include <ostream>

namespace ember {

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == kBool) return b;
  if (b == kBool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;  // a float beats any integer
  if (!fa) return kInt64;           // int32 with int64
  // Two different float types.
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;  // f32 with f16/bf16, and f16 with bf16
}

}  // namespace ember
