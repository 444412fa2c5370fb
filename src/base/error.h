// Error type and always-on checks. Untrusted input throws zen::Error with a message that
// names what was wrong; internal invariants use ZEN_CHECK, which reports file:line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace zen {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Throws zen::Error whose message is the concatenation of args (anything with operator<<).
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(detail::concat(std::forward<Args>(args)...));
}

}  // namespace zen

// Internal invariant; always on. Message args are streamed after "file:line: check failed".
#define ZEN_CHECK(cond, ...)                                                              \
  do {                                                                                    \
    if (!(cond))                                                                          \
      ::zen::fail(__FILE__, ":", __LINE__, ": check failed: " #cond " " __VA_OPT__(, ) \
                  __VA_ARGS__);                                                           \
  } while (0)
