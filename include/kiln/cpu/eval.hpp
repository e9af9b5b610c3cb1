#pragma once
// Evaluates an expression tree into a destination in one pass.
//
// The loop: broadcast every leaf to the output shape, coalesce dims that are contiguous for every
// operand, then walk the rows of the innermost dim. Within a row the tree runs as Highway vectors
// when every node has a SIMD form for one lane type (capability is the AND over the tree),
// otherwise as scalars through the same driver. Partial vectors (row tails, strided or converted
// leaves) go through a small buffer, so a value never depends on where it sits in the array and
// nothing is read or written out of bounds. Rows are split over threads by a cost model.
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "kiln/cpu/parallel.hpp"
#include "kiln/expr/node.hpp"

namespace kiln {

// ---- the loop plan: shape and byte strides of the destination (operand 0) and each leaf -------

template <int NOps>
struct LoopPlan {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  char* base[NOps] = {};
  int64_t step[NOps][kMaxRank] = {};  // bytes

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }

  // Drops size-1 dims and merges neighbours that are contiguous for every operand; leaves rank >= 1.
  void coalesce() {
    int r = 0;
    for (int i = 0; i < rank; ++i) {
      if (shape[i] == 1) continue;
      if (r > 0) {
        bool mergeable = true;
        for (int k = 0; k < NOps; ++k) mergeable &= step[k][r - 1] == step[k][i] * shape[i];
        if (mergeable) {
          shape[r - 1] *= shape[i];
          for (int k = 0; k < NOps; ++k) step[k][r - 1] = step[k][i];
          continue;
        }
      }
      shape[r] = shape[i];
      for (int k = 0; k < NOps; ++k) step[k][r] = step[k][i];
      ++r;
    }
    if (r == 0) {
      shape[0] = 1;
      for (int k = 0; k < NOps; ++k) step[k][0] = 0;
      r = 1;
    }
    rank = r;
  }
};

// Byte pointer and byte step of an operand as the operand of shape `out` (broadcast).
inline void set_operand(int64_t* steps, const TensorImpl& t, const Shape& out) {
  const Strides st = broadcast_strides(t.shape, t.strides, out);
  const int64_t es = int64_t(element_size(t.dtype));
  for (int i = 0; i < out.size(); ++i) steps[i] = st[i] * es;
}

template <class E>
LoopPlan<leaf_count_v<E> + 1> make_plan(const E& e, const TensorImpl& dst) {
  LoopPlan<leaf_count_v<E> + 1> plan;
  const Shape& out = dst.shape;
  plan.rank = out.size();
  for (int i = 0; i < out.size(); ++i) plan.shape[i] = out[i];
  plan.base[0] = dst.data_bytes();
  set_operand(plan.step[0], dst, out);
  int k = 1;
  for_each_leaf(e, [&](const auto& leaf) {
    plan.base[k] = leaf.impl->data_bytes();
    set_operand(plan.step[k], *leaf.impl, out);
    ++k;
  });
  plan.coalesce();
  return plan;
}

template <class T>
inline compute_t<T> load_value(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return compute_t<T>(v);
}

template <class T, class V>
inline void store_value(char* p, V v) {
  T out;
  if constexpr (std::is_same_v<T, bool>) out = v != V(0);
  else out = T(v);
  std::memcpy(p, &out, sizeof(T));
}

// Per row: each leaf's byte pointer at the row start and its byte step along the row. Dense rows
// (every leaf contiguous and of the lane type) take a kernel without per-leaf branches.
template <int N, bool Dense = false>
struct RowCursor {
  static constexpr bool dense = Dense;
  const char* ptr[N > 0 ? N : 1];
  int64_t step[N > 0 ? N : 1];
};

// ---- scalar path ------------------------------------------------------------------------------

template <int I, class T, class C>
HWY_INLINE compute_t<T> scalar_eval(const Leaf<T>&, const C& c, int64_t j) {
  return load_value<T>(c.ptr[I] + j * c.step[I]);
}
template <int I, class T, class C>
HWY_INLINE compute_t<T> scalar_eval(const Scalar<T>& s, const C&, int64_t) {
  return s.value;
}
template <int I, class V, class T, class C>
HWY_INLINE V scalar_eval(const Value<V, T>& v, const C&, int64_t) {
  return v.value;
}
// (Helpers rather than lambdas: a lambda's call is not forced inline, and a call per element or
// per vector costs more than most ops.)
template <int I, class Op, class... A, class C>
HWY_INLINE auto scalar_eval(const Map<Op, A...>& m, const C& c, int64_t j);
template <int I, class Op, class... A, class C, size_t... K>
HWY_INLINE auto scalar_eval_args(const Map<Op, A...>& m, const C& c, int64_t j, std::index_sequence<K...>) {
  return Op::scalar(scalar_eval<I + leaf_offset<K, A...>()>(std::get<K>(m.args), c, j)...);
}
template <int I, class Op, class... A, class C>
HWY_INLINE auto scalar_eval(const Map<Op, A...>& m, const C& c, int64_t j) {
  return scalar_eval_args<I>(m, c, j, std::index_sequence_for<A...>{});
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

template <class D>
inline constexpr size_t kBufferLanes = HWY_MAX_BYTES / sizeof(hn::TFromD<D>);

// A leaf's vector: a plain load when it is contiguous and of the lane type, a broadcast when its
// step is 0, else gathered and converted through a buffer (also for partial vectors).
template <class T, class D>
HWY_INLINE auto load_leaf(D d, const char* p, int64_t step, int64_t j, size_t count) {
  using L = hn::TFromD<D>;
  hn::Vec<D> v;
  if (step == 0) {
    v = hn::Set(d, L(load_value<T>(p)));
  } else if (std::is_same_v<T, L> && step == int64_t(sizeof(T)) && count == hn::Lanes(d)) {
    v = hn::LoadU(d, reinterpret_cast<const L*>(p) + j);
  } else {
    alignas(HWY_MAX_BYTES) L buf[kBufferLanes<D>] = {};
    for (size_t k = 0; k < count; ++k) buf[k] = L(load_value<T>(p + (j + int64_t(k)) * step));
    v = hn::Load(d, buf);
  }
  if constexpr (std::is_same_v<T, bool>) return hn::Ne(v, hn::Zero(d));
  else return v;
}

template <int I, class T, class D, class C>
HWY_INLINE auto simd_eval(const Leaf<T>&, D d, const C& c, int64_t j, size_t count) {
  if constexpr (C::dense) {
    if (count == hn::Lanes(d)) return hn::LoadU(d, reinterpret_cast<const hn::TFromD<D>*>(c.ptr[I]) + j);
  }
  return load_leaf<T>(d, c.ptr[I], c.step[I], j, count);
}
template <int I, class T, class D, class C>
HWY_INLINE auto simd_eval(const Scalar<T>& s, D d, const C&, int64_t, size_t) {
  return hn::Set(d, hn::TFromD<D>(s.value));
}
template <int I, class V, class T, class D, class C>
HWY_INLINE V simd_eval(const Value<V, T>& v, D, const C&, int64_t, size_t) {
  return v.value;
}
template <int I, class Op, class... A, class D, class C>
HWY_INLINE auto simd_eval(const Map<Op, A...>& m, D d, const C& c, int64_t j, size_t count);
template <int I, class Op, class... A, class D, class C, size_t... K>
HWY_INLINE auto simd_eval_args(const Map<Op, A...>& m, D d, const C& c, int64_t j, size_t count,
                               std::index_sequence<K...>) {
  return Op::simd(d, simd_eval<I + leaf_offset<K, A...>()>(std::get<K>(m.args), d, c, j, count)...);
}
template <int I, class Op, class... A, class D, class C>
HWY_INLINE auto simd_eval(const Map<Op, A...>& m, D d, const C& c, int64_t j, size_t count) {
  return simd_eval_args<I>(m, d, c, j, count, std::index_sequence_for<A...>{});
}

template <class Dst, class D, class V>
HWY_INLINE void store_vector(D d, V v, char* p, int64_t step, int64_t j, size_t count) {
  using L = hn::TFromD<D>;
  if constexpr (!std::is_same_v<V, hn::Vec<D>>) {  // a mask: bool results
    store_vector<Dst>(d, hn::IfThenElseZero(v, hn::Set(d, L(1))), p, step, j, count);
  } else {
    if (std::is_same_v<Dst, L> && step == int64_t(sizeof(L)) && count == hn::Lanes(d)) {
      hn::StoreU(v, d, reinterpret_cast<L*>(p) + j);
      return;
    }
    alignas(HWY_MAX_BYTES) L buf[kBufferLanes<D>];
    hn::Store(v, d, buf);
    for (size_t k = 0; k < count; ++k) store_value<Dst>(p + (j + int64_t(k)) * step, buf[k]);
  }
}

// True when every leaf of the tree is stored as the lane type L (so a row can be dense).
template <class L, class E>
struct stores_lane : std::false_type {};
template <class L>
struct stores_lane<L, Leaf<L>> : std::true_type {};
template <class L, class T>
struct stores_lane<L, Scalar<T>> : std::true_type {};
template <class L, class Op, class... A>
struct stores_lane<L, Map<Op, A...>> : std::bool_constant<(stores_lane<L, A>::value && ...)> {};

template <class Dst, class E, class C>
HWY_INLINE void simd_segment(const E& e, char* dst, int64_t dstep, const C& c, int64_t j, int64_t end) {
  const hn::ScalableTag<typename simd_plan<E>::lane> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  // One call site for the tree (the row's tail is a partial vector through the same code): each
  // inlined copy of a deep tree costs compile time.
  for (; j < end; j += lanes) {
    const size_t count = size_t(std::min(lanes, end - j));
    store_vector<Dst>(d, simd_eval<0>(e, d, c, j, count), dst, dstep, j, count);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();

namespace kiln::cpu {

// True when the tree runs as Highway vectors (else the scalar path).
template <class E>
inline constexpr bool is_simd_v = kiln::HWY_NAMESPACE::simd_plan<E>::ok &&
                                  !std::is_void_v<typename kiln::HWY_NAMESPACE::simd_plan<E>::lane>;

// Walks the flat index range [begin, end) of the plan's iteration space row by row and calls
// row(dst_ptr, cursor, col_begin, col_end) with pointers at the start of each row.
template <int NOps, class RowFn>
void for_each_row(const LoopPlan<NOps>& plan, int64_t begin, int64_t end, RowFn&& row) {
  const int inner = plan.rank - 1;
  const int64_t len = plan.shape[inner];
  int64_t idx[kMaxRank] = {};
  int64_t r = begin / len, col = begin % len;
  for (int i = inner - 1; i >= 0; --i) {
    idx[i] = r % plan.shape[i];
    r /= plan.shape[i];
  }
  char* dst = plan.base[0];
  RowCursor<NOps - 1> c;
  for (int k = 0; k + 1 < NOps; ++k) {
    c.ptr[k] = plan.base[k + 1];
    c.step[k] = plan.step[k + 1][inner];
  }
  auto offset = [&](int k) {
    int64_t o = 0;
    for (int i = 0; i < inner; ++i) o += idx[i] * plan.step[k][i];
    return o;
  };
  dst += offset(0);
  for (int k = 1; k < NOps; ++k) c.ptr[k - 1] += offset(k);
  while (begin < end) {
    const int64_t stop = std::min(len, col + (end - begin));
    row(dst, c, col, stop);
    begin += stop - col;
    col = 0;
    for (int i = inner - 1; i >= 0; --i) {  // odometer step to the next row
      dst += plan.step[0][i];
      for (int k = 1; k < NOps; ++k) c.ptr[k - 1] += plan.step[k][i];
      if (++idx[i] < plan.shape[i]) break;
      dst -= plan.step[0][i] * plan.shape[i];
      for (int k = 1; k < NOps; ++k) c.ptr[k - 1] -= plan.step[k][i] * plan.shape[i];
      idx[i] = 0;
    }
  }
}

// dst = e, elementwise; dst's shape is the iteration shape (e broadcasts to it). The caller has
// checked shapes, versions and overlap.
template <class E>
void assign(const E& e, const TensorImpl& dst) {
  using Dst = typename E::value_type;
  auto plan = make_plan(e, dst);
  constexpr int plan_ops = leaf_count_v<E> + 1;
  const int64_t dstep = plan.step[0][plan.rank - 1];
  constexpr int64_t cost = tree_traits<E>::cost + 1;
  parallel_for(plan.numel(), cost, 64, [&](int64_t begin, int64_t end) {
    for_each_row(plan, begin, end, [&](char* out, const auto& c, int64_t j, int64_t stop) {
      if constexpr (is_simd_v<E>) {
        namespace kh = kiln::HWY_NAMESPACE;
        using L = typename kh::simd_plan<E>::lane;
        if constexpr (std::is_same_v<Dst, L> && kh::stores_lane<L, E>::value) {
          bool dense = dstep == int64_t(sizeof(L));
          for (int k = 0; k + 1 < plan_ops; ++k) dense &= c.step[k] == int64_t(sizeof(L));
          if (dense) {
            RowCursor<plan_ops - 1, true> dc;
            std::copy(std::begin(c.ptr), std::end(c.ptr), dc.ptr);
            std::copy(std::begin(c.step), std::end(c.step), dc.step);
            kh::simd_segment<Dst>(e, out, dstep, dc, j, stop);
            return;
          }
        }
        kh::simd_segment<Dst>(e, out, dstep, c, j, stop);
      } else {
        for (; j < stop; ++j) store_value<Dst>(out + j * dstep, scalar_eval<0>(e, c, j));
      }
    });
  });
}

}  // namespace kiln::cpu
