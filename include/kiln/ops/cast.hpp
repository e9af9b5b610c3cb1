#pragma once
// The dtype conversion node of expressions.
#include <limits>
#include <string_view>
#include <type_traits>

#include "kiln/ops/op_spec.hpp"

namespace kiln::ops {

// Conversion to U (t.to<U>() on an expression). Not in the op list: it is structural.
template <class U>
struct Cast {
  static constexpr std::string_view name = "to";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T, class...>
  using result = U;
  template <class T>
  static consteval bool check_types() { return true; }
  template <class L> static constexpr bool simd_for = false;
  // Float to integer saturates and sends NaN to 0 (a plain C++ conversion would be undefined).
  template <class T> static compute_t<U> scalar(T x) {
    using R = compute_t<U>;
    if constexpr (std::is_same_v<U, bool>) {
      return x != T(0);
    } else if constexpr (std::is_floating_point_v<T> && std::is_integral_v<R>) {
      if (x != x) return R(0);
      if (x <= T(std::numeric_limits<R>::min())) return std::numeric_limits<R>::min();
      if (x >= T(std::numeric_limits<R>::max())) return std::numeric_limits<R>::max();
      return static_cast<R>(x);
    } else {
      return static_cast<R>(x);
    }
  }
  static constexpr std::string_view cuda = "($0)";
  // The gradient flows back unchanged; autograd converts it to the input's dtype.
  static auto grad(auto, auto, auto g) { return g; }
};

}  // namespace kiln::ops
