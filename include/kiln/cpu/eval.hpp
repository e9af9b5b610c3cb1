#pragma once
// Evaluates an expression tree into a destination in one pass.
//
// The kernel generated for a tree runs it over contiguous arrays (cpu/stage.hpp hands it those,
// staging whatever is strided, broadcast, converted or a row's tail): as Highway vectors when every
// node has a SIMD form for one lane type (capability is the AND over the tree), else element by
// element in each op's compute type. The tree is compiled once per kernel.
#include <hwy/highway.h>

#include <array>
#include <tuple>
#include <type_traits>

#include "kiln/cpu/stage.hpp"
#include "kiln/expr/node.hpp"

namespace kiln {

// ---- scalar path ------------------------------------------------------------------------------
// Leaf I reads ptr[I], an array of its compute type. (Helpers rather than lambdas: a lambda's call
// is not forced inline, and a call per element or per vector costs more than most ops.)

template <int I, class T>
HWY_INLINE compute_t<T> scalar_eval(const Leaf<T>&, char* const* ptr, int64_t j) {
  return reinterpret_cast<const compute_t<T>*>(ptr[I])[j];
}
template <int I, class T>
HWY_INLINE compute_t<T> scalar_eval(const Scalar<T>& s, char* const*, int64_t) {
  return s.value;
}
template <int I, class V, class T>
HWY_INLINE V scalar_eval(const Value<V, T>& v, char* const*, int64_t) {
  return v.value;
}
template <int I, class Op, class... A>
HWY_INLINE auto scalar_eval(const Map<Op, A...>& m, char* const* ptr, int64_t j);
template <int I, class Op, class... A, size_t... K>
HWY_INLINE auto scalar_eval_args(const Map<Op, A...>& m, char* const* ptr, int64_t j, std::index_sequence<K...>) {
  return Op::scalar(scalar_eval<I + leaf_offset<K, A...>()>(arg<K>(m.args), ptr, j)...);
}
template <int I, class Op, class... A>
HWY_INLINE auto scalar_eval(const Map<Op, A...>& m, char* const* ptr, int64_t j) {
  return scalar_eval_args<I>(m, ptr, j, std::index_sequence_for<A...>{});
}

}  // namespace kiln

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- SIMD capability: one lane type for the whole tree, and a SIMD form of every op for it -----

template <class Op, class L>
constexpr bool op_has_simd() {
  if constexpr (requires { Op::template simd_for<L>; }) return Op::template simd_for<L>;
  else return false;
}

template <class V>
using lane_of = std::conditional_t<std::is_same_v<V, bool>, void, compute_t<V>>;

template <class E>
struct simd_plan;
template <class T>
struct simd_plan<Leaf<T>> {
  using lane = lane_of<T>;
  static constexpr bool ok = true;
};
template <class T>
struct simd_plan<Scalar<T>> {
  using lane = lane_of<T>;
  static constexpr bool ok = !std::is_same_v<T, bool>;
};
template <class... Lanes>
struct first_lane { using type = void; };
template <class First, class... Rest>
struct first_lane<First, Rest...> {
  using type = std::conditional_t<std::is_void_v<First>, typename first_lane<Rest...>::type, First>;
};
template <class Op, class... A>
struct simd_plan<Map<Op, A...>> {
  using own = lane_of<typename Map<Op, A...>::value_type>;
  using lane = typename first_lane<own, typename simd_plan<A>::lane...>::type;
  template <class X>
  static constexpr bool agrees = std::is_void_v<X> || std::is_same_v<X, lane>;
  static constexpr bool ok = !std::is_void_v<lane> && (simd_plan<A>::ok && ...) && agrees<own> &&
                             (agrees<typename simd_plan<A>::lane> && ...) && op_has_simd<Op, lane>();
};

// Leaf I is a full vector of the lane type at ptr[I] + j (bool leaves staged as 0/1 lanes).
template <int I, class T, class D>
HWY_INLINE auto simd_eval(const Leaf<T>&, D d, char* const* ptr, int64_t j) {
  const auto v = hn::LoadU(d, reinterpret_cast<const hn::TFromD<D>*>(ptr[I]) + j);
  if constexpr (std::is_same_v<T, bool>) return hn::Ne(v, hn::Zero(d));
  else return v;
}
template <int I, class T, class D>
HWY_INLINE auto simd_eval(const Scalar<T>& s, D d, char* const*, int64_t) {
  return hn::Set(d, hn::TFromD<D>(s.value));
}
template <int I, class V, class T, class D>
HWY_INLINE V simd_eval(const Value<V, T>& v, D, char* const*, int64_t) {
  return v.value;
}
template <int I, class V, class T, class D>
HWY_INLINE V simd_eval(const Value<ValueRef<V>, T>& v, D, char* const*, int64_t) {
  return *v.value.p;
}
template <int I, class Op, class... A, class D>
HWY_INLINE auto simd_eval(const Map<Op, A...>& m, D d, char* const* ptr, int64_t j);
template <int I, class Op, class... A, class D, size_t... K>
HWY_INLINE auto simd_eval_args(const Map<Op, A...>& m, D d, char* const* ptr, int64_t j, std::index_sequence<K...>) {
  return Op::simd(d, simd_eval<I + leaf_offset<K, A...>()>(arg<K>(m.args), d, ptr, j)...);
}
template <int I, class Op, class... A, class D>
HWY_INLINE auto simd_eval(const Map<Op, A...>& m, D d, char* const* ptr, int64_t j) {
  return simd_eval_args<I>(m, d, ptr, j, std::index_sequence_for<A...>{});
}

// A node's value as a vector of lanes: masks (bool results) become 1 and 0.
template <class D, class V>
HWY_INLINE hn::Vec<D> as_lanes(D d, V v) {
  if constexpr (std::is_same_v<V, hn::Vec<D>>) return v;
  else return hn::IfThenElseZero(v, hn::Set(d, hn::TFromD<D>(1)));
}

// The forward kernel: ptr[0] is the output, ptr[1..] the leaves.
template <class E>
void simd_kernel(const void* context, char* const* ptr, int64_t n) {
  const E& e = *static_cast<const E*>(context);
  using L = typename simd_plan<E>::lane;
  const hn::ScalableTag<L> d;
  char* p[leaf_count_v<E> + 1];  // in registers: the caller's array could alias the stores
  for (int k = 0; k <= leaf_count_v<E>; ++k) p[k] = ptr[k];
  L* out = reinterpret_cast<L*>(p[0]);
  for (int64_t j = 0; j < n; j += int64_t(hn::Lanes(d))) hn::StoreU(as_lanes(d, simd_eval<1>(e, d, p, j)), d, out + j);
}

// Several trees over one iteration space, one output each, in one pass: ptr[0..K) are the outputs,
// then each tree's leaves in turn. Every tree is evaluated before any output of the vector is stored,
// so an output may be a leaf of any tree (an optimizer's m = b1 * m + ...).
template <class... E>
struct TreeOffsets {
  static constexpr int count = sizeof...(E);
  static constexpr std::array<int, sizeof...(E)> first_leaf = [] {
    std::array<int, sizeof...(E)> out{};
    int at = int(sizeof...(E));
    int k = 0;
    ((out[k++] = at, at += leaf_count_v<E>), ...);
    return out;
  }();
};

template <class... E, size_t... K>
HWY_INLINE void simd_multi_vector(const std::tuple<const E*...>& trees, char* const* ptr, int64_t j,
                                  std::index_sequence<K...>) {
  using L = typename simd_plan<std::tuple_element_t<0, std::tuple<E...>>>::lane;
  const hn::ScalableTag<L> d;
  const auto values = std::make_tuple(
      as_lanes(d, simd_eval<TreeOffsets<E...>::first_leaf[K]>(*std::get<K>(trees), d, ptr, j))...);
  (hn::StoreU(std::get<K>(values), d, reinterpret_cast<L*>(ptr[K]) + j), ...);
}

template <class... E>
void simd_multi_kernel(const void* context, char* const* ptr, int64_t n) {
  const auto& trees = *static_cast<const std::tuple<const E*...>*>(context);
  using L = typename simd_plan<std::tuple_element_t<0, std::tuple<E...>>>::lane;
  constexpr int nops = (int(sizeof...(E)) + ... + leaf_count_v<E>);
  char* p[nops];
  for (int k = 0; k < nops; ++k) p[k] = ptr[k];
  for (int64_t j = 0; j < n; j += int64_t(hn::Lanes(hn::ScalableTag<L>())))
    simd_multi_vector(trees, p, j, std::index_sequence_for<E...>{});
}

template <class E>
inline int64_t simd_lanes() {
  return int64_t(hn::Lanes(hn::ScalableTag<typename simd_plan<E>::lane>()));
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();

namespace kiln::cpu {

// True when the tree runs as Highway vectors (else the scalar path).
template <class E>
inline constexpr bool is_simd_v = kiln::HWY_NAMESPACE::simd_plan<E>::ok &&
                                  !std::is_void_v<typename kiln::HWY_NAMESPACE::simd_plan<E>::lane>;

// The type the kernel of E holds a value of dtype V in: the lane type on the SIMD path (bool
// values as 0/1 lanes), else V's compute type.
template <class E, class V>
using kernel_t = std::conditional_t<is_simd_v<E>, typename kiln::HWY_NAMESPACE::simd_plan<E>::lane, compute_t<V>>;

// The dtype E's kernel holds a value stored as `stored` in.
template <class E>
constexpr ScalarType kernel_dtype(ScalarType stored) {
  if constexpr (is_simd_v<E>) return scalar_type_of<typename kiln::HWY_NAMESPACE::simd_plan<E>::lane>();
  else return stored == ScalarType::BFloat16 || stored == ScalarType::Half ? ScalarType::Float : stored;
}

// Operand types of E's kernels: outputs first (stored as `outputs`), then the leaves.
template <class E, size_t NOut>
constexpr auto kernel_operands(const std::array<ScalarType, NOut>& outputs) {
  std::array<OperandType, NOut + leaf_count_v<E>> types{};
  for (size_t k = 0; k < NOut; ++k) types[k] = {outputs[k], kernel_dtype<E>(outputs[k]), true};
  for (size_t k = 0; k < leaf_dtypes<E>::value.size(); ++k)
    types[NOut + k] = {leaf_dtypes<E>::value[k], kernel_dtype<E>(leaf_dtypes<E>::value[k]), false};
  return types;
}

// Appends E's leaves' operand types at types[k...], advancing k.
template <class E, size_t N>
void types_of_leaves(std::array<OperandType, N>& types, int& k) {
  for (ScalarType t : leaf_dtypes<E>::value) types[size_t(k++)] = {t, kernel_dtype<E>(t), false};
}

template <class E>
void scalar_kernel(const void* context, char* const* ptr, int64_t n) {
  const E& e = *static_cast<const E*>(context);
  using K = kernel_t<E, typename E::value_type>;
  K* out = reinterpret_cast<K*>(ptr[0]);
  for (int64_t j = 0; j < n; ++j) {
    const auto v = scalar_eval<1>(e, ptr, j);
    if constexpr (std::is_same_v<K, bool>) out[j] = v != decltype(v)(0);
    else out[j] = K(v);
  }
}

// The forward kernel of E.
template <class E>
KernelDesc forward_kernel() {
  if constexpr (is_simd_v<E>) return {&kiln::HWY_NAMESPACE::simd_kernel<E>, kiln::HWY_NAMESPACE::simd_lanes<E>()};
  else return {&scalar_kernel<E>, 1};
}

// dst_k = e_k for every k in one pass (cpu::simd_multi_kernel); the dsts share the iteration shape.
// Every tree must run as Highway vectors of one lane type. The caller has checked shapes, versions
// and overlap (an output may be a leaf read at the same position, nothing else).
template <class... E>
void assign_all(const std::array<const TensorImpl*, sizeof...(E)>& dsts, const E&... e) {
  using First = std::tuple_element_t<0, std::tuple<E...>>;
  static_assert((is_simd_v<E> && ...) &&
                    (std::is_same_v<typename kiln::HWY_NAMESPACE::simd_plan<E>::lane,
                                    typename kiln::HWY_NAMESPACE::simd_plan<First>::lane> && ...),
                "kiln: eval_all fuses expressions that run as SIMD vectors of one lane type (float or double)");
  constexpr int K = int(sizeof...(E));
  constexpr int NOps = (K + ... + leaf_count_v<E>);
  const Shape& shape = dsts[0]->shape;
  LoopPlan<NOps> plan;
  plan.set_shape(shape);
  for (int k = 0; k < K; ++k) plan.set_operand(k, dsts[k], shape);
  int at = K;
  (for_each_leaf(e, [&](const auto& leaf) { plan.set_operand(at++, leaf.impl.get(), shape); }), ...);
  plan.coalesce();
  std::array<OperandType, NOps> types{};
  int k = 0;
  ((types[k] = {dsts[k]->dtype, kernel_dtype<E>(dsts[k]->dtype), true}, ++k), ...);
  ((types_of_leaves<E>(types, k)), ...);
  const std::tuple<const E*...> trees{&e...};
  run_plan(plan, types.data(), {&kiln::HWY_NAMESPACE::simd_multi_kernel<E...>, kiln::HWY_NAMESPACE::simd_lanes<First>()},
           &trees, (1 + ... + tree_traits<E>::cost));
}

// dst = e, elementwise; dst's shape is the iteration shape (e broadcasts to it). The caller has
// checked shapes, versions and overlap.
template <class E>
void assign(const E& e, const TensorImpl& dst) {
  constexpr int NOps = leaf_count_v<E> + 1;
  LoopPlan<NOps> plan;
  plan.set_shape(dst.shape);
  plan.set_operand(0, &dst, dst.shape);
  int k = 1;
  for_each_leaf(e, [&](const auto& leaf) { plan.set_operand(k++, leaf.impl.get(), dst.shape); });
  plan.coalesce();
  static constexpr auto types = kernel_operands<E>(std::array{scalar_type_of<typename E::value_type>()});
  run_plan(plan, types.data(), forward_kernel<E>(), &e, tree_traits<E>::cost + 1);
}

}  // namespace kiln::cpu
