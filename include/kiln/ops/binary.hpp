#pragma once
// The binary entries of the op table (see unary.hpp for the shape of an entry). A derivative
// returns one gradient per input, as a std::tuple.
#include <cmath>
#include <tuple>
#include <type_traits>

#include "kiln/ops/unary.hpp"

namespace kiln::ops {

template <class T>
inline constexpr bool int_simd = std::is_same_v<T, int32_t>;

struct Add : SameTypeOp {
  static constexpr std::string_view name = "add";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T a, T b) {
    if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
    else return a + b;
  }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_integral_v<L>;
  template <class D, class V> HWY_INLINE static V simd(D, V a, V b) { return hn::Add(a, b); }
  static constexpr std::string_view cuda = "($0 + $1)";
  static auto grad(auto, auto, auto, auto g) { return std::tuple{g, g}; }
};

struct Sub : SameTypeOp {
  static constexpr std::string_view name = "sub";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T a, T b) {
    if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(a) - std::make_unsigned_t<T>(b));
    else return a - b;
  }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_integral_v<L>;
  template <class D, class V> HWY_INLINE static V simd(D, V a, V b) { return hn::Sub(a, b); }
  static constexpr std::string_view cuda = "($0 - $1)";
  static auto grad(auto, auto, auto, auto g) { return std::tuple{g, -g}; }
};

struct Mul : SameTypeOp {
  static constexpr std::string_view name = "mul";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T a, T b) {
    if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(a) * std::make_unsigned_t<T>(b));
    else return a * b;
  }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || int_simd<L>;
  template <class D, class V> HWY_INLINE static V simd(D, V a, V b) { return hn::Mul(a, b); }
  static constexpr std::string_view cuda = "($0 * $1)";
  static auto grad(auto a, auto b, auto, auto g) { return std::tuple{g * b, g * a}; }
};

// Integer division truncates toward zero, as C++; dividing by zero gives 0 and the most negative
// value divided by -1 wraps, so no input is undefined behaviour.
struct Div : SameTypeOp {
  static constexpr std::string_view name = "div";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 4};
  template <class T> static T scalar(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);
      if (b == T(-1)) return wrapping_neg(a);
      return T(a / b);
    } else {
      return a / b;
    }
  }
  template <class D, class V> HWY_INLINE static V simd(D, V a, V b) { return hn::Div(a, b); }
  static constexpr std::string_view cuda = "kiln_div($0, $1)";  // cuda/prelude.hpp
  static auto grad(auto a, auto b, auto, auto g) { return std::tuple{g / b, -g * a / (b * b)}; }
};

struct Pow : FloatOp {
  static constexpr std::string_view name = "pow";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 40, .lo = 0, .hi = 20, .max_ulp = 1};
  template <class T> static T scalar(T a, T b) { return std::pow(a, b); }
  template <class L> static constexpr bool simd_for = km::kHasPow<L>;
  template <class D, class V> HWY_INLINE static V simd(D d, V a, V b) { return km::Pow(d, a, b); }
  static constexpr std::string_view cuda = "pow($0, $1)";
  // As PyTorch: zero where the exponent is 0 (base grad) or the base is 0 with exponent >= 0.
  static auto grad(auto a, auto b, auto y, auto g) {
    return std::tuple{where(b == 0, 0, g * b * pow(a, b - 1)),
                      where(logical_and(a == 0, b >= 0), 0, g * y * log(a))};
  }
};

// minimum / maximum propagate NaN (torch.minimum). Their gradient is PyTorch's (derivatives.yaml: maximum's self
// gets where(self == other, grad / 2, grad).masked_fill_(self < other, 0)): at ties each input gets half of it, and
// where either input is NaN (no comparison holds) both get all of it.
struct Minimum : SameTypeOp {
  static constexpr std::string_view name = "minimum";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 2};
  template <class T> static T scalar(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) if (a != a || b != b) return a + b;
    return b < a ? b : a;
  }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || int_simd<L>;
  template <class D, class V> HWY_INLINE static V simd(D, V a, V b) {
    if constexpr (std::is_floating_point_v<hn::TFromV<V>>)
      return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), hn::Min(a, b));
    else return hn::Min(a, b);
  }
  static constexpr std::string_view cuda = "(($0 != $0 || $1 != $1) ? ($0 + $1) : min($0, $1))";
  static auto grad(auto a, auto b, auto, auto g) {
    return std::tuple{where(a > b, 0, where(a == b, g / 2, g)), where(b > a, 0, where(a == b, g / 2, g))};
  }
};

struct Maximum : SameTypeOp {
  static constexpr std::string_view name = "maximum";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 2};
  template <class T> static T scalar(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) if (a != a || b != b) return a + b;
    return a < b ? b : a;
  }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || int_simd<L>;
  template <class D, class V> HWY_INLINE static V simd(D, V a, V b) {
    if constexpr (std::is_floating_point_v<hn::TFromV<V>>)
      return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), hn::Max(a, b));
    else return hn::Max(a, b);
  }
  static constexpr std::string_view cuda = "(($0 != $0 || $1 != $1) ? ($0 + $1) : max($0, $1))";
  static auto grad(auto a, auto b, auto, auto g) {
    return std::tuple{where(a < b, 0, where(a == b, g / 2, g)), where(b < a, 0, where(a == b, g / 2, g))};
  }
};

// clamp_min / clamp_max with a number bound (expr/functions.hpp's clamp): maximum / minimum with PyTorch's clamp
// gradient, which passes only where x is strictly inside the bound (at x == bound the result is the bound itself;
// maximum would split the tie). The number bound has no gradient.
struct ClampMin : Maximum {
  static constexpr std::string_view name = "clamp_min";
  static auto grad(auto a, auto b, auto, auto g) { return std::tuple{where(a > b, g, 0), no_grad}; }
};
struct ClampMax : Minimum {
  static constexpr std::string_view name = "clamp_max";
  static auto grad(auto a, auto b, auto, auto g) { return std::tuple{where(a < b, g, 0), no_grad}; }
};

// Highway 1.0.3 has Le/Ge only for floats; for integers they are the negation of Gt/Lt (which for
// floats would be wrong on NaN).
// hn::Ne on floats is an ordered compare (false when either is NaN); != is true there.
template <class V>
HWY_INLINE auto ne_simd(V a, V b) {
  return hn::Not(hn::Eq(a, b));
}
template <class V>
HWY_INLINE auto le_simd(V a, V b) {
  if constexpr (std::is_floating_point_v<hn::TFromV<V>>) return hn::Le(a, b);
  else return hn::Not(hn::Gt(a, b));
}
template <class V>
HWY_INLINE auto ge_simd(V a, V b) {
  if constexpr (std::is_floating_point_v<hn::TFromV<V>>) return hn::Ge(a, b);
  else return hn::Not(hn::Lt(a, b));
}

#define KILN_COMPARE_OP(Name, str, expr, hwy_op, cuda_src)                          \
  struct Name : CompareOp {                                                         \
    static constexpr std::string_view name = str;                                   \
    static constexpr int arity = 2;                                                 \
    static constexpr OpInfo info{.cost = 1};                                        \
    template <class T> static bool scalar(T a, T b) { return expr; }                \
    template <class D, class V> HWY_INLINE static auto simd(D, V a, V b) { return hwy_op(a, b); } \
    static constexpr std::string_view cuda = cuda_src;                              \
  };
KILN_COMPARE_OP(Eq, "eq", a == b, hn::Eq, "($0 == $1)")
KILN_COMPARE_OP(Ne, "ne", a != b, ne_simd, "($0 != $1)")
KILN_COMPARE_OP(Lt, "lt", a < b, hn::Lt, "($0 < $1)")
KILN_COMPARE_OP(Le, "le", a <= b, le_simd, "($0 <= $1)")
KILN_COMPARE_OP(Gt, "gt", a > b, hn::Gt, "($0 > $1)")
KILN_COMPARE_OP(Ge, "ge", a >= b, ge_simd, "($0 >= $1)")
#undef KILN_COMPARE_OP

struct LogicalAnd : LogicalOp {
  static constexpr std::string_view name = "logical_and";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 1};
  static bool scalar(bool a, bool b) { return a && b; }
  template <class D, class M> HWY_INLINE static M simd(D, M a, M b) { return hn::And(a, b); }
  static constexpr std::string_view cuda = "($0 && $1)";
};

struct LogicalOr : LogicalOp {
  static constexpr std::string_view name = "logical_or";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 1};
  static bool scalar(bool a, bool b) { return a || b; }
  template <class D, class M> HWY_INLINE static M simd(D, M a, M b) { return hn::Or(a, b); }
  static constexpr std::string_view cuda = "($0 || $1)";
};

struct LogicalXor : LogicalOp {
  static constexpr std::string_view name = "logical_xor";
  static constexpr int arity = 2;
  static constexpr OpInfo info{.cost = 1};
  static bool scalar(bool a, bool b) { return a != b; }
  template <class D, class M> HWY_INLINE static M simd(D, M a, M b) { return hn::Xor(a, b); }
  static constexpr std::string_view cuda = "($0 != $1)";
};

// where(cond, a, b): cond is bool, a and b share a dtype.
struct Where {
  static constexpr std::string_view name = "where";
  static constexpr int arity = 3;
  static constexpr OpInfo info{.cost = 1};
  template <class C, class T, class U>
  using result = T;
  template <class C, class T, class U>
  static consteval bool check_types() {
    constexpr bool condition = std::is_same_v<C, bool>, same = std::is_same_v<T, U>;
    static_assert(condition, "kiln: the condition of where must be a bool tensor or expression");
    static_assert(!condition || same,
                  "kiln: the two branches of where have different dtypes; convert one with .to<T>()");
    return condition && same;
  }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_integral_v<L>;
  template <class T> static T scalar(bool c, T a, T b) { return c ? a : b; }
  template <class D, class M, class V> HWY_INLINE static V simd(D, M c, V a, V b) { return hn::IfThenElse(c, a, b); }
  static constexpr std::string_view cuda = "($0 ? $1 : $2)";
  static auto grad(auto c, auto, auto, auto, auto g) { return std::tuple{no_grad, where(c, g, 0), where(c, 0, g)}; }
};

}  // namespace kiln::ops
