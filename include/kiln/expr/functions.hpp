#pragma once
// The elementwise functions and operators. Every function is generated from the op table's lists:
// on expressions (and tensors) it builds a Map node; on plain numbers it computes the op's scalar
// form (which is how the derivatives are checked against finite differences).
#include <cmath>
#include <type_traits>

#include "kiln/core/config.hpp"
#include "kiln/expr/node.hpp"
#include "kiln/ops/registry.hpp"

namespace kiln {

namespace detail {

template <class X>
struct operand_value { using type = void; };
template <Operand X>
struct operand_value<X> { using type = typename X::value_type; };

// The dtype that plain-number operands convert to: that of the first operand that is not bool
// (so where(mask, x, 0) makes 0 a float when x is float); bool for logical ops; float otherwise.
template <class V>
inline constexpr bool usable_context = !std::is_void_v<V> && !std::is_same_v<V, bool>;
template <class Fallback, class... V>
struct first_usable { using type = Fallback; };
template <class Fallback, class V, class... Rest>
struct first_usable<Fallback, V, Rest...> {
  using type = std::conditional_t<usable_context<V>, V, typename first_usable<Fallback, Rest...>::type>;
};
template <class Op, class... X>
struct scalar_context {
  using fallback = std::conditional_t<std::is_base_of_v<ops::LogicalOp, Op>, bool, float>;
  using type = typename first_usable<fallback, typename operand_value<X>::type...>::type;
};

template <class T, class X>
KILN_INLINE auto to_node(const X& x) {
  if constexpr (Expression<X>) return x;
  else if constexpr (TensorHandle<X>) return Leaf<typename X::value_type>(x.impl_ptr());
  else if constexpr (std::is_same_v<X, bool>) return Scalar<bool>(x);
  else return Scalar<T>(static_cast<compute_t<T>>(x));
}

// Scalar path for plain numbers: non-bool operands convert to their common type.
template <class Op, class... X>
auto scalar_apply(const X&... x) {
  using C = std::common_type_t<std::conditional_t<std::is_same_v<X, bool>, int, X>...>;
  auto conv = [](auto v) {
    if constexpr (std::is_same_v<decltype(v), bool>) return v;
    else return static_cast<C>(v);
  };
  return Op::scalar(conv(x)...);
}

}  // namespace detail

// Applies an op-table entry (or a user's own op struct) elementwise.
template <class Op, OperandOrScalar... X>
KILN_INLINE auto map(const X&... x) {
  if constexpr (!(Operand<X> || ...)) {
    return detail::scalar_apply<Op>(x...);
  } else {
    using T = typename detail::scalar_context<Op, X...>::type;
    if constexpr (!Op::template check_types<typename decltype(detail::to_node<T>(x))::value_type...>()) {
      // After the check's one "kiln: ..." error, a stand-in of the result's dtype: nothing fails again.
      using R = typename Op::template result<typename decltype(detail::to_node<T>(x))::value_type...>;
      return Scalar<R>(compute_t<R>(0));
    } else {
      return Map<Op, decltype(detail::to_node<T>(x))...>(detail::to_node<T>(x)...);
    }
  }
}

#define KILN_DEFINE_UNARY(fn, Op) \
  template <OperandOrScalar X>    \
  KILN_INLINE auto fn(const X& x) { return map<ops::Op>(x); }
#define KILN_DEFINE_BINARY(fn, Op)                   \
  template <OperandOrScalar A, OperandOrScalar B>    \
  KILN_INLINE auto fn(const A& a, const B& b) { return map<ops::Op>(a, b); }
#define KILN_DEFINE_TERNARY(fn, Op)                                   \
  template <OperandOrScalar C, OperandOrScalar A, OperandOrScalar B>  \
  KILN_INLINE auto fn(const C& c, const A& a, const B& b) { return map<ops::Op>(c, a, b); }
KILN_UNARY_OPS(KILN_DEFINE_UNARY)
KILN_BINARY_OPS(KILN_DEFINE_BINARY)
KILN_TERNARY_OPS(KILN_DEFINE_TERNARY)
#undef KILN_DEFINE_UNARY
#undef KILN_DEFINE_BINARY
#undef KILN_DEFINE_TERNARY

namespace ops {
KILN_UNARY_OPS(KILN_CHECK_SPEC)
KILN_BINARY_OPS(KILN_CHECK_SPEC)
KILN_TERNARY_OPS(KILN_CHECK_SPEC)
KILN_BINARY_NUMBER_OPS(KILN_CHECK_SPEC)
}  // namespace ops

// ---- composite ops: expansions, so SIMD, CUDA and the gradient come from their parts ----------

// clamp's gradient is PyTorch's, which differs from that of maximum and minimum at ties. With number bounds x's
// gradient is 0 at a bound (ops::ClampMin, ClampMax). Tensor bounds split a tie with x as maximum and minimum
// do, except where lo == hi: the gradient goes to lo where x < lo, to hi where x > hi, and to x where x equals
// both (the nested maximum and minimum would split it between them).
template <OperandOrScalar X, OperandOrScalar Lo>
auto clamp_min(const X& x, const Lo& lo) {
  if constexpr (Operand<Lo>) return maximum(x, lo);
  else return map<ops::ClampMin>(x, lo);
}
template <OperandOrScalar X, OperandOrScalar Hi>
auto clamp_max(const X& x, const Hi& hi) {
  if constexpr (Operand<Hi>) return minimum(x, hi);
  else return map<ops::ClampMax>(x, hi);
}
template <OperandOrScalar X, OperandOrScalar Lo, OperandOrScalar Hi>
auto clamp(const X& x, const Lo& lo, const Hi& hi) {
  if constexpr (!Operand<Lo> && !Operand<Hi>) return clamp_max(clamp_min(x, lo), hi);
  else return where(lo == hi, where(x < lo, lo, where(x > hi, hi, x)), minimum(maximum(x, lo), hi));
}

// ---- operators --------------------------------------------------------------------------------

template <class A, class B>
concept OperatorOperands = (Operand<A> || Operand<B>) && OperandOrScalar<A> && OperandOrScalar<B>;

template <Operand X> KILN_INLINE auto operator-(const X& x) { return neg(x); }
template <Operand X> KILN_INLINE auto operator!(const X& x) { return logical_not(x); }
template <Operand X> KILN_INLINE auto operator~(const X& x) { return logical_not(x); }

#define KILN_DEFINE_OPERATOR(sym, fn) \
  template <class A, class B>         \
    requires OperatorOperands<A, B>   \
  KILN_INLINE auto operator sym(const A& a, const B& b) { return fn(a, b); }
KILN_DEFINE_OPERATOR(+, add)
KILN_DEFINE_OPERATOR(-, sub)
KILN_DEFINE_OPERATOR(*, mul)
KILN_DEFINE_OPERATOR(/, div)
KILN_DEFINE_OPERATOR(==, eq)
KILN_DEFINE_OPERATOR(!=, ne)
KILN_DEFINE_OPERATOR(<, lt)
KILN_DEFINE_OPERATOR(<=, le)
KILN_DEFINE_OPERATOR(>, gt)
KILN_DEFINE_OPERATOR(>=, ge)
KILN_DEFINE_OPERATOR(&, logical_and)
KILN_DEFINE_OPERATOR(|, logical_or)
KILN_DEFINE_OPERATOR(^, logical_xor)
KILN_DEFINE_OPERATOR(&&, logical_and)
KILN_DEFINE_OPERATOR(||, logical_or)
#undef KILN_DEFINE_OPERATOR

}  // namespace kiln

#include "kiln/expr/activations.hpp"  // silu, gelu, leaky_relu, elu, ... (composites of the above)
