#pragma once
// The unary entries of the op table. One struct per op: float64 reference (scalar), Highway form
// (simd), CUDA source, derivative. Register a new op in registry.hpp's list.
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "kiln/ops/functions_fwd.hpp"
#include "kiln/ops/op_spec.hpp"
#include "kiln/ops/simd_math.hpp"

namespace kiln::ops {

namespace hn = hwy::HWY_NAMESPACE;
namespace km = kiln::HWY_NAMESPACE::math;

// Integer negation and absolute value wrap around on the most negative value (no UB).
template <class T>
constexpr T wrapping_neg(T x) {
  if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(x));
  else return -x;
}

struct Neg : SameTypeOp {
  static constexpr std::string_view name = "neg";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) { return wrapping_neg(x); }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_same_v<L, int32_t>;
  template <class D, class V> HWY_INLINE static V simd(D, V x) { return hn::Neg(x); }
  static constexpr std::string_view cuda = "(-$0)";
  static auto grad(auto, auto, auto g) { return -g; }
};

struct Abs : SameTypeOp {
  static constexpr std::string_view name = "abs";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) { return x < T(0) ? wrapping_neg(x) : (x == T(0) ? T(0) : x); }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_same_v<L, int32_t>;
  template <class D, class V> HWY_INLINE static V simd(D, V x) { return hn::Abs(x); }
  static constexpr std::string_view cuda = "abs($0)";
  static auto grad(auto x, auto, auto g) { return g * sign(x); }
};

struct Square : SameTypeOp {
  static constexpr std::string_view name = "square";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) {
    if constexpr (std::is_integral_v<T>) return T(std::make_unsigned_t<T>(x) * std::make_unsigned_t<T>(x));  // wraps, no UB
    else return x * x;
  }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_same_v<L, int32_t>;
  template <class D, class V> HWY_INLINE static V simd(D, V x) { return hn::Mul(x, x); }
  static constexpr std::string_view cuda = "($0 * $0)";
  static auto grad(auto x, auto, auto g) { return g * x * 2; }
};

struct Sign : SameTypeOp {
  static constexpr std::string_view name = "sign";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 2};
  // NaN passes through (std::-style propagation); zero keeps its sign.
  template <class T> static T scalar(T x) { return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) {
    const V zero = hn::Zero(d);
    return hn::IfThenElse(hn::Gt(x, zero), hn::Set(d, hn::TFromD<D>(1)), hn::IfThenElse(hn::Lt(x, zero), hn::Set(d, hn::TFromD<D>(-1)), x));
  }
  static constexpr std::string_view cuda = "(($0 > 0) ? 1 : (($0 < 0) ? -1 : $0))";
  static auto grad(auto, auto, auto g) { return zeros_like(g); }
};

struct Relu : SameTypeOp {
  static constexpr std::string_view name = "relu";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) { return x < T(0) ? T(0) : x; }  // NaN passes through
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_same_v<L, int32_t>;
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return hn::IfThenZeroElse(hn::Lt(x, hn::Zero(d)), x); }
  static constexpr std::string_view cuda = "(($0 < 0) ? 0 : $0)";
  static auto grad(auto x, auto, auto g) { return where(x > 0, g, 0); }
};

struct Reciprocal : FloatOp {
  static constexpr std::string_view name = "reciprocal";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 4, .lo = -1e4, .hi = 1e4, .max_ulp = 0};
  template <class T> static T scalar(T x) { return T(1) / x; }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return hn::Div(hn::Set(d, hn::TFromD<D>(1)), x); }
  static constexpr std::string_view cuda = "(1 / $0)";
  static auto grad(auto, auto y, auto g) { return -g * y * y; }
};

struct Sqrt : FloatOp {
  static constexpr std::string_view name = "sqrt";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 4, .lo = 0, .hi = 1e6, .max_ulp = 0};
  template <class T> static T scalar(T x) { return std::sqrt(x); }
  template <class D, class V> HWY_INLINE static V simd(D, V x) { return hn::Sqrt(x); }
  static constexpr std::string_view cuda = "sqrt($0)";
  static auto grad(auto, auto y, auto g) { return g / (y * 2); }
};

struct Rsqrt : FloatOp {
  static constexpr std::string_view name = "rsqrt";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 8, .lo = 0, .hi = 1e6, .max_ulp = 1};
  template <class T> static T scalar(T x) { return T(1) / std::sqrt(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return hn::Div(hn::Set(d, hn::TFromD<D>(1)), hn::Sqrt(x)); }
  static constexpr std::string_view cuda = "rsqrt($0)";
  static auto grad(auto, auto y, auto g) { return g * y * y * y * -0.5; }
};

struct Exp : FloatOp {
  static constexpr std::string_view name = "exp";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 16, .lo = -87, .hi = 88, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::exp(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Exp(d, x); }
  static constexpr std::string_view cuda = "exp($0)";
  static auto grad(auto, auto y, auto g) { return g * y; }
};

struct Exp2 : FloatOp {
  static constexpr std::string_view name = "exp2";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 16, .lo = -125, .hi = 127, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::exp2(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Exp2(d, x); }
  static constexpr std::string_view cuda = "exp2($0)";
  static auto grad(auto, auto y, auto g) { return g * y * std::numbers::ln2; }
};

struct Expm1 : FloatOp {
  static constexpr std::string_view name = "expm1";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 20, .lo = -87, .hi = 88, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::expm1(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Expm1(d, x); }
  static constexpr std::string_view cuda = "expm1($0)";
  static auto grad(auto, auto y, auto g) { return g * (y + 1); }
};

struct Log : FloatOp {
  static constexpr std::string_view name = "log";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 16, .lo = 1e-30, .hi = 1e30, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::log(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Log(d, x); }
  static constexpr std::string_view cuda = "log($0)";
  static auto grad(auto x, auto, auto g) { return g / x; }
};

struct Log2 : FloatOp {
  static constexpr std::string_view name = "log2";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 16, .lo = 1e-30, .hi = 1e30, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::log2(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Log2(d, x); }
  static constexpr std::string_view cuda = "log2($0)";
  static auto grad(auto x, auto, auto g) { return g / (x * std::numbers::ln2); }
};

struct Log1p : FloatOp {
  static constexpr std::string_view name = "log1p";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 20, .lo = -0.999, .hi = 1e30, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::log1p(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Log1p(d, x); }
  static constexpr std::string_view cuda = "log1p($0)";
  static auto grad(auto x, auto, auto g) { return g / (x + 1); }
};

struct Sin : FloatOp {
  static constexpr std::string_view name = "sin";
  static constexpr int arity = 1;
  // Highway's reduction is valid in [-39000, 39000]; beyond it the SIMD form is inaccurate.
  static constexpr OpInfo info{.cost = 20, .lo = -39000, .hi = 39000, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::sin(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Sin(d, x); }
  static constexpr std::string_view cuda = "sin($0)";
  static auto grad(auto x, auto, auto g) { return g * cos(x); }
};

struct Cos : FloatOp {
  static constexpr std::string_view name = "cos";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 20, .lo = -39000, .hi = 39000, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::cos(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Cos(d, x); }
  static constexpr std::string_view cuda = "cos($0)";
  static auto grad(auto x, auto, auto g) { return -(g * sin(x)); }
};

struct Tan : FloatOp {
  static constexpr std::string_view name = "tan";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 40, .lo = -39000, .hi = 39000, .max_ulp = 2};
  template <class T> static T scalar(T x) { return std::tan(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Tan(d, x); }
  static constexpr std::string_view cuda = "tan($0)";
  static auto grad(auto, auto y, auto g) { return g * (y * y + 1); }
};

struct Tanh : FloatOp {
  static constexpr std::string_view name = "tanh";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 20, .lo = -20, .hi = 20, .max_ulp = 2};
  template <class T> static T scalar(T x) { return std::tanh(x); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Tanh(d, x); }
  static constexpr std::string_view cuda = "tanh($0)";
  static auto grad(auto, auto y, auto g) { return g * (1 - y * y); }
};

struct Sigmoid : FloatOp {
  static constexpr std::string_view name = "sigmoid";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 20, .lo = -80, .hi = 80, .max_ulp = 2};
  template <class T> static T scalar(T x) { return T(1) / (T(1) + std::exp(-x)); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Sigmoid(d, x); }
  // exp of a non-positive argument only: 1 / (1 + exp(-x)) would give 0 below -88 where the value is subnormal.
  static constexpr std::string_view cuda = "(($0 >= 0) ? 1 / (1 + exp(-($0))) : exp($0) / (1 + exp($0)))";
  static auto grad(auto, auto y, auto g) { return g * y * (1 - y); }
};

struct Softplus : FloatOp {
  static constexpr std::string_view name = "softplus";
  static constexpr int arity = 1;
  // 1 ULP at -O2; 2 in double at -O1, where FMA contraction differs.
  static constexpr OpInfo info{.cost = 36, .lo = -80, .hi = 80, .max_ulp = 2};
  // PyTorch's definition (beta 1, threshold 20): linear above the threshold.
  template <class T> static T scalar(T x) { return x > T(20) ? x : std::log1p(std::exp(x)); }
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Softplus(d, x); }
  static constexpr std::string_view cuda = "(($0 > 20) ? $0 : log1p(exp($0)))";
  static auto grad(auto x, auto, auto g) { return where(x > 20, g, g * sigmoid(x)); }
};

struct Erf : FloatOp {
  static constexpr std::string_view name = "erf";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 24, .lo = -6, .hi = 6, .max_ulp = 1};
  template <class T> static T scalar(T x) { return std::erf(x); }
  template <class L> static constexpr bool simd_for = km::kHasErf<L>;
  template <class D, class V> HWY_INLINE static V simd(D d, V x) { return km::Erf(d, x); }
  static constexpr std::string_view cuda = "erf($0)";
  static auto grad(auto x, auto, auto g) { return g * exp(-(x * x)) * (2 / std::sqrt(std::numbers::pi)); }
};

// Rounding: piecewise constant, so the gradient is zero (as PyTorch's). Rounding never changes the
// sign, so CopySign restores the zero signs that Highway 1.0.3's SCALAR and SSSE3 forms lose.
struct Floor : SameTypeOp {
  static constexpr std::string_view name = "floor";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) { if constexpr (std::is_integral_v<T>) return x; else return std::floor(x); }
  template <class D, class V> HWY_INLINE static V simd(D, V x) { return hn::CopySign(hn::Floor(x), x); }
  static constexpr std::string_view cuda = "kiln_floor($0)";
  static auto grad(auto, auto, auto g) { return zeros_like(g); }
};

struct Ceil : SameTypeOp {
  static constexpr std::string_view name = "ceil";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) { if constexpr (std::is_integral_v<T>) return x; else return std::ceil(x); }
  template <class D, class V> HWY_INLINE static V simd(D, V x) { return hn::CopySign(hn::Ceil(x), x); }
  static constexpr std::string_view cuda = "kiln_ceil($0)";
  static auto grad(auto, auto, auto g) { return zeros_like(g); }
};

// Half to even, as torch.round.
struct Round : SameTypeOp {
  static constexpr std::string_view name = "round";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) { if constexpr (std::is_integral_v<T>) return x; else return std::nearbyint(x); }
  template <class D, class V> HWY_INLINE static V simd(D, V x) { return hn::CopySign(hn::Round(x), x); }
  static constexpr std::string_view cuda = "kiln_rint($0)";
  static auto grad(auto, auto, auto g) { return zeros_like(g); }
};

// Zeros of the operand's dtype; the derivative of piecewise-constant ops.
struct ZerosLike : SameTypeOp {
  static constexpr std::string_view name = "zeros_like";
  static constexpr int arity = 1;
  static constexpr bool differentiable = false;
  static constexpr OpInfo info{.cost = 0};
  template <class T> static T scalar(T) { return T(0); }
  template <class L> static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_same_v<L, int32_t>;
  template <class D, class V> HWY_INLINE static V simd(D d, V) { return hn::Zero(d); }
  static constexpr std::string_view cuda = "0";
};

struct LogicalNot : LogicalOp {
  static constexpr std::string_view name = "logical_not";
  static constexpr int arity = 1;
  static constexpr OpInfo info{.cost = 1};
  static bool scalar(bool x) { return !x; }
  template <class D, class M> HWY_INLINE static M simd(D, M m) { return hn::Not(m); }
  static constexpr std::string_view cuda = "(!$0)";
};

}  // namespace kiln::ops
