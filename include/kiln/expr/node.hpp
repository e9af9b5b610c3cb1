#pragma once
// The nodes of a lazy expression tree. Leaves hold their tensor by reference-counted handle and
// remember its version, so an expression never dangles and never reads data modified after it was
// built. Inner nodes hold their children by value.
#include <algorithm>
#include <array>
#include <memory>
#include <utility>
#include <type_traits>

#include "kiln/core/concepts.hpp"
#include "kiln/core/tensor_impl.hpp"
#include "kiln/ops/cast.hpp"

namespace kiln {

template <class Derived>
struct ExprBase {
  using kiln_expr = void;
  const Derived& self() const { return static_cast<const Derived&>(*this); }
  // Lazy conversion to another dtype.
  template <Dtype U>
  auto to() const;
  // Evaluates into a new tensor (defined with the Tensor class).
  auto eval() const;
};

template <Dtype T>
struct Leaf : ExprBase<Leaf<T>> {
  using value_type = T;
  std::shared_ptr<TensorImpl> impl;
  uint64_t version = 0;

  explicit Leaf(std::shared_ptr<TensorImpl> i) : impl(std::move(i)), version(impl->version()) {}
  Shape shape() const { return impl->shape; }
};

template <Dtype T>
struct Scalar : ExprBase<Scalar<T>> {
  using value_type = T;
  compute_t<T> value;
  explicit Scalar(compute_t<T> v) : value(v) {}
  Shape shape() const { return {}; }
};

// A node's children: a plain aggregate rather than std::tuple, whose instantiation costs compile
// time at every node of every tree. Ops take one to four arguments.
template <class... A>
struct ArgPack;
template <class A0>
struct ArgPack<A0> { static constexpr size_t size = 1; A0 a0; };
template <class A0, class A1>
struct ArgPack<A0, A1> { static constexpr size_t size = 2; A0 a0; A1 a1; };
template <class A0, class A1, class A2>
struct ArgPack<A0, A1, A2> { static constexpr size_t size = 3; A0 a0; A1 a1; A2 a2; };
template <class A0, class A1, class A2, class A3>
struct ArgPack<A0, A1, A2, A3> { static constexpr size_t size = 4; A0 a0; A1 a1; A2 a2; A3 a3; };

template <size_t K, class P>
constexpr auto& arg(P& p) {
  if constexpr (K == 0) return p.a0;
  else if constexpr (K == 1) return p.a1;
  else if constexpr (K == 2) return p.a2;
  else return p.a3;
}

// f(children...) for a pack (const or not).
template <class P, class F>
constexpr decltype(auto) apply_args(P& p, F&& f) {
  return [&]<size_t... K>(std::index_sequence<K...>) -> decltype(auto) {
    return f(arg<K>(p)...);
  }(std::make_index_sequence<std::remove_const_t<P>::size>{});
}

template <class Op, Expression... Args>
struct Map : ExprBase<Map<Op, Args...>> {
  static_assert(sizeof...(Args) >= 1 && sizeof...(Args) <= 4, "kiln: an op takes one to four arguments");
  using value_type = typename Op::template result<typename Args::value_type...>;
  using op_type = Op;
  ArgPack<Args...> args;

  explicit Map(Args... a) : args{std::move(a)...} {}
  Shape shape() const {
    return apply_args(args, [](const auto&... a) { return broadcast_all(a.shape()...); });
  }

 private:
  static Shape broadcast_all(const Shape& first, const auto&... rest) {
    Shape s = first;
    ((s = broadcast_shapes(s, rest, Op::name.data())), ...);
    return s;
  }
};

// A value at one position (a Highway vector or mask, or a plain number) used as an expression: the
// placeholders of a derivative are bound to these in the fused backward (autograd/derive.hpp).
// A Value that refers to a vector kept elsewhere (the fused backward's tape, autograd/derive.hpp): an
// expression over vectors held by value is aligned like a vector, so its scalars were copied as whole
// vectors through the stack (a 4-byte store read back 64 bytes wide cannot be forwarded).
template <class V>
struct ValueRef {
  const V* p;
};

template <class V, Dtype T>
struct Value : ExprBase<Value<V, T>> {
  using value_type = T;
  V value;
  explicit Value(V v) : value(v) {}
  Shape shape() const { return {}; }
};

template <class Derived>
template <Dtype U>
auto ExprBase<Derived>::to() const {
  if constexpr (std::is_same_v<typename Derived::value_type, U>) return self();
  else return Map<ops::Cast<U>, Derived>(self());
}

// ---- compile-time facts about a tree ----------------------------------------------------------

template <class E>
struct tree_traits;

template <class T>
struct tree_traits<Leaf<T>> {
  static constexpr int leaves = 1;
  static constexpr int cost = 1;
};
template <class T>
struct tree_traits<Scalar<T>> {
  static constexpr int leaves = 0;
  static constexpr int cost = 0;
};
template <class V, class T>
struct tree_traits<Value<V, T>> {
  static constexpr int leaves = 0;
  static constexpr int cost = 0;
};
template <class Op, class... A>
struct tree_traits<Map<Op, A...>> {
  static constexpr int leaves = (0 + ... + tree_traits<A>::leaves);
  static constexpr int cost = Op::info.cost + (0 + ... + tree_traits<A>::cost);
};

template <class E>
inline constexpr int leaf_count_v = tree_traits<E>::leaves;

// Index of the first leaf of argument K among a node's leaves.
template <size_t K, class... A>
constexpr int leaf_offset() {
  constexpr int counts[] = {0, tree_traits<A>::leaves...};
  int sum = 0;
  for (size_t i = 0; i < K; ++i) sum += counts[i + 1];
  return sum;
}

// The dtypes of a tree's leaves, in leaf order.
template <class E>
struct leaf_dtypes {
  static constexpr std::array<ScalarType, 0> value{};
};
template <class T>
struct leaf_dtypes<Leaf<T>> {
  static constexpr std::array<ScalarType, 1> value{scalar_type_of<T>()};
};
template <class Op, class... A>
struct leaf_dtypes<Map<Op, A...>> {
  static constexpr auto concat() {
    std::array<ScalarType, (0 + ... + tree_traits<A>::leaves)> out{};
    size_t k = 0;
    ((std::copy(leaf_dtypes<A>::value.begin(), leaf_dtypes<A>::value.end(), out.begin() + k),
      k += leaf_dtypes<A>::value.size()), ...);
    return out;
  }
  static constexpr auto value = concat();
};

// Calls f(leaf) for each leaf, left to right: the order that numbers them.
template <class T, class F>
void for_each_leaf(const Leaf<T>& leaf, F&& f) { f(leaf); }
template <class T, class F>
void for_each_leaf(const Scalar<T>&, F&&) {}
template <class V, class T, class F>
void for_each_leaf(const Value<V, T>&, F&&) {}
template <class Op, class... A, class F>
void for_each_leaf(const Map<Op, A...>& m, F&& f) {
  apply_args(m.args, [&](const auto&... a) { (for_each_leaf(a, f), ...); });
}

// Drops the tree's references to its leaves' tensors (a saved expression after its backward ran).
template <class T>
void release_leaves(Leaf<T>& leaf) { leaf.impl.reset(); }
template <class T>
void release_leaves(Scalar<T>&) {}
template <class Op, class... A>
void release_leaves(Map<Op, A...>& m) {
  apply_args(m.args, [](auto&... a) { (release_leaves(a), ...); });
}

}  // namespace kiln
