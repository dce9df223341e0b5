#pragma once
// Small helpers the device lowerings' analyses share (jit/lower_*.cpp).
#include <initializer_list>
#include <string>
#include <string_view>

#include "jit/graph.h"

namespace ember::jit::lower_util {

// Concatenation (GCC 12 warns falsely on chains of string + literal under -O3).
inline std::string join(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

// Records why an analysis said no, and says no.
inline bool fail(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
  return false;
}

// Row-major dense (strides of size-1 dims do not matter).
inline bool dense(const Value& v) {
  const Strides want = contiguous_strides(v.shape);
  for (int d = 0; d < v.shape.size(); ++d)
    if (v.shape[d] != 1 && v.strides[d] != want[d]) return false;
  return true;
}

}  // namespace ember::jit::lower_util
