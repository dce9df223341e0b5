#pragma once
// ember::Error: every failure a user can cause is one of these, naming the op and the
// offending shapes / dtypes / devices / values.
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
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

// EMBER_CHECK(cond, "op: ", a, " vs ", b): the message is only built when cond fails.
#define EMBER_CHECK(cond, ...)                                                   \
  do {                                                                           \
    if (__builtin_expect(!(cond), 0)) ::ember::detail::throw_error(__VA_ARGS__); \
  } while (0)
#define EMBER_FAIL(...) ::ember::detail::throw_error(__VA_ARGS__)
