#pragma once
// Force-included into the fuzz build only (tools/fuzz/CMakeLists.txt). Debian's clang 14 lacks
// __builtin_source_location, so libstdc++'s <source_location> declares nothing under it, and
// the library's headers name std::source_location. This supplies the same interface from the
// builtins clang 14 does have; with a compiler that has the real one it adds nothing.
#include <version>

#if !defined(__cpp_lib_source_location) && defined(__clang__)
#include <source_location>  // first, so its include guard keeps it from being read again

namespace std {
struct source_location {
  static constexpr source_location current(const char* file = __builtin_FILE(),
                                           const char* function = __builtin_FUNCTION(),
                                           unsigned line = __builtin_LINE(),
                                           unsigned column = __builtin_COLUMN()) noexcept {
    source_location s;
    s.file_ = file;
    s.function_ = function;
    s.line_ = line;
    s.column_ = column;
    return s;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return column_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
  unsigned column_ = 0;
};
}  // namespace std
#endif
