#pragma once
// The backward of a fused expression, derived from the op table at compile time.
//
// At each position (a SIMD vector, or one element on the scalar path) a forward sweep computes
// every node's value once and keeps it in a tape shaped like the tree; a reverse sweep then calls
// each op's derivative with its placeholders bound to tape values (Value nodes) and hands each
// child its adjoint, down to the leaves. One instantiation per node in each sweep: compile time and
// run time are linear in the tree's size (binding placeholders to sub-expressions would be
// quadratic, DESIGN.md). Nothing but the leaves is saved: the forward values are recomputed.
#include <array>
#include <tuple>
#include <type_traits>

#include "kiln/cpu/eval.hpp"
#include "kiln/expr/functions.hpp"

namespace kiln::autograd {

namespace detail {
template <size_t>
using real = double;
// Whether child K of Op receives a gradient: Op is differentiable and its derivative does not put
// NoGrad at K (where's condition). Read off the derivative's type when called with doubles.
template <class Op, size_t K, size_t... I>
constexpr bool child_gets_grad(std::index_sequence<I...>) {
  if constexpr (!ops::is_differentiable<Op>()) {
    return false;
  } else {
    using R = decltype(Op::grad(real<I>(0)..., 0.0, 0.0));
    if constexpr (sizeof...(I) == 1) return true;
    else return !std::is_same_v<std::remove_cvref_t<std::tuple_element_t<K, R>>, NoGrad>;
  }
}

template <class E>
struct reach;
template <class T>
struct reach<Leaf<T>> {
  static constexpr auto mask = std::array<bool, 1>{is_floating_v<T>};
};
template <class T>
struct reach<Scalar<T>> {
  static constexpr std::array<bool, 0> mask{};
};
template <class Op, class... A>
struct reach<Map<Op, A...>> {
  static constexpr auto compute() {
    std::array<bool, (0 + ... + tree_traits<A>::leaves)> out{};
    size_t pos = 0;
    auto add = [&](auto k_constant, const auto& child_mask) {
      constexpr size_t k = decltype(k_constant)::value;
      constexpr bool flows = child_gets_grad<Op, k>(std::make_index_sequence<Op::arity>{});
      for (bool b : child_mask) out[pos++] = flows && b;
    };
    [&]<size_t... K>(std::index_sequence<K...>) {
      (add(std::integral_constant<size_t, K>{}, reach<A>::mask), ...);
    }(std::index_sequence_for<A...>{});
    return out;
  }
  static constexpr auto mask = compute();
};
}  // namespace detail

// For each leaf of E (in leaf order): whether a gradient can flow to it.
template <class E>
inline constexpr auto gradient_reaches = detail::reach<E>::mask;

}  // namespace kiln::autograd

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {

// The tape: a node's value and its children's tapes.
template <class V>
struct TapeLeaf {
  V value;
};
template <class V, class... Children>
struct TapeNode {
  V value;
  ArgPack<Children...> children;
};

// Evaluation policies for the two sweeps over the kernel's arrays (cpu/eval.hpp): Highway vectors
// at position j, or element j.
template <class D>
struct SimdSweep {
  D d;
  char* const* ptr;
  int64_t j;
  template <int I, class E>
  HWY_INLINE auto eval(const E& e) const { return simd_eval<I>(e, d, ptr, j); }
  template <class Op, class... V>
  HWY_INLINE auto apply(const V&... v) const { return Op::simd(d, v...); }
  template <class V>
  using dtype_of = std::conditional_t<std::is_same_v<V, hn::Vec<D>>, hn::TFromD<D>, bool>;
};
struct ScalarSweep {
  char* const* ptr;
  int64_t j;
  template <int I, class E>
  HWY_INLINE auto eval(const E& e) const { return scalar_eval<I>(e, ptr, j); }
  template <class Op, class... V>
  HWY_INLINE auto apply(const V&... v) const { return Op::scalar(v...); }
  template <class V>
  using dtype_of = V;
};

template <int I, class T, class S>
inline auto tape_forward(const Leaf<T>& leaf, const S& s) {
  return TapeLeaf<decltype(s.template eval<I>(leaf))>{s.template eval<I>(leaf)};
}
template <int I, class T, class S>
inline auto tape_forward(const Scalar<T>& scalar, const S& s) {
  return TapeLeaf<decltype(s.template eval<I>(scalar))>{s.template eval<I>(scalar)};
}
template <int I, class Op, class... A, class S>
inline auto tape_forward(const Map<Op, A...>& m, const S& s);
// `given`: null, or the node's value already computed (the stored output, for the root).
template <int I, class Op, class... A, class S, class Given, size_t... K>
inline auto tape_forward_args(const Map<Op, A...>& m, const S& s, const Given* given, std::index_sequence<K...>) {
  using Children = ArgPack<decltype(tape_forward<I + leaf_offset<K, A...>()>(arg<K>(m.args), s))...>;
  const Children children{tape_forward<I + leaf_offset<K, A...>()>(arg<K>(m.args), s)...};
  using V = std::remove_const_t<decltype(s.template apply<Op>(arg<K>(children).value...))>;
  static_assert(std::is_same_v<Given, V> || std::is_null_pointer_v<Given>);
  const V value = [&] {
    if constexpr (std::is_same_v<Given, V>) return *given;
    else return s.template apply<Op>(arg<K>(children).value...);
  }();
  return TapeNode<V, decltype(tape_forward<I + leaf_offset<K, A...>()>(arg<K>(m.args), s))...>{value, children};
}
template <int I, class Op, class... A, class S>
inline auto tape_forward(const Map<Op, A...>& m, const S& s) {
  return tape_forward_args<I>(m, s, static_cast<const std::nullptr_t*>(nullptr), std::index_sequence_for<A...>{});
}
// The tape of a root whose value is stored (the output of a materialized expression): its children's values
// are computed, its own is not (its derivative reads only the output, so the compiler drops what computed
// the root's operands unless another derivative needs them).
template <int I, class Op, class... A, class S, class V>
inline auto tape_forward_given(const Map<Op, A...>& m, const S& s, const V& value) {
  return tape_forward_args<I>(m, s, &value, std::index_sequence_for<A...>{});
}

// The derivative of a node bound to its tape: one result per child (a unary derivative's single
// expression becomes a 1-tuple).
template <class Op, class S, class Tape, class Adj, size_t... K>
inline auto bound_grads(const Tape& t, const Adj& adj, std::index_sequence<K...>) {
  auto value = [](const auto& v) {
    using V = std::remove_cvref_t<decltype(v)>;
    if constexpr (std::is_arithmetic_v<V>) return Value<V, typename S::template dtype_of<V>>(v);
    else return Value<ValueRef<V>, typename S::template dtype_of<V>>(ValueRef<V>{&v});
  };
  auto g = Op::grad(value(arg<K>(t.children).value)..., value(t.value), value(adj));
  if constexpr (sizeof...(K) == 1) return std::make_tuple(g);
  else return g;
}

template <int I, class T, class S, class Tape, class Adj, class Sink>
inline void tape_backward(const Leaf<T>&, const S&, const Tape&, const Adj& adj, Sink& sink) {
  sink.template leaf<I, T>(adj);
}
template <int I, class T, class S, class Tape, class Adj, class Sink>
inline void tape_backward(const Scalar<T>&, const S&, const Tape&, const Adj&, Sink&) {}
template <int I, class Op, class... A, class S, class Tape, class Adj, class Sink>
inline void tape_backward(const Map<Op, A...>& m, const S& s, const Tape& t, const Adj& adj, Sink& sink);
template <int I, class Op, class... A, class S, class Tape, class Adj, class Sink, size_t... K>
inline void tape_backward_args(const Map<Op, A...>& m, const S& s, const Tape& t, const Adj& adj, Sink& sink,
                                   std::index_sequence<K...> ks) {
  const auto grads = bound_grads<Op, S>(t, adj, ks);
  auto child = [&](auto k_constant) {
    constexpr size_t k = decltype(k_constant)::value;
    using G = std::remove_cvref_t<std::tuple_element_t<k, std::remove_cvref_t<decltype(grads)>>>;
    if constexpr (!std::is_same_v<G, NoGrad>) {
      const auto& child_tape = arg<k>(t.children);
      // The adjoint takes the child's type (they differ only across a cast, on the scalar path).
      using ChildV = std::remove_cvref_t<decltype(child_tape.value)>;
      const auto raw = s.template eval<0>(std::get<k>(grads));
      if constexpr (std::is_arithmetic_v<ChildV>)
        tape_backward<I + leaf_offset<k, A...>()>(arg<k>(m.args), s, child_tape, ChildV(raw), sink);
      else
        tape_backward<I + leaf_offset<k, A...>()>(arg<k>(m.args), s, child_tape, raw, sink);
    }
  };
  (child(std::integral_constant<size_t, K>{}), ...);
}
template <int I, class Op, class... A, class S, class Tape, class Adj, class Sink>
inline void tape_backward(const Map<Op, A...>& m, const S& s, const Tape& t, const Adj& adj, Sink& sink) {
  if constexpr (ops::is_differentiable<Op>()) tape_backward_args<I>(m, s, t, adj, sink, std::index_sequence_for<A...>{});
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();
