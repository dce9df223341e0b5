#pragma once
/// \file
/// ember::Error, the one exception type of Ember, and the EMBER_CHECK / EMBER_FAIL macros.
///
/// Every failure a user can cause is an Error whose message names the op and the offending
/// shapes / dtypes / devices / values.
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

/// The exception Ember throws for every failure a user can cause (bad shapes, dtypes, devices,
/// values, a missing CUDA device), like `c10::Error`.
///
/// what() names the op and the offending values, e.g. "mm: shapes [2, 3] and [4, 5] cannot be
/// multiplied (3 != 4)". Catch it as `ember::Error` or as `std::runtime_error`.
class Error : public std::runtime_error {
 public:
  /// An error with message `msg` (returned by what()).
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
template <class... Args>
[[noreturn]] void throw_error(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw Error(os.str());
}
}  // namespace detail

}  // namespace ember

/// Throws ember::Error unless `cond` holds; the message is the remaining arguments streamed
/// together with `<<`, built only when `cond` fails.
/// \code
/// EMBER_CHECK(a.dim() == 2, "mm: expected a matrix, got shape ", a.sizes());
/// \endcode
#define EMBER_CHECK(cond, ...)                                                   \
  do {                                                                           \
    if (__builtin_expect(!(cond), 0)) ::ember::detail::throw_error(__VA_ARGS__); \
  } while (0)
/// Throws ember::Error with the arguments streamed together with `<<` as the message.
#define EMBER_FAIL(...) ::ember::detail::throw_error(__VA_ARGS__)
