#pragma once
// Exception types and the message builder. Messages start with the op that failed:
// "add: shapes [2, 3] and [4] cannot be broadcast".
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

namespace detail {
// GCC 12 has no std::format: concatenate anything printable.
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// Shapes that cannot be broadcast, viewed or combined.
struct ShapeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A tensor's run-time dtype is not the one asked for (AnyTensor::as<T>(), file loaders).
struct DTypeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// An expression was evaluated after one of its leaves was modified in place.
struct StaleExpressionError : std::logic_error {
  using std::logic_error::logic_error;
};

// Memory could not be allocated, or a size overflows what can be addressed.
struct OutOfMemoryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class Error = std::invalid_argument, class... Args>
inline void check(bool condition, const Args&... message) {
  if (!condition) throw Error(detail::cat(message...));
}

}  // namespace kiln
