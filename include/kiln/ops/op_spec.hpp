#pragma once
// What an entry of the op table is. An op is a struct with:
//   name                     the function's name ("exp")
//   info                     OpInfo: cost, test domain, max ULP of the SIMD form against the float64 reference
//   scalar(x...)             the reference, also the scalar path (templated on the compute type)
//   simd(d, v...)            optional Highway form; simd_for<L> says for which lane types it exists
//   cuda                     CUDA source with $0, $1... for the operands; it may call the helpers of
//                            cuda/prelude.hpp (kiln_div...) where plain CUDA would mean something else
//   grad(x..., y, g)         the derivative, an expression over placeholders (x = inputs, y = result,
//                            g = incoming gradient); one result per input (a tuple for several), or
//                            differentiable = false
// and derives from one of the kinds below, which fix its type rules.
#include <concepts>
#include <string_view>
#include <type_traits>
#include <utility>

#include "kiln/core/dtype.hpp"

namespace kiln::ops {

struct OpInfo {
  int cost = 1;            // relative cost per element (1 = an add)
  double lo = -1e4;        // domain the op tests sample
  double hi = 1e4;
  double max_ulp = 0;      // max error of the SIMD form in ULP of the result type
};

// Arithmetic: operands share one dtype, the result has it; no bool arithmetic.
struct SameTypeOp {
  template <class T, class... Ts>
  using result = T;
  // Each check_types fails to compile with one "kiln: ..." line and returns whether the types are
  // accepted, so that map<Op> builds nothing more (no second error) when they are not.
  template <class T, class... Ts>
  static consteval bool check_types() {
    constexpr bool same = (std::is_same_v<T, Ts> && ...);
    static_assert(same, "kiln: operands of an elementwise op have different dtypes; convert one with .to<T>()");
    constexpr bool numeric = !std::is_same_v<T, bool>;
    static_assert(!same || numeric,
                  "kiln: arithmetic on bool tensors is not supported; convert with .to<int32_t>()");
    return same && numeric;
  }
  template <class L>
  static constexpr bool simd_for = std::is_floating_point_v<L>;
};

// Float-only functions (exp, sin, ...): integer operands fail to compile.
struct FloatOp : SameTypeOp {
  template <class T, class... Ts>
  static consteval bool check_types() {
    constexpr bool floating = is_floating_v<T>;
    static_assert(floating, "kiln: this function needs a floating-point tensor; convert it with .to<float>()");
    return floating && SameTypeOp::check_types<T, Ts...>();
  }
};

// Comparisons: operands share one dtype, the result is bool.
struct CompareOp {
  static constexpr bool differentiable = false;
  template <class T, class... Ts>
  using result = bool;
  template <class T, class... Ts>
  static consteval bool check_types() {
    constexpr bool same = (std::is_same_v<T, Ts> && ...);
    static_assert(same, "kiln: operands of a comparison have different dtypes; convert one with .to<T>()");
    return same;
  }
  template <class L>
  static constexpr bool simd_for = std::is_floating_point_v<L> || std::is_same_v<L, int32_t>;
};

// Logical and/or/not: bool operands, bool result.
struct LogicalOp {
  static constexpr bool differentiable = false;
  template <class T, class... Ts>
  using result = bool;
  template <class T, class... Ts>
  static consteval bool check_types() {
    constexpr bool all_bool = std::is_same_v<T, bool> && (std::is_same_v<Ts, bool> && ...);
    static_assert(all_bool, "kiln: logical ops take bool operands; compare first, e.g. x != 0");
    return all_bool;
  }
  template <class L>
  static constexpr bool simd_for = true;
};

template <class Op>
constexpr bool is_differentiable() {
  if constexpr (requires { Op::differentiable; }) return Op::differentiable;
  else return true;
}

namespace detail {
template <size_t>
using real = double;
// The derivative is generic over its placeholders; calling it with doubles shows it exists (and is
// what the derivative tests do against finite differences).
template <class Op, size_t... I>
constexpr bool grad_callable(std::index_sequence<I...>) {
  return requires(real<I>... x) { Op::grad(x..., 0.0, 0.0); };
}
}  // namespace detail

// An op-table entry: a name, an arity, info, CUDA source, and a derivative unless it says
// differentiable = false; a missing derivative is a compile error, never a silent zero.
template <class Op>
concept OpSpec = requires {
  { Op::name } -> std::convertible_to<std::string_view>;
  { Op::arity } -> std::convertible_to<int>;
  { Op::info } -> std::convertible_to<OpInfo>;
  { Op::cuda } -> std::convertible_to<std::string_view>;
} && (!is_differentiable<Op>() || detail::grad_callable<Op>(std::make_index_sequence<Op::arity>{}));

}  // namespace kiln::ops
