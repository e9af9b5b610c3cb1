#pragma once
// Reductions that consume expressions directly: sum(a * b) is one pass over a and b.
//
// The driver broadcasts every leaf to the input shape and gives the output a step of 0 along the
// reduced dims, orders the dims by the leaves' strides (most contiguous innermost; arg* reductions
// keep the logical order, which defines their indices and first occurrence), then runs one of two
// loops:
//   inner mode (the most contiguous dim is reduced): each output folds a contiguous range of the
//     iteration space. Row segments of the expression are evaluated by the fused row kernels of
//     cpu/eval.hpp into a small stack buffer (a plain contiguous leaf is read in place) and folded;
//   outer mode (the most contiguous dim is kept, e.g. sum over dim 0 of a row-major matrix): whole
//     rows are folded elementwise into a block of column accumulators, so memory is read along rows
//     and never strided down columns.
// Determinism: the work is cut into blocks whose edges depend only on the shapes and layouts
// (kReduceChunk elements per partial in inner mode; kReduceColBlock columns by kReduceOuterChunk
// elements in outer mode), never on the thread count, and partials combine in a fixed order, so a
// result is bitwise the same for any kiln::set_num_threads value.
// Accuracy: float sums, means, variances and norms accumulate in double.
#include <hwy/highway.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kiln/cpu/eval.hpp"
#include "kiln/ops/registry.hpp"

namespace kiln::cpu {

inline constexpr int64_t kReduceBlock = 2048;              // buffer of evaluated values (elements)
inline constexpr int64_t kReduceChunk = int64_t(1) << 15;  // inner mode: elements per partial result
inline constexpr int64_t kReduceColBlock = 2048;           // outer mode: columns per accumulator block
inline constexpr int64_t kReduceOuterChunk = int64_t(1) << 18;  // outer mode: elements per partial block
inline constexpr int kReduceRowGroup = 8;                    // outer mode: rows folded together
inline constexpr int64_t kReduceMinRow = 16;                 // shorter contiguous rows: see make_reduce_plan

}  // namespace kiln::cpu

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace red {
namespace hn = hwy::HWY_NAMESPACE;

template <class V>
inline constexpr bool is_float_v = std::is_same_v<V, float> || std::is_same_v<V, double>;

// ---- per-element transforms applied before accumulating (scalar and Highway forms) ------------

struct Ident {
  static constexpr bool simd_ok = true;
  template <class T> T scalar(T x) const { return x; }
  template <class D, class V> HWY_INLINE V simd(D, V v) const { return v; }
};
struct AbsT {
  static constexpr bool simd_ok = true;
  template <class T> T scalar(T x) const { return std::abs(x); }
  template <class D, class V> HWY_INLINE V simd(D, V v) const { return hn::Abs(v); }
};
struct SquareT {
  static constexpr bool simd_ok = true;
  template <class T> T scalar(T x) const { return x * x; }
  template <class D, class V> HWY_INLINE V simd(D, V v) const { return hn::Mul(v, v); }
};
struct NonZeroT {  // the 0-"norm": counts nonzeros (NaN counts)
  static constexpr bool simd_ok = true;
  template <class T> T scalar(T x) const { return x != T(0) ? T(1) : T(0); }
  template <class D, class V> HWY_INLINE V simd(D d, V v) const {
    return hn::IfThenElseZero(hn::Ne(v, hn::Zero(d)), hn::Set(d, hn::TFromD<D>(1)));
  }
};
struct SqDevT {  // (x - mean)^2, for the second pass of a variance
  static constexpr bool simd_ok = true;
  double mean = 0;
  template <class T> T scalar(T x) const { return (x - T(mean)) * (x - T(mean)); }
  template <class D, class V> HWY_INLINE V simd(D d, V v) const {
    const V t = hn::Sub(v, hn::Set(d, hn::TFromD<D>(mean)));
    return hn::Mul(t, t);
  }
};
struct PowAbsT {  // |x|^p for a general p-norm (scalar only)
  static constexpr bool simd_ok = false;
  double p = 2;
  template <class T> T scalar(T x) const { return T(std::pow(std::abs(double(x)), p)); }
  template <class D, class V> HWY_INLINE V simd(D, V v) const { return v; }
};

// Loads Lanes(dd) values of V (float or double) as doubles.
template <class V, class DD>
HWY_INLINE hn::Vec<DD> load_double(DD dd, const V* p) {
  if constexpr (std::is_same_v<V, double>) {
    return hn::LoadU(dd, p);
  } else {
    const hn::Rebind<float, DD> df;
    return hn::PromoteTo(dd, hn::LoadU(df, p));
  }
}

inline constexpr size_t kMaxDoubleLanes = HWY_MAX_BYTES / sizeof(double);

// Sum over p[0, n) of tf(x), x promoted to double: four vector accumulators, tail masked.
// A plain float sum first adds groups of four values in float (two levels), then promotes: a
// quarter of the conversions, which bound a sum once the data is in cache (0.037 ns per element
// against 0.071 for promoting every value, 256 KB, AVX-512). Each group's rounding is at most
// 2 * 2^-24 times its sum of magnitudes, so the error stays far below 1e-6 of the sum of magnitudes.
template <class Tf, class V>
HWY_INLINE double sum_block(const Tf& tf, const V* p, int64_t n) {
  const hn::ScalableTag<double> dd;
  const int64_t N = int64_t(hn::Lanes(dd));
  auto a0 = hn::Zero(dd), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  if constexpr (std::is_same_v<V, float> && std::is_same_v<Tf, Ident>) {
    const hn::Rebind<float, decltype(dd)> df;
    auto quad = [&](const float* q) {
      return hn::PromoteTo(dd, hn::Add(hn::Add(hn::LoadU(df, q), hn::LoadU(df, q + N)),
                                       hn::Add(hn::LoadU(df, q + 2 * N), hn::LoadU(df, q + 3 * N))));
    };
    for (; i + 16 * N <= n; i += 16 * N) {
      a0 = hn::Add(a0, quad(p + i));
      a1 = hn::Add(a1, quad(p + i + 4 * N));
      a2 = hn::Add(a2, quad(p + i + 8 * N));
      a3 = hn::Add(a3, quad(p + i + 12 * N));
    }
  }
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, tf.simd(dd, load_double(dd, p + i)));
    a1 = hn::Add(a1, tf.simd(dd, load_double(dd, p + i + N)));
    a2 = hn::Add(a2, tf.simd(dd, load_double(dd, p + i + 2 * N)));
    a3 = hn::Add(a3, tf.simd(dd, load_double(dd, p + i + 3 * N)));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, tf.simd(dd, load_double(dd, p + i)));
  if (i < n) {
    alignas(HWY_MAX_BYTES) V tmp[kMaxDoubleLanes] = {};
    std::memcpy(tmp, p + i, size_t(n - i) * sizeof(V));
    a1 = hn::Add(a1, hn::IfThenElseZero(hn::FirstN(dd, size_t(n - i)), tf.simd(dd, load_double(dd, tmp))));
  }
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// acc[k] += tf(p[k]) in double, k in [0, n).
template <class Tf, class V>
HWY_INLINE void add_cols(const Tf& tf, double* acc, const V* p, int64_t n) {
  const hn::ScalableTag<double> dd;
  const int64_t N = int64_t(hn::Lanes(dd));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(dd, acc + i), tf.simd(dd, load_double(dd, p + i))), dd, acc + i);
  for (; i < n; ++i) acc[i] += tf.scalar(double(p[i]));
}

// Max (or min) of tf(x) over p[0, n) starting from init; NaN if any tf(x) is NaN.
template <bool kMax, class Tf, class V>
HWY_INLINE V extreme_block(const Tf& tf, const V* p, int64_t n, V init) {
  const hn::ScalableTag<V> d;
  const int64_t N = int64_t(hn::Lanes(d));
  auto m0 = hn::Set(d, init), m1 = m0;
  auto nan0 = hn::Zero(d), nan1 = nan0;
  auto step = [&](auto& m, auto& nan, auto v) {
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(v)));
    m = kMax ? hn::Max(m, v) : hn::Min(m, v);
  };
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    step(m0, nan0, tf.simd(d, hn::LoadU(d, p + i)));
    step(m1, nan1, tf.simd(d, hn::LoadU(d, p + i + N)));
  }
  for (; i + N <= n; i += N) step(m0, nan0, tf.simd(d, hn::LoadU(d, p + i)));
  if (i < n) {
    alignas(HWY_MAX_BYTES) V tmp[HWY_MAX_BYTES / sizeof(V)] = {};
    std::memcpy(tmp, p + i, size_t(n - i) * sizeof(V));
    step(m1, nan1, hn::IfThenElse(hn::FirstN(d, size_t(n - i)), tf.simd(d, hn::Load(d, tmp)), hn::Set(d, init)));
  }
  if (!hn::AllFalse(d, hn::MaskFromVec(hn::Or(nan0, nan1)))) return std::numeric_limits<V>::quiet_NaN();
  const auto m = kMax ? hn::Max(m0, m1) : hn::Min(m0, m1);
  return hn::GetLane(kMax ? hn::MaxOfLanes(d, m) : hn::MinOfLanes(d, m));
}

// acc[k] = max(acc[k], tf(p[k])) (or min), NaN sticky.
template <bool kMax, class Tf, class V>
HWY_INLINE void extreme_cols(const Tf& tf, V* acc, const V* p, int64_t n) {
  const hn::ScalableTag<V> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto a = hn::LoadU(d, acc + i), v = tf.simd(d, hn::LoadU(d, p + i));
    const auto take = hn::Or(hn::IsNaN(v), kMax ? hn::Gt(v, a) : hn::Lt(v, a));
    hn::StoreU(hn::IfThenElse(take, v, a), d, acc + i);
  }
  for (; i < n; ++i) {
    const V v = tf.scalar(p[i]);
    if (std::isnan(v) || (kMax ? v > acc[i] : v < acc[i])) acc[i] = v;
  }
}

// acc[k] += tf(rows[0][k]) + ... + tf(rows[g-1][k]) in double: the rows are summed in registers, so
// the accumulators are read and written once per group of rows.
template <class Tf, class V>
HWY_INLINE void add_rows(const Tf& tf, double* acc, const V* const* rows, int g, int64_t n) {
  const hn::ScalableTag<double> dd;
  const int64_t N = int64_t(hn::Lanes(dd));
  int64_t j = 0;
  for (; j + 2 * N <= n; j += 2 * N) {
    auto s0 = tf.simd(dd, load_double(dd, rows[0] + j)), s1 = tf.simd(dd, load_double(dd, rows[0] + j + N));
    for (int r = 1; r < g; ++r) {
      s0 = hn::Add(s0, tf.simd(dd, load_double(dd, rows[r] + j)));
      s1 = hn::Add(s1, tf.simd(dd, load_double(dd, rows[r] + j + N)));
    }
    hn::StoreU(hn::Add(hn::LoadU(dd, acc + j), s0), dd, acc + j);
    hn::StoreU(hn::Add(hn::LoadU(dd, acc + j + N), s1), dd, acc + j + N);
  }
  for (; j + N <= n; j += N) {
    auto s0 = tf.simd(dd, load_double(dd, rows[0] + j));
    for (int r = 1; r < g; ++r) s0 = hn::Add(s0, tf.simd(dd, load_double(dd, rows[r] + j)));
    hn::StoreU(hn::Add(hn::LoadU(dd, acc + j), s0), dd, acc + j);
  }
  for (; j < n; ++j) {
    double s0 = tf.scalar(double(rows[0][j]));
    for (int r = 1; r < g; ++r) s0 += tf.scalar(double(rows[r][j]));
    acc[j] += s0;
  }
}

// acc[k] = max (or min) of acc[k] and tf(rows[r][k]) for every row r, NaN sticky.
template <bool kMax, class Tf, class V>
HWY_INLINE void extreme_rows(const Tf& tf, V* acc, const V* const* rows, int g, int64_t n) {
  const hn::ScalableTag<V> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t j = 0;
  for (; j + N <= n; j += N) {
    auto a = hn::LoadU(d, acc + j);
    for (int r = 0; r < g; ++r) {
      const auto v = tf.simd(d, hn::LoadU(d, rows[r] + j));
      a = hn::IfThenElse(hn::Or(hn::IsNaN(v), kMax ? hn::Gt(v, a) : hn::Lt(v, a)), v, a);
    }
    hn::StoreU(a, d, acc + j);
  }
  for (; j < n; ++j)
    for (int r = 0; r < g; ++r) {
      const V v = tf.scalar(rows[r][j]);
      if (std::isnan(v) || (kMax ? v > acc[j] : v < acc[j])) acc[j] = v;
    }
}

// Sum over p[0, n) of exp(x - shift), in double; the exp runs in V's lanes (the op table's form).
template <class V>
HWY_INLINE double sum_exp_block(const V* p, int64_t n, V shift) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<V, decltype(dd)> dv;
  const int64_t N = int64_t(hn::Lanes(dd));
  const auto sh = hn::Set(dv, shift);
  auto term = [&](const V* q) { return ops::Exp::simd(dv, hn::Sub(hn::LoadU(dv, q), sh)); };
  auto promote = [&](auto v) {
    if constexpr (std::is_same_v<V, double>) return v;
    else return hn::PromoteTo(dd, v);
  };
  auto a0 = hn::Zero(dd), a1 = a0;
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    a0 = hn::Add(a0, promote(term(p + i)));
    a1 = hn::Add(a1, promote(term(p + i + N)));
  }
  for (; i + N <= n; i += N) a0 = hn::Add(a0, promote(term(p + i)));
  if (i < n) {
    alignas(HWY_MAX_BYTES) V tmp[kMaxDoubleLanes] = {};
    std::memcpy(tmp, p + i, size_t(n - i) * sizeof(V));
    a1 = hn::Add(a1, hn::IfThenElseZero(hn::FirstN(dd, size_t(n - i)), promote(term(tmp))));
  }
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(a0, a1)));
}

// ---- reducers -----------------------------------------------------------------------------------
//
// A reducer R over input values V (the expression's compute type) has
//   State                           a partial result; init() is the empty one
//   fold(s, p, n, index)            s <- s folded with p[0, n); index is p[0]'s position in the
//                                   reduction (row-major over the reduced dims)
//   combine(a, b)                   a <- a followed by b
//   write(dst, s, count)            finishes s (count elements were reduced) and stores it at dst
//   Cols, make_cols(width, first), fold_cols(cols, off, p, n, index), col_state(cols, k)
//                                   outer mode: column k of a block folds p[k - off] at row `index`
// Reducers that have no identity (max, argmax, ...) are never asked to write an empty reduction:
// the tensor layer throws first.

// Columns as an array of States folded one element at a time (for the reducers without a SIMD form).
template <class Derived, class State>
struct StateCols {
  struct Cols {
    std::unique_ptr<State[]> s;  // not std::vector: State may be bool
  };
  Cols make_cols(int64_t width, int64_t) const {
    Cols c{std::make_unique<State[]>(size_t(width))};
    std::fill(c.s.get(), c.s.get() + width, self().init());
    return c;
  }
  template <class V>
  void fold_cols(Cols& c, int64_t off, const V* p, int64_t n, int64_t index) const {
    for (int64_t k = 0; k < n; ++k) self().fold(c.s[off + k], p + k, 1, index);
  }
  State col_state(const Cols& c, int64_t k) const { return c.s[k]; }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

enum class SumFinish { Plain, Mean, Sqrt, Root };

// Sums of tf(x): sum, mean, and the 1-, 2-, 0- and general p-norms. Floats accumulate in double;
// integers and bools in 64 bits (wrapping, as PyTorch's int64 sums).
template <class V, class Out, class Tf = Ident, SumFinish F = SumFinish::Plain>
struct SumReducer {
  static constexpr bool floating = is_float_v<V>;
  using State = std::conditional_t<floating, double, uint64_t>;
  Tf tf{};
  double p = 2;  // SumFinish::Root: the result is sum^(1/p)

  State init() const { return 0; }
  void fold(State& s, const V* x, int64_t n, int64_t) const {
    if constexpr (floating && Tf::simd_ok) {
      s += sum_block(tf, x, n);
    } else if constexpr (floating) {
      for (int64_t i = 0; i < n; ++i) s += tf.scalar(double(x[i]));
    } else {
      State acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += uint64_t(int64_t(x[i]));
      s += acc;
    }
  }
  void combine(State& a, const State& b) const { a += b; }
  void write(char* dst, const State& s, int64_t count) const {
    if constexpr (floating) {
      double v = s;
      if constexpr (F == SumFinish::Mean) v /= double(count);
      if constexpr (F == SumFinish::Sqrt) v = std::sqrt(v);
      if constexpr (F == SumFinish::Root) v = std::pow(v, 1.0 / p);
      store_value<Out>(dst, v);
    } else {
      store_value<Out>(dst, int64_t(s));
    }
  }

  struct Cols {
    std::vector<State> acc;
  };
  Cols make_cols(int64_t width, int64_t) const { return {std::vector<State>(size_t(width), 0)}; }
  void fold_cols(Cols& c, int64_t off, const V* x, int64_t n, int64_t) const {
    State* acc = c.acc.data() + off;
    if constexpr (floating && Tf::simd_ok) {
      add_cols(tf, acc, x, n);
    } else if constexpr (floating) {
      for (int64_t k = 0; k < n; ++k) acc[k] += tf.scalar(double(x[k]));
    } else {
      for (int64_t k = 0; k < n; ++k) acc[k] += uint64_t(int64_t(x[k]));
    }
  }
  void fold_rows(Cols& c, int64_t off, const V* const* rows, int g, int64_t n, int64_t index) const {
    if constexpr (floating && Tf::simd_ok) add_rows(tf, c.acc.data() + off, rows, g, n);
    else for (int r = 0; r < g; ++r) fold_cols(c, off, rows[r], n, index + r);
  }
  State col_state(const Cols& c, int64_t k) const { return c.acc[size_t(k)]; }
};

// Max or min of tf(x) (amax, amin, max(x), the inf-norms). NaN propagates.
template <class V, class Out, bool kMax, class Tf = Ident>
struct ExtremeReducer {
  static constexpr bool floating = is_float_v<V>;
  using State = V;
  Tf tf{};

  static constexpr V identity() {
    if constexpr (std::is_same_v<V, bool>) return !kMax;
    else if constexpr (floating) return kMax ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
    else return kMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
  }
  State init() const { return identity(); }
  void fold(State& s, const V* x, int64_t n, int64_t) const {
    if constexpr (floating) {
      combine(s, extreme_block<kMax>(tf, x, n, identity()));
    } else {
      V m = s;
      for (int64_t i = 0; i < n; ++i) m = kMax ? (x[i] > m ? x[i] : m) : (x[i] < m ? x[i] : m);
      s = m;
    }
  }
  void combine(State& a, const State& b) const {
    if constexpr (floating) {
      if (std::isnan(a)) return;
      if (std::isnan(b) || (kMax ? b > a : b < a)) a = b;
    } else {
      if (kMax ? b > a : b < a) a = b;
    }
  }
  void write(char* dst, const State& s, int64_t) const { store_value<Out>(dst, s); }

  struct Cols {
    std::unique_ptr<V[]> acc;  // not std::vector: V may be bool
  };
  Cols make_cols(int64_t width, int64_t) const {
    Cols c{std::make_unique<V[]>(size_t(width))};
    std::fill(c.acc.get(), c.acc.get() + width, identity());
    return c;
  }
  void fold_cols(Cols& c, int64_t off, const V* x, int64_t n, int64_t) const {
    V* acc = c.acc.get() + off;
    if constexpr (floating) {
      extreme_cols<kMax>(tf, acc, x, n);
    } else {
      for (int64_t k = 0; k < n; ++k) combine(acc[k], x[k]);
    }
  }
  void fold_rows(Cols& c, int64_t off, const V* const* rows, int g, int64_t n, int64_t index) const {
    if constexpr (floating) extreme_rows<kMax>(tf, c.acc.get() + off, rows, g, n);
    else for (int r = 0; r < g; ++r) fold_cols(c, off, rows[r], n, index + r);
  }
  State col_state(const Cols& c, int64_t k) const { return c.acc[k]; }
};

// Index of the first max (or min); a NaN counts as the extreme (the first NaN wins), as PyTorch.
// Writes int64 indices at dst; with values_base set (max(x, dim)) also the value into the
// values tensor, at the same element position as dst has in the indices tensor.
template <class V, class ValOut, bool kMax>
struct ArgReducer : StateCols<ArgReducer<V, ValOut, kMax>, std::pair<V, int64_t>> {
  using State = std::pair<V, int64_t>;  // (value, index); index -1 while empty
  char* indices_base = nullptr;
  char* values_base = nullptr;

  static bool is_nan(V v) {
    if constexpr (is_float_v<V>) return std::isnan(v);
    else return false;
  }
  static bool better(V b, V a) { return is_nan(b) || (kMax ? b > a : b < a); }

  State init() const { return {V{}, -1}; }
  void fold(State& s, const V* x, int64_t n, int64_t index) const {
    int64_t i = 0;
    if (s.second < 0 && n > 0) {
      s = {x[0], index};
      i = 1;
    }
    if (is_nan(s.first)) return;
    V best = s.first;
    int64_t at = -1;
    for (; i < n; ++i) {
      if (better(x[i], best)) {
        best = x[i];
        at = i;
        if (is_nan(best)) break;
      }
    }
    if (at >= 0) s = {best, index + at};
  }
  void combine(State& a, const State& b) const {
    if (b.second < 0) return;
    if (a.second < 0 || (!is_nan(a.first) && better(b.first, a.first))) a = b;
  }
  void write(char* dst, const State& s, int64_t) const {
    store_value<int64_t>(dst, s.second);
    if (values_base) {
      const int64_t at = (dst - indices_base) / int64_t(sizeof(int64_t));
      store_value<ValOut>(values_base + at * int64_t(sizeof(ValOut)), s.first);
    }
  }
};

// Variance and standard deviation (and their mean, for var_mean / std_mean). Each block of up to
// kReduceBlock values is reduced in two passes (mean, then squared deviations, in double) and
// blocks merge with Chan's formula; outer mode runs Welford's update per column, in double.
template <class V, class Out>
struct VarReducer {
  struct State {
    double n = 0, mean = 0, m2 = 0;
  };
  double correction = 1;
  bool take_sqrt = false;
  char* out_base = nullptr;   // with mean_base: where the mean of the same element goes
  char* mean_base = nullptr;

  State init() const { return {}; }
  void combine(State& a, const State& b) const {
    if (b.n == 0) return;
    if (a.n == 0) {
      a = b;
      return;
    }
    const double n = a.n + b.n, delta = b.mean - a.mean;
    a.mean += delta * (b.n / n);
    a.m2 += b.m2 + delta * delta * (a.n * b.n / n);
    a.n = n;
  }
  void fold(State& s, const V* x, int64_t n, int64_t) const {
    for (int64_t off = 0; off < n; off += cpu::kReduceBlock) {
      const int64_t m = std::min(cpu::kReduceBlock, n - off);
      State b;
      b.n = double(m);
      b.mean = sum_block(Ident{}, x + off, m) / double(m);
      b.m2 = sum_block(SqDevT{b.mean}, x + off, m);
      combine(s, b);
    }
  }
  void write(char* dst, const State& s, int64_t) const {
    double v = s.m2 / std::max(0.0, s.n - correction);
    if (take_sqrt) v = std::sqrt(v);
    store_value<Out>(dst, v);
    if (mean_base) {
      const int64_t at = (dst - out_base) / int64_t(sizeof(Out));
      store_value<Out>(mean_base + at * int64_t(sizeof(Out)), s.n > 0 ? s.mean : std::numeric_limits<double>::quiet_NaN());
    }
  }

  struct Cols {
    int64_t first = 0, rows = 0;
    std::vector<double> mean, m2;
  };
  Cols make_cols(int64_t width, int64_t first) const {
    return {first, 0, std::vector<double>(size_t(width), 0.0), std::vector<double>(size_t(width), 0.0)};
  }
  void fold_cols(Cols& c, int64_t off, const V* x, int64_t n, int64_t index) const {
    c.rows = index - c.first + 1;
    const double inv = 1.0 / double(c.rows);
    double* mean = c.mean.data() + off;
    double* m2 = c.m2.data() + off;
    const hn::ScalableTag<double> dd;
    const int64_t N = int64_t(hn::Lanes(dd));
    const auto vinv = hn::Set(dd, inv);
    int64_t k = 0;
    for (; k + N <= n; k += N) {
      const auto v = load_double(dd, x + k), mu = hn::LoadU(dd, mean + k);
      const auto delta = hn::Sub(v, mu);
      const auto mu2 = hn::Add(mu, hn::Mul(delta, vinv));
      hn::StoreU(mu2, dd, mean + k);
      hn::StoreU(hn::Add(hn::LoadU(dd, m2 + k), hn::Mul(delta, hn::Sub(v, mu2))), dd, m2 + k);
    }
    for (; k < n; ++k) {
      const double v = double(x[k]), delta = v - mean[k];
      mean[k] += delta * inv;
      m2[k] += delta * (v - mean[k]);
    }
  }
  // A group of rows: its mean and squared deviations per column (two passes over the group, in
  // registers), merged into the columns with Chan's formula.
  void fold_rows(Cols& c, int64_t off, const V* const* rows, int g, int64_t n, int64_t index) const {
    const double na = double(index - c.first), nb = double(g), nt = na + nb;
    c.rows = index - c.first + g;
    double* mean = c.mean.data() + off;
    double* m2 = c.m2.data() + off;
    const hn::ScalableTag<double> dd;
    const int64_t N = int64_t(hn::Lanes(dd));
    const auto inv_b = hn::Set(dd, 1.0 / nb), wb = hn::Set(dd, nb / nt), wab = hn::Set(dd, na * nb / nt);
    int64_t k = 0;
    for (; k + N <= n; k += N) {
      auto s = load_double(dd, rows[0] + k);
      for (int r = 1; r < g; ++r) s = hn::Add(s, load_double(dd, rows[r] + k));
      const auto mb = hn::Mul(s, inv_b);
      auto q = hn::Zero(dd);
      for (int r = 0; r < g; ++r) {
        const auto t = hn::Sub(load_double(dd, rows[r] + k), mb);
        q = hn::Add(q, hn::Mul(t, t));
      }
      const auto ma = hn::LoadU(dd, mean + k), delta = hn::Sub(mb, ma);
      hn::StoreU(hn::Add(ma, hn::Mul(delta, wb)), dd, mean + k);
      hn::StoreU(hn::Add(hn::Add(hn::LoadU(dd, m2 + k), q), hn::Mul(hn::Mul(delta, delta), wab)), dd, m2 + k);
    }
    for (; k < n; ++k) {
      double s = 0, q = 0;
      for (int r = 0; r < g; ++r) s += double(rows[r][k]);
      const double mb = s / nb;
      for (int r = 0; r < g; ++r) q += (double(rows[r][k]) - mb) * (double(rows[r][k]) - mb);
      const double delta = mb - mean[k];
      mean[k] += delta * (nb / nt);
      m2[k] += q + delta * delta * (na * nb / nt);
    }
  }
  State col_state(const Cols& c, int64_t k) const { return {double(c.rows), c.mean[size_t(k)], c.m2[size_t(k)]}; }
};

// log(sum(exp(x))), stable: each block is shifted by its own max, blocks merge by rescaling.
template <class V, class Out>
struct LogSumExpReducer : StateCols<LogSumExpReducer<V, Out>, std::pair<double, double>> {
  using State = std::pair<double, double>;  // (shift m, sum of exp(x - m)); m NaN once a NaN is seen

  State init() const { return {-std::numeric_limits<double>::infinity(), 0.0}; }
  void combine(State& a, const State& b) const {
    if (std::isnan(a.first)) return;
    if (std::isnan(b.first)) {
      a = b;
      return;
    }
    const double m = std::max(a.first, b.first);
    const double sa = a.first == m ? a.second : a.second * std::exp(a.first - m);
    const double sb = b.first == m ? b.second : b.second * std::exp(b.first - m);
    a = {m, sa + sb};
  }
  void fold(State& s, const V* x, int64_t n, int64_t) const {
    if (n == 1) {  // the outer mode's element-wise path
      const double v = double(x[0]);
      if (std::isnan(v)) s = {v, 0.0};
      else if (v != -std::numeric_limits<double>::infinity()) combine(s, {v, 1.0});
      return;
    }
    const V m = extreme_block<true>(Ident{}, x, n, -std::numeric_limits<V>::infinity());
    if (std::isnan(m)) {
      s = {double(m), 0.0};
    } else if (std::isinf(m)) {
      if (m > 0) combine(s, {double(m), 1.0});
    } else {
      combine(s, {double(m), sum_exp_block(x, n, m)});
    }
  }
  void write(char* dst, const State& s, int64_t) const {
    const double m = s.first;
    store_value<Out>(dst, std::isfinite(m) ? m + std::log(s.second) : m);
  }
};

// Product: floats in double, integers in 64 bits (wrapping).
template <class V, class Out>
struct ProdReducer : StateCols<ProdReducer<V, Out>, std::conditional_t<is_float_v<V>, double, uint64_t>> {
  using State = std::conditional_t<is_float_v<V>, double, uint64_t>;
  State init() const { return 1; }
  void fold(State& s, const V* x, int64_t n, int64_t) const {
    State acc = s;
    if constexpr (is_float_v<V>) {
      for (int64_t i = 0; i < n; ++i) acc *= double(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) acc *= uint64_t(int64_t(x[i]));
    }
    s = acc;
  }
  void combine(State& a, const State& b) const { a *= b; }
  void write(char* dst, const State& s, int64_t) const {
    if constexpr (is_float_v<V>) store_value<Out>(dst, s);
    else store_value<Out>(dst, int64_t(s));
  }
};

// all / any: whether every / some value is nonzero (NaN is nonzero).
template <class V, bool kAll>
struct LogicalReducer : StateCols<LogicalReducer<V, kAll>, bool> {
  using State = bool;
  State init() const { return kAll; }
  void fold(State& s, const V* x, int64_t n, int64_t) const {
    if (s != kAll) return;
    bool r = kAll;
    for (int64_t i = 0; i < n; ++i) {
      const bool nz = x[i] != V(0);
      r = kAll ? (r && nz) : (r || nz);
    }
    s = r;
  }
  void combine(State& a, const State& b) const { a = kAll ? (a && b) : (a || b); }
  void write(char* dst, const State& s, int64_t) const { store_value<bool>(dst, s); }
};

}  // namespace red
}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();

namespace kiln::cpu {

namespace red = kiln::HWY_NAMESPACE::red;

namespace detail {

template <class E>
using reduce_value_t = compute_t<typename E::value_type>;

// A leaf whose memory already holds compute values: read in place when its row is contiguous.
template <class E>
inline constexpr bool plain_leaf_v = false;
template <class T>
inline constexpr bool plain_leaf_v<Leaf<T>> = std::is_same_v<T, compute_t<T>>;

// Evaluates e at row positions [j, j + n) of cursor c into buf, with E's forward kernel.
template <class E, class C, class V>
inline void eval_block(const E& e, const C& c, int64_t j, int64_t n, V* buf) {
  constexpr int NOps = leaf_count_v<E> + 1;
  static constexpr auto types = kernel_operands<E>(std::array{scalar_type_of<V>()});
  char* at[NOps];
  int64_t step[NOps];
  at[0] = reinterpret_cast<char*>(buf);
  step[0] = int64_t(sizeof(V));
  for (int k = 1; k < NOps; ++k) {
    step[k] = c.step[k - 1];
    at[k] = const_cast<char*>(c.ptr[k - 1]) + j * step[k];
  }
  run_segment(forward_kernel<E>(), &e, types.data(), NOps, at, step, n);
}

// Folds the row segment [j, stop) into s (inner mode); index is the reduction position of j.
template <class R, class E, class C>
inline void fold_segment(const R& r, typename R::State& s, const E& e, const C& c, int64_t j, int64_t stop,
                         int64_t index) {
  using V = reduce_value_t<E>;
  if constexpr (plain_leaf_v<E>) {
    if (c.step[0] == int64_t(sizeof(V))) {
      r.fold(s, reinterpret_cast<const V*>(c.ptr[0]) + j, stop - j, index);
      return;
    }
  }
  alignas(64) V buf[kReduceBlock];
  for (int64_t b = j; b < stop; b += kReduceBlock) {
    const int64_t n = std::min(kReduceBlock, stop - b);
    eval_block(e, c, b, n, buf);
    r.fold(s, buf, n, index + (b - j));
  }
}

// Folds g rows (their columns [k0, k1)) into a column block: through the reducer's fold_rows when
// it has one, else row by row.
template <class R, class Cols, class V>
inline void fold_rows(const R& r, Cols& cols, int64_t off, const V* const* rows, int g, int64_t n, int64_t row) {
  if constexpr (requires { r.fold_rows(cols, off, rows, g, n, row); }) {
    r.fold_rows(cols, off, rows, g, n, row);
  } else {
    for (int i = 0; i < g; ++i) r.fold_cols(cols, off, rows[i], n, row + i);
  }
}

// Outer mode: folds a group of g rows, given by their cursors, into a column block; row is the
// reduction index of the first. Rows are read in place when e is a contiguous plain leaf, else
// evaluated into a buffer in pieces of kReduceBlock / kReduceRowGroup columns.
template <class R, class Cols, class E, class C>
inline void fold_row_group(const R& r, Cols& cols, const E& e, const C* curs, int g, int64_t k0, int64_t k1,
                           int64_t row) {
  using V = reduce_value_t<E>;
  const V* rows[kReduceRowGroup];
  if constexpr (plain_leaf_v<E>) {
    if (curs[0].step[0] == int64_t(sizeof(V))) {
      for (int i = 0; i < g; ++i) rows[i] = reinterpret_cast<const V*>(curs[i].ptr[0]) + k0;
      fold_rows(r, cols, 0, rows, g, k1 - k0, row);
      return;
    }
  }
  constexpr int64_t piece = kReduceBlock / kReduceRowGroup;
  alignas(64) V buf[kReduceBlock];
  for (int64_t b = k0; b < k1; b += piece) {
    const int64_t n = std::min(piece, k1 - b);
    for (int i = 0; i < g; ++i) {
      eval_block(e, curs[i], b, n, buf + i * piece);
      rows[i] = buf + i * piece;
    }
    fold_rows(r, cols, b - k0, rows, g, n, row);
  }
}

// Operand 0's pointer at a flat index of the plan's iteration space.
template <int NOps>
inline char* out_at(const LoopPlan<NOps>& plan, int64_t flat) {
  char* p = plan.base[0];
  for (int i = plan.rank - 1; i >= 0; --i) {
    p += (flat % plan.shape[i]) * plan.step[0][i];
    flat /= plan.shape[i];
  }
  return p;
}

template <int NOps>
struct ReducePlan {
  LoopPlan<NOps> loop;
  bool inner = true;   // the reduced dims are innermost (else: outer mode)
  int64_t outer = 1;   // inner mode: outputs; outer mode: output rows of `cols` elements
  int64_t count = 1;   // elements reduced into each output
  int64_t cols = 1;    // outer mode: extent of the innermost (kept) dim
};

// The iteration plan: operand 0 is the output (step 0 along reduced dims), then the leaves.
// keep_order: do not reorder dims by stride (arg* reductions, whose indices are logical).
template <class E>
ReducePlan<leaf_count_v<E> + 1> make_reduce_plan(const E& e, const Shape& in, const TensorImpl& out, uint32_t mask,
                                                 bool keep_order) {
  constexpr int NOps = leaf_count_v<E> + 1;
  const int rank = in.size();
  LoopPlan<NOps> p;
  p.rank = rank;
  Shape kept = in;
  for (int i = 0; i < rank; ++i)
    if (mask >> i & 1u) kept[i] = 1;
  const Strides ost = contiguous_strides(kept);
  const int64_t oes = int64_t(element_size(out.dtype));
  p.base[0] = out.data_bytes();
  for (int i = 0; i < rank; ++i) {
    p.shape[i] = in[i];
    p.step[0][i] = (mask >> i & 1u) ? 0 : ost[i] * oes;
  }
  int k = 1;
  for_each_leaf(e, [&](const auto& leaf) { p.set_operand(k++, leaf.impl.get(), in); });

  // perm[0] is the innermost dim. Sort by the leaves' strides (as PyTorch's TensorIterator): the
  // first leaf whose steps differ (both nonzero) decides; ties keep the logical order.
  int perm[kMaxRank];
  for (int i = 0; i < rank; ++i) perm[i] = rank - 1 - i;
  if (!keep_order) {
    auto outer_than = [&](int a, int b) {  // dim a belongs outside dim b
      for (int op = 1; op < NOps; ++op) {
        const int64_t sa = std::abs(p.step[op][a]), sb = std::abs(p.step[op][b]);
        if (sa == 0 || sb == 0 || sa == sb) continue;
        return sa > sb;
      }
      return false;
    };
    for (int i = 1; i < rank; ++i)
      for (int j = i; j > 0 && outer_than(perm[j - 1], perm[j]); --j) std::swap(perm[j - 1], perm[j]);
  }
  int first = -1;  // innermost dim that is not of size 1
  for (int i = 0; i < rank; ++i)
    if (p.shape[perm[i]] > 1) {
      first = perm[i];
      break;
    }
  bool inner = first >= 0 && (mask >> first & 1u);
  // A very short most-contiguous dim makes rows of a few elements, each paying the per-row cost:
  // then the innermost dim of the other kind becomes the row (read with a stride) if it is longer.
  if (first >= 0 && p.shape[first] < kReduceMinRow) {
    for (int i = 0; i < rank; ++i) {
      const int dim = perm[i];
      if (bool(mask >> dim & 1u) != inner && p.shape[dim] > p.shape[first]) {
        first = dim;
        inner = !inner;
        break;
      }
    }
  }
  int order[kMaxRank], n = 0;  // outer to inner
  auto take = [&](bool reduced, int skip) {
    for (int i = rank - 1; i >= 0; --i)
      if (bool(mask >> perm[i] & 1u) == reduced && perm[i] != skip) order[n++] = perm[i];
  };
  if (inner) {
    take(false, -1);
    take(true, -1);
  } else {
    take(false, first);
    take(true, -1);
    if (first >= 0) order[n++] = first;
  }
  ReducePlan<NOps> rp;
  LoopPlan<NOps>& q = rp.loop;
  q.rank = rank;
  for (int op = 0; op < NOps; ++op) q.base[op] = p.base[op];
  for (int i = 0; i < rank; ++i) {
    q.shape[i] = p.shape[order[i]];
    for (int op = 0; op < NOps; ++op) q.step[op][i] = p.step[op][order[i]];
  }
  q.coalesce();
  rp.inner = inner;
  int64_t reduced = 1, total = 1;
  for (int i = 0; i < q.rank; ++i) {
    total *= q.shape[i];
    if (q.step[0][i] == 0 && q.shape[i] > 1) reduced *= q.shape[i];
  }
  rp.count = reduced;
  rp.cols = inner ? 1 : q.shape[q.rank - 1];
  rp.outer = total / (reduced * rp.cols);
  return rp;
}

}  // namespace detail

// Reduces e over the dims set in `mask` (bit i: dim i of e.shape()) into out, a fresh contiguous
// tensor of the reduced shape (with or without the kept size-1 dims: the same memory). The caller
// has checked the shapes and leaf versions, and that an empty reduction has an identity.
template <class R, class E>
void reduce(const R& r, const E& e, const Shape& in, uint32_t mask, const TensorImpl& out, bool keep_order = false) {
  using State = typename R::State;
  if (out.numel() == 0) return;
  if (numel_of(in) == 0) {  // empty reductions: the identity for each output
    const int64_t oes = int64_t(element_size(out.dtype));
    for (int64_t i = 0; i < out.numel(); ++i) r.write(out.data_bytes() + i * oes, r.init(), 0);
    return;
  }
  const auto rp = detail::make_reduce_plan(e, in, out, mask, keep_order);
  const auto& plan = rp.loop;
  const int64_t count = rp.count, outer = rp.outer;
  constexpr int64_t cost = tree_traits<E>::cost + 1;

  if (rp.inner) {
    if (count <= kReduceChunk) {  // one sequential fold per output
      parallel_for(outer, count * cost, 1, [&](int64_t o0, int64_t o1) {
        State s = r.init();
        int64_t filled = 0;
        for_each_row(plan, o0 * count, o1 * count, [&](char* dst, const auto& c, int64_t j, int64_t stop) {
          detail::fold_segment(r, s, e, c, j, stop, filled);
          filled += stop - j;
          if (filled == count) {
            r.write(dst, s, count);
            s = r.init();
            filled = 0;
          }
        });
      });
      return;
    }
    const int64_t chunks = (count + kReduceChunk - 1) / kReduceChunk;
    std::vector<State> part(size_t(outer * chunks));
    parallel_for(outer * chunks, kReduceChunk * cost, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t o = i / chunks, ch = i % chunks;
        const int64_t begin = o * count + ch * kReduceChunk, end = std::min(begin + kReduceChunk, (o + 1) * count);
        State s = r.init();
        int64_t index = ch * kReduceChunk;
        for_each_row(plan, begin, end, [&](char*, const auto& c, int64_t j, int64_t stop) {
          detail::fold_segment(r, s, e, c, j, stop, index);
          index += stop - j;
        });
        part[size_t(i)] = s;
      }
    });
    parallel_for(outer, chunks * 4, 1, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        State s = part[size_t(o * chunks)];
        for (int64_t ch = 1; ch < chunks; ++ch) r.combine(s, part[size_t(o * chunks + ch)]);
        r.write(detail::out_at(plan, o * count), s, count);
      }
    });
    return;
  }

  // Outer mode: output rows of K columns; each work item folds Rc input rows into Kb columns, in
  // groups of kReduceRowGroup rows counted from the item's first row (fixed edges: deterministic).
  const int64_t K = rp.cols, Kb = std::min(K, kReduceColBlock), nb = (K + Kb - 1) / Kb;
  const int64_t Rc = std::max<int64_t>(1, kReduceOuterChunk / Kb), nr = (count + Rc - 1) / Rc;
  const int64_t ostep = plan.step[0][plan.rank - 1];
  std::vector<State> part(nr > 1 ? size_t(outer * nb * nr * Kb) : 0);
  parallel_for(outer * nb * nr, std::min(Rc, count) * Kb * cost, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t rc = i % nr, cb = (i / nr) % nb, o = i / (nr * nb);
      const int64_t k0 = cb * Kb, k1 = std::min(K, k0 + Kb), r0 = rc * Rc, r1 = std::min(count, r0 + Rc);
      auto cols = r.make_cols(k1 - k0, r0);
      int64_t row = r0;
      char* odst = nullptr;
      RowCursor<leaf_count_v<E>> curs[kReduceRowGroup];
      int g = 0;
      auto flush = [&] {
        detail::fold_row_group(r, cols, e, curs, g, k0, k1, row);
        row += g;
        g = 0;
      };
      for_each_row(plan, (o * count + r0) * K, (o * count + r1) * K, [&](char* dst, const auto& c, int64_t, int64_t) {
        curs[g++] = c;
        odst = dst;
        if (g == kReduceRowGroup) flush();
      });
      if (g > 0) flush();
      for (int64_t k = k0; k < k1; ++k) {
        if (nr == 1) r.write(odst + k * ostep, r.col_state(cols, k - k0), count);
        else part[size_t(i * Kb + (k - k0))] = r.col_state(cols, k - k0);
      }
    }
  });
  if (nr > 1) {
    parallel_for(outer * nb, nr * Kb * 4, 1, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t o = g / nb, cb = g % nb, k0 = cb * Kb, k1 = std::min(K, k0 + Kb);
        char* base = detail::out_at(plan, o * count * K);
        for (int64_t k = k0; k < k1; ++k) {
          State s = part[size_t((g * nr) * Kb + (k - k0))];
          for (int64_t rc = 1; rc < nr; ++rc) r.combine(s, part[size_t((g * nr + rc) * Kb + (k - k0))]);
          r.write(base + k * ostep, s, count);
        }
      }
    });
  }
}

// ---- scans and selections along one dim of a contiguous [outer, n, inner] tensor --------------

// y[o, i, k] = x[o, 0, k] + ... + x[o, i, k], accumulated in Acc (double for floats).
template <class Acc, class T, class Out>
void cumsum(const T* x, Out* y, int64_t outer, int64_t n, int64_t inner) {
  if (outer * n * inner == 0) return;
  if (inner == 1) {
    parallel_for(outer, n * 2, 1, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        Acc acc = 0;
        const T* xr = x + o * n;
        Out* yr = y + o * n;
        for (int64_t i = 0; i < n; ++i) {
          acc += Acc(compute_t<T>(xr[i]));
          yr[i] = Out(acc);
        }
      }
    });
    return;
  }
  const int64_t kb = std::min<int64_t>(inner, kReduceColBlock), nb = (inner + kb - 1) / kb;
  parallel_for(outer * nb, n * kb * 2, 1, [&](int64_t g0, int64_t g1) {
    std::vector<Acc> acc(static_cast<size_t>(kb));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t o = g / nb, k0 = (g % nb) * kb, w = std::min(inner, k0 + kb) - k0;
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t i = 0; i < n; ++i) {
        const T* xr = x + (o * n + i) * inner + k0;
        Out* yr = y + (o * n + i) * inner + k0;
        for (int64_t k = 0; k < w; ++k) {
          acc[size_t(k)] += Acc(compute_t<T>(xr[k]));
          yr[k] = Out(acc[size_t(k)]);
        }
      }
    }
  });
}

// The k largest (or smallest) values along the middle dim, sorted, with their int64 indices. NaN
// counts as larger than any number; ties keep the lower index first.
template <class T>
void topk(const T* x, T* values, int64_t* indices, int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest) {
  if (outer * inner * k == 0) return;
  using V = compute_t<T>;
  auto is_nan = [](V v) {
    if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
    else return false;
  };
  auto before = [&](const std::pair<V, int64_t>& a, const std::pair<V, int64_t>& b) {
    const bool na = is_nan(a.first), nb = is_nan(b.first);
    if (na || nb) {
      if (na && nb) return a.second < b.second;
      return largest ? na : nb;
    }
    if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  };
  parallel_for(outer * inner, n * 8, 1, [&](int64_t l0, int64_t l1) {
    std::vector<std::pair<V, int64_t>> line(static_cast<size_t>(n));
    for (int64_t l = l0; l < l1; ++l) {
      const int64_t o = l / inner, c = l % inner;
      const T* xl = x + o * n * inner + c;
      for (int64_t i = 0; i < n; ++i) line[size_t(i)] = {V(xl[i * inner]), i};
      std::partial_sort(line.begin(), line.begin() + k, line.end(), before);
      T* vl = values + o * k * inner + c;
      int64_t* il = indices + o * k * inner + c;
      for (int64_t i = 0; i < k; ++i) {
        vl[i * inner] = T(line[size_t(i)].first);
        il[i * inner] = line[size_t(i)].second;
      }
    }
  });
}

}  // namespace kiln::cpu
