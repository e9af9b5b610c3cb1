#pragma once
// Score and mask modifiers of flex_attention: small expressions over the placeholders score, b, h, q_idx
// and kv_idx and over captured tensors read at computed indices, evaluated inside the attention kernel on
// Highway vectors whose lanes run along kv_idx (so the modifier is fused into the tile loop, no call per
// score). Written as PyTorch's FlexAttention writes them, as functions of the placeholders:
//
//   auto bias = kiln::attention::captured(table);                      // table [H, 2L - 1]
//   auto score_mod = [&](auto score, auto b, auto h, auto q, auto kv) { return score + bias(h, q - kv + L - 1); };
//   auto mask_mod = [](auto b, auto h, auto q, auto kv) { return q >= kv; };
//
// Value nodes give vectors of the compute type, boolean nodes (comparisons, &, |, !) give masks. Indices are
// carried in the compute type too (exact up to 2^24 in float: check_exact_in refuses what is past that), and a
// captured tensor converts them to integers per lane. The backward of a node pushes an adjoint down the tree: to
// the score (dscore) and, as a scatter-add, into the gradient buffer of each captured tensor that requires one. Modifiers are a handful
// of nodes, so recomputing a child's value where a derivative needs it costs nothing worth a tape.
#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kiln/ops/simd_math.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::attention {

namespace hn = hwy::HWY_NAMESPACE;

// Where a modifier is evaluated: one query row, a vector of keys. `live` marks the lanes whose (q, kv) is
// inside the sequences and allowed by the mask (a captured read outside its tensor is an error only there).
template <class D>
struct Point {
  hn::Vec<D> score, b, h, q, kv;
  hn::Mask<D> live;
};

// What a captured tensor needs while the kernel runs, per thread: where to add its gradient (null: none
// wanted) and whether a live lane read out of bounds (reported after the kernel).
template <class Acc>
struct Env {
  std::vector<Acc*> grad;  // by captured slot
  bool bad_index = false;
};

struct ModNode {};
template <class E>
concept Node = std::is_base_of_v<ModNode, E>;

// Which placeholders a modifier reads (bits), so the kernel and the block mask can skip what is unused.
enum Uses : unsigned { kScore = 1, kB = 2, kH = 4, kQ = 8, kKv = 16, kCaptured = 32 };

namespace node {

template <unsigned kUsesBits, bool kIsBool = false>
struct Base : ModNode {
  static constexpr unsigned uses = kUsesBits;
  static constexpr bool is_bool = kIsBool;
  template <class F>
  void each_captured(F&&) {}
};

struct Score : Base<kScore> {
  template <class D, class Acc>
  HWY_INLINE hn::Vec<D> value(D, const Point<D>& p, Env<Acc>&) const { return p.score; }
  template <class D, class Acc>
  HWY_INLINE void backward(D, const Point<D>&, hn::Vec<D> adj, Env<Acc>&, hn::Vec<D>& dscore) const {
    dscore = hn::Add(dscore, adj);
  }
};

// b, h, q_idx, kv_idx: integers without gradient.
template <unsigned kWhich>
struct Index : Base<kWhich> {
  template <class D, class Acc>
  HWY_INLINE hn::Vec<D> value(D, const Point<D>& p, Env<Acc>&) const {
    if constexpr (kWhich == kB) return p.b;
    else if constexpr (kWhich == kH) return p.h;
    else if constexpr (kWhich == kQ) return p.q;
    else return p.kv;
  }
  template <class D, class Acc>
  HWY_INLINE void backward(D, const Point<D>&, hn::Vec<D>, Env<Acc>&, hn::Vec<D>&) const {}
};

struct Const : Base<0> {
  double v;
  explicit Const(double x) : v(x) {}
  template <class D, class Acc>
  HWY_INLINE hn::Vec<D> value(D d, const Point<D>&, Env<Acc>&) const { return hn::Set(d, hn::TFromD<D>(v)); }
  template <class D, class Acc>
  HWY_INLINE void backward(D, const Point<D>&, hn::Vec<D>, Env<Acc>&, hn::Vec<D>&) const {}
};

struct True : Base<0, true> {
  template <class D, class Acc>
  HWY_INLINE hn::Mask<D> value(D d, const Point<D>&, Env<Acc>&) const { return hn::FirstN(d, hn::Lanes(d)); }
};

// Two children: each_captured visits both.
template <bool kIsBool, class A, class B>
struct Pair : Base<A::uses | B::uses, kIsBool> {
  A a;
  B b;
  Pair(A x, B y) : a(x), b(y) {}
  template <class F>
  void each_captured(F&& f) {
    a.each_captured(f);
    b.each_captured(f);
  }
};

enum class Arith { Add, Sub, Mul, Div, Min, Max };
template <Arith kOp, class A, class B>
struct Binary : Pair<false, A, B> {
  using Pair<false, A, B>::Pair;
  template <class D, class Acc>
  HWY_INLINE hn::Vec<D> value(D d, const Point<D>& p, Env<Acc>& e) const {
    const auto x = this->a.value(d, p, e), y = this->b.value(d, p, e);
    if constexpr (kOp == Arith::Add) return hn::Add(x, y);
    else if constexpr (kOp == Arith::Sub) return hn::Sub(x, y);
    else if constexpr (kOp == Arith::Mul) return hn::Mul(x, y);
    else if constexpr (kOp == Arith::Div) return hn::Div(x, y);
    else if constexpr (kOp == Arith::Min) return hn::Min(x, y);
    else return hn::Max(x, y);
  }
  template <class D, class Acc>
  HWY_INLINE void backward(D d, const Point<D>& p, hn::Vec<D> g, Env<Acc>& e, hn::Vec<D>& ds) const {
    if constexpr (kOp == Arith::Add) {
      this->a.backward(d, p, g, e, ds);
      this->b.backward(d, p, g, e, ds);
    } else if constexpr (kOp == Arith::Sub) {
      this->a.backward(d, p, g, e, ds);
      this->b.backward(d, p, hn::Neg(g), e, ds);
    } else if constexpr (kOp == Arith::Mul) {
      this->a.backward(d, p, hn::Mul(g, this->b.value(d, p, e)), e, ds);
      this->b.backward(d, p, hn::Mul(g, this->a.value(d, p, e)), e, ds);
    } else if constexpr (kOp == Arith::Div) {
      const auto y = this->b.value(d, p, e), q = hn::Div(g, y);
      this->a.backward(d, p, q, e, ds);
      this->b.backward(d, p, hn::Neg(hn::Mul(q, hn::Div(this->a.value(d, p, e), y))), e, ds);
    } else {  // the gradient goes to the chosen side (to a on ties, as torch.minimum's... first argument)
      const auto x = this->a.value(d, p, e), y = this->b.value(d, p, e);
      const auto to_a = kOp == Arith::Min ? hn::Le(x, y) : hn::Ge(x, y);
      this->a.backward(d, p, hn::IfThenElseZero(to_a, g), e, ds);
      this->b.backward(d, p, hn::IfThenZeroElse(to_a, g), e, ds);
    }
  }
};

enum class Fn { Neg, Abs, Exp, Log, Tanh, Sigmoid, Sqrt };
template <Fn kFn, class A>
struct Unary : Base<A::uses> {
  A a;
  explicit Unary(A x) : a(x) {}
  template <class F>
  void each_captured(F&& f) { a.each_captured(f); }
  template <class D>
  HWY_INLINE static hn::Vec<D> apply(D d, hn::Vec<D> x) {
    namespace km = kiln::HWY_NAMESPACE::math;
    if constexpr (kFn == Fn::Neg) return hn::Neg(x);
    else if constexpr (kFn == Fn::Abs) return hn::Abs(x);
    else if constexpr (kFn == Fn::Exp) return km::Exp(d, x);
    else if constexpr (kFn == Fn::Log) return km::Log(d, x);
    else if constexpr (kFn == Fn::Tanh) return km::Tanh(d, x);
    else if constexpr (kFn == Fn::Sigmoid) return km::Sigmoid(d, x);
    else return hn::Sqrt(x);
  }
  template <class D, class Acc>
  HWY_INLINE hn::Vec<D> value(D d, const Point<D>& p, Env<Acc>& e) const { return apply(d, a.value(d, p, e)); }
  template <class D, class Acc>
  HWY_INLINE void backward(D d, const Point<D>& p, hn::Vec<D> g, Env<Acc>& e, hn::Vec<D>& ds) const {
    const auto x = a.value(d, p, e);
    const auto one = hn::Set(d, hn::TFromD<D>(1));
    hn::Vec<D> dx;
    if constexpr (kFn == Fn::Neg) dx = hn::Neg(g);
    else if constexpr (kFn == Fn::Abs) dx = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Neg(g), hn::IfThenZeroElse(hn::Eq(x, hn::Zero(d)), g));
    else if constexpr (kFn == Fn::Exp) dx = hn::Mul(g, apply(d, x));
    else if constexpr (kFn == Fn::Log) dx = hn::Div(g, x);
    else if constexpr (kFn == Fn::Tanh) {
      const auto y = apply(d, x);
      dx = hn::Mul(g, hn::NegMulAdd(y, y, one));
    } else if constexpr (kFn == Fn::Sigmoid) {
      const auto y = apply(d, x);
      dx = hn::Mul(g, hn::Mul(y, hn::Sub(one, y)));
    } else {
      dx = hn::Div(hn::Mul(g, hn::Set(d, hn::TFromD<D>(0.5))), hn::Sqrt(x));
    }
    a.backward(d, p, dx, e, ds);
  }
};

enum class Compare { Lt, Le, Gt, Ge, Eq, Ne };
template <Compare kOp, class A, class B>
struct Comparison : Pair<true, A, B> {
  using Pair<true, A, B>::Pair;
  template <class D, class Acc>
  HWY_INLINE hn::Mask<D> value(D d, const Point<D>& p, Env<Acc>& e) const {
    const auto x = this->a.value(d, p, e), y = this->b.value(d, p, e);
    if constexpr (kOp == Compare::Lt) return hn::Lt(x, y);
    else if constexpr (kOp == Compare::Le) return hn::Le(x, y);
    else if constexpr (kOp == Compare::Gt) return hn::Gt(x, y);
    else if constexpr (kOp == Compare::Ge) return hn::Ge(x, y);
    else if constexpr (kOp == Compare::Eq) return hn::Eq(x, y);
    else return hn::Ne(x, y);
  }
};

enum class Logic { And, Or };
template <Logic kOp, class A, class B>
struct Logical : Pair<true, A, B> {
  using Pair<true, A, B>::Pair;
  template <class D, class Acc>
  HWY_INLINE hn::Mask<D> value(D d, const Point<D>& p, Env<Acc>& e) const {
    if constexpr (kOp == Logic::And) return hn::And(this->a.value(d, p, e), this->b.value(d, p, e));
    else return hn::Or(this->a.value(d, p, e), this->b.value(d, p, e));
  }
};

template <class A>
struct Not : Base<A::uses, true> {
  A a;
  explicit Not(A x) : a(x) {}
  template <class F>
  void each_captured(F&& f) { a.each_captured(f); }
  template <class D, class Acc>
  HWY_INLINE hn::Mask<D> value(D d, const Point<D>& p, Env<Acc>& e) const { return hn::Not(a.value(d, p, e)); }
};

template <class C, class A, class B>
struct Where : Base<C::uses | A::uses | B::uses> {
  C c;
  A a;
  B b;
  Where(C x, A y, B z) : c(x), a(y), b(z) {}
  template <class F>
  void each_captured(F&& f) {
    c.each_captured(f);
    a.each_captured(f);
    b.each_captured(f);
  }
  template <class D, class Acc>
  HWY_INLINE hn::Vec<D> value(D d, const Point<D>& p, Env<Acc>& e) const {
    return hn::IfThenElse(c.value(d, p, e), a.value(d, p, e), b.value(d, p, e));
  }
  template <class D, class Acc>
  HWY_INLINE void backward(D d, const Point<D>& p, hn::Vec<D> g, Env<Acc>& e, hn::Vec<D>& ds) const {
    const auto m = c.value(d, p, e);
    a.backward(d, p, hn::IfThenElseZero(m, g), e, ds);
    b.backward(d, p, hn::IfThenZeroElse(m, g), e, ds);
  }
};

// A captured tensor read at integer indices computed per lane (any dtype, converted to the compute type;
// bool reads as 0 or 1). slot numbers the captured tensors of a score modifier (assigned by flex_attention) and picks this
// tensor's gradient buffer (float and double tensors only).
template <class T, class... I>
struct Gather : Base<(I::uses | ... | kCaptured)> {
  Tensor<T> table;
  std::tuple<I...> index;
  int slot = -1;
  Gather(Tensor<T> t, I... i) : table(std::move(t)), index(i...) {}

  template <class F>
  void each_captured(F&& f) {
    std::apply([&](auto&... i) { (i.each_captured(f), ...); }, index);
    f(*this);
  }
  // Offsets into the table (row-major over its shape, the layout of its gradient buffer) and the element
  // offsets into its storage; false for lanes out of bounds.
  template <class D, class Acc>
  HWY_INLINE void offsets(D d, const Point<D>& p, Env<Acc>& e, int64_t* dense, int64_t* storage, bool* ok) const {
    constexpr size_t kMax = HWY_MAX_BYTES / sizeof(hn::TFromD<D>);
    const size_t n = hn::Lanes(d);
    alignas(HWY_MAX_BYTES) hn::TFromD<D> idx[sizeof...(I)][kMax];
    std::apply([&](const auto&... i) {
      size_t k = 0;
      ((hn::Store(i.value(d, p, e), d, idx[k]), ++k), ...);
    }, index);
    alignas(HWY_MAX_BYTES) uint8_t live[kMax];
    hn::StoreMaskBits(d, p.live, live);
    const Shape& shape = table.shape();
    const Strides& strides = table.strides();
    for (size_t l = 0; l < n; ++l) {
      int64_t off_dense = 0, off = 0;
      bool inside = true;
      for (size_t k = 0; k < sizeof...(I); ++k) {
        // In bounds and whole (a fractional index is an error, not a truncation), checked before converting.
        const auto x = idx[k][l];
        const bool good = x >= 0 && x < decltype(x)(shape[k]) && x == std::trunc(x);
        const int64_t v = good ? int64_t(x) : 0;
        inside &= good;
        off_dense = off_dense * shape[k] + v;
        off += v * strides[k];
      }
      ok[l] = inside;
      dense[l] = inside ? off_dense : 0;
      storage[l] = inside ? off : 0;
      if (!inside && ((live[l / 8] >> (l % 8)) & 1)) e.bad_index = true;
    }
  }
  template <class D, class Acc>
  HWY_INLINE hn::Vec<D> value(D d, const Point<D>& p, Env<Acc>& e) const {
    constexpr size_t kMax = HWY_MAX_BYTES / sizeof(hn::TFromD<D>);
    int64_t dense[kMax], storage[kMax];
    bool ok[kMax];
    offsets(d, p, e, dense, storage, ok);
    alignas(HWY_MAX_BYTES) hn::TFromD<D> out[kMax];
    const T* data = table.data_ptr();
    for (size_t l = 0; l < hn::Lanes(d); ++l) out[l] = ok[l] ? hn::TFromD<D>(data[storage[l]]) : hn::TFromD<D>(0);
    return hn::Load(d, out);
  }
  template <class D, class Acc>
  HWY_INLINE void backward(D d, const Point<D>& p, hn::Vec<D> g, Env<Acc>& e, hn::Vec<D>&) const {
    Acc* grad = e.grad[size_t(slot)];
    if (!grad) return;
    constexpr size_t kMax = HWY_MAX_BYTES / sizeof(hn::TFromD<D>);
    int64_t dense[kMax], storage[kMax];
    bool ok[kMax];
    offsets(d, p, e, dense, storage, ok);
    alignas(HWY_MAX_BYTES) hn::TFromD<D> adj[kMax];
    hn::Store(g, d, adj);
    for (size_t l = 0; l < hn::Lanes(d); ++l)
      if (ok[l]) grad[dense[l]] += adj[l];
  }
};

// A captured tensor before it is indexed: table(i, j, ...) gives the Gather node.
template <class T>
struct Captured {
  Tensor<T> table;
  template <class... I>
  auto operator()(const I&... i) const;
};

}  // namespace node

// Scalars in a modifier become constants.
template <class X>
auto as_node(const X& x) {
  if constexpr (Node<X>) return x;
  else {
    static_assert(std::is_arithmetic_v<X>, "attention modifier: operands are placeholders, modifier expressions or numbers");
    return node::Const(double(x));
  }
}
template <class X>
concept ModOperand = Node<X> || std::is_arithmetic_v<X>;
template <class X, class Y>
concept NodePair = ModOperand<X> && ModOperand<Y> && (Node<X> || Node<Y>);

template <class T>
template <class... I>
auto node::Captured<T>::operator()(const I&... i) const {
  check<ShapeError>(table.dim() == int64_t(sizeof...(I)), "attention::captured: a tensor of shape ", table.shape(),
                    " indexed with ", sizeof...(I), " indices");
  return node::Gather<T, decltype(as_node(i))...>(table, as_node(i)...);
}

// A tensor that a modifier reads at computed indices (a bias table, per-token document ids, ALiBi slopes).
// Its gradient (when it requires one) is the scatter-add of the modifier's adjoints.
template <class T>
node::Captured<T> captured(const Tensor<T>& table) {
  return {table};
}

// Modifiers compute in the compute type A (float for float, bfloat16 and float16 inputs), so an index or a
// captured integer (a document id) is exact only up to 2^digits (2^24 in float): past that, 16777217 reads or
// compares as 16777216, silently. Refused instead: a captured tensor with a dim that long, or an integer one
// holding such a value, and sequences or batches that long (what names the caller, e.g. "flex_attention").
template <class A, class Mod>
void check_exact_in(Mod mod, std::initializer_list<int64_t> sizes, const char* what) {
  constexpr int64_t kExact = int64_t(1) << std::numeric_limits<A>::digits;
  const char* type = std::is_same_v<A, float> ? "float" : "double";
  for (int64_t n : sizes)
    check<std::invalid_argument>(n <= kExact, what, ": a size of ", n, " is past 2^", std::numeric_limits<A>::digits,
                                 ", beyond which ", type, " (the modifiers' compute type) does not hold every index");
  mod.each_captured([&](auto& gather) {
    using T = typename decltype(gather.table)::value_type;
    const Tensor<T>& t = gather.table;
    for (int64_t n : t.shape())
      check<std::invalid_argument>(n <= kExact, what, ": a captured tensor of shape ", t.shape(), " has a dim past 2^",
                                   std::numeric_limits<A>::digits, ", beyond which ", type,
                                   " (the modifiers' compute type) does not hold every index");
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const Tensor<T> c = t.cpu().contiguous();  // (a CUDA tensor's values are read from a host copy)
      for (int64_t i = 0; i < c.numel(); ++i) {
        const T v = c.data_ptr()[i];
        check<std::invalid_argument>(int64_t(v) <= kExact && int64_t(v) >= -kExact, what, ": a captured ",
                                     dtype_name(scalar_type_of<T>()), " tensor holds ", int64_t(v), ", past 2^",
                                     std::numeric_limits<A>::digits, ", which ", type,
                                     " (the modifiers' compute type) does not hold exactly (ids that differ would "
                                     "compare equal); renumber the values");
      }
    }
  });
}

template <node::Arith kOp, class X, class Y>
auto arith(const X& x, const Y& y) {
  static_assert(!decltype(as_node(x))::is_bool && !decltype(as_node(y))::is_bool,
                "attention modifier: arithmetic on a boolean (use where(mask, a, b))");
  return node::Binary<kOp, decltype(as_node(x)), decltype(as_node(y))>(as_node(x), as_node(y));
}
template <node::Compare kOp, class X, class Y>
auto compare(const X& x, const Y& y) {
  return node::Comparison<kOp, decltype(as_node(x)), decltype(as_node(y))>(as_node(x), as_node(y));
}
template <node::Logic kOp, class X, class Y>
auto logical(const X& x, const Y& y) {
  static_assert(decltype(as_node(x))::is_bool && decltype(as_node(y))::is_bool,
                "attention modifier: & and | combine masks (comparisons)");
  return node::Logical<kOp, decltype(as_node(x)), decltype(as_node(y))>(as_node(x), as_node(y));
}

// clang-format off
template <class X, class Y> requires NodePair<X, Y> auto operator+(const X& x, const Y& y) { return arith<node::Arith::Add>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator-(const X& x, const Y& y) { return arith<node::Arith::Sub>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator*(const X& x, const Y& y) { return arith<node::Arith::Mul>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator/(const X& x, const Y& y) { return arith<node::Arith::Div>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto minimum(const X& x, const Y& y) { return arith<node::Arith::Min>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto maximum(const X& x, const Y& y) { return arith<node::Arith::Max>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator<(const X& x, const Y& y) { return compare<node::Compare::Lt>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator<=(const X& x, const Y& y) { return compare<node::Compare::Le>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator>(const X& x, const Y& y) { return compare<node::Compare::Gt>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator>=(const X& x, const Y& y) { return compare<node::Compare::Ge>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator==(const X& x, const Y& y) { return compare<node::Compare::Eq>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator!=(const X& x, const Y& y) { return compare<node::Compare::Ne>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator&(const X& x, const Y& y) { return logical<node::Logic::And>(x, y); }
template <class X, class Y> requires NodePair<X, Y> auto operator|(const X& x, const Y& y) { return logical<node::Logic::Or>(x, y); }
template <Node X> requires X::is_bool auto operator!(const X& x) { return node::Not<X>(x); }
template <Node X> requires (!X::is_bool) auto operator-(const X& x) { return node::Unary<node::Fn::Neg, X>(x); }
template <Node X> auto abs(const X& x) { return node::Unary<node::Fn::Abs, X>(x); }
template <Node X> auto exp(const X& x) { return node::Unary<node::Fn::Exp, X>(x); }
template <Node X> auto log(const X& x) { return node::Unary<node::Fn::Log, X>(x); }
template <Node X> auto tanh(const X& x) { return node::Unary<node::Fn::Tanh, X>(x); }
template <Node X> auto sigmoid(const X& x) { return node::Unary<node::Fn::Sigmoid, X>(x); }
template <Node X> auto sqrt(const X& x) { return node::Unary<node::Fn::Sqrt, X>(x); }
// clang-format on
template <class C, class X, class Y>
  requires Node<C> && C::is_bool && ModOperand<X> && ModOperand<Y>
auto where(const C& c, const X& x, const Y& y) {
  return node::Where<C, decltype(as_node(x)), decltype(as_node(y))>(c, as_node(x), as_node(y));
}

// The placeholders, for modifiers written as expressions rather than functions.
namespace placeholders {
inline constexpr node::Score score{};
inline constexpr node::Index<kB> b{};
inline constexpr node::Index<kH> h{};
inline constexpr node::Index<kQ> q_idx{};
inline constexpr node::Index<kKv> kv_idx{};
}  // namespace placeholders

// No score modifier: the score as it is.
struct NoScoreMod {};

// A score modifier given as a function of (score, b, h, q_idx, kv_idx) or as an expression; identity when
// none. A mask given as a function of (b, h, q_idx, kv_idx) or as a boolean expression.
template <class F>
auto as_score_mod(const F& f) {
  using namespace placeholders;
  if constexpr (std::is_same_v<F, NoScoreMod>) return node::Score{};
  else if constexpr (Node<F>) return f;
  else return as_node(f(score, b, h, q_idx, kv_idx));
}
template <class F>
auto as_mask_mod(const F& f) {
  using namespace placeholders;
  if constexpr (Node<F>) return f;
  else return as_node(f(b, h, q_idx, kv_idx));
}

}  // namespace kiln::attention
