#pragma once
// CUDA C++ for flex_attention's score and mask modifiers (attention/modifier.hpp): the same nodes that run on
// Highway vectors on the CPU become statements inlined into the generated attention kernels
// (attention/flex_cuda.hpp), one (query, key) pair per thread. Values compute in the kernel's compute type
// (A: float, or double for double tensors) with indices carried in it, as on the CPU, so both paths round alike.
//
// The kernel around a modifier provides, for the pair at hand: `score`, `pb`, `ph`, `pq`, `pkv` (of type A),
// `live` (whether the pair is inside the sequences and allowed by the mask: a captured read out of bounds is an
// error only there) and the descriptor `d` with, per captured slot s, `caps` (the table), `caps_size[r]`,
// `caps_stride[r]` and `caps_grad` (A*, null when no gradient is wanted), and `error` (set to 1 on a bad read).
// Slots number the captured reads in each_captured's order, mask first, then score (flex_cuda.hpp).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/attention/modifier.hpp"
#include "kiln/cuda/codegen.hpp"

namespace kiln::attention::cuda_mod {

using kiln::detail::cat;

// The statements emitted so far, and the captured slots met.
struct Code {
  std::string compute;  // "float" or "double"
  std::string indent;
  std::string body;
  int vars = 0;
  std::vector<int> captured_ranks;  // by slot

  void line(const std::string& s) { body += indent + s + "\n"; }
  std::string define(std::string_view type, const std::string& value) {
    const std::string v = cat("m", vars++);
    line(cat("const ", type, " ", v, " = ", value, ";"));
    return v;
  }
  std::string value(const std::string& v) { return define(compute, v); }
  // A constant of the compute type (hexadecimal: exact; infinities spelled through a bit pattern).
  std::string literal(double v) const {
    const bool f = compute == "float";
    if (std::isnan(v)) return f ? "__uint_as_float(0x7fc00000u)" : "__longlong_as_double(0x7ff8000000000000LL)";
    if (std::isinf(v)) {
      const std::string inf = f ? "__uint_as_float(0x7f800000u)" : "__longlong_as_double(0x7ff0000000000000LL)";
      return v > 0 ? inf : "(-" + inf + ")";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", f ? double(float(v)) : v);
    return cat("((", compute, ")", buf, ")");
  }
};

// The variables of a node's value and of its children's (for the backward sweep); a captured read also keeps
// its slot, whether it was in bounds and its row-major offset.
struct Tape {
  Tape() = default;
  Tape(std::string v, std::vector<Tape> k = {}) : var(std::move(v)), kids(std::move(k)) {}
  std::string var;
  std::vector<Tape> kids;
  int slot = -1;
  std::string ok, dense;
};

// Values.
inline Tape emit(const node::Score&, Code&) { return {"score"}; }
template <unsigned kWhich>
Tape emit(const node::Index<kWhich>&, Code&) {
  return {kWhich == kB ? "pb" : kWhich == kH ? "ph" : kWhich == kQ ? "pq" : "pkv"};
}
inline Tape emit(const node::Const& c, Code& code) { return {code.literal(c.v)}; }
inline Tape emit(const node::True&, Code&) { return {"true"}; }
template <node::Arith kOp, class A, class B>
Tape emit(const node::Binary<kOp, A, B>& n, Code& code);
template <node::Fn kFn, class A>
Tape emit(const node::Unary<kFn, A>& n, Code& code);
template <node::Compare kOp, class A, class B>
Tape emit(const node::Comparison<kOp, A, B>& n, Code& code);
template <node::Logic kOp, class A, class B>
Tape emit(const node::Logical<kOp, A, B>& n, Code& code);
template <class A>
Tape emit(const node::Not<A>& n, Code& code);
template <class C, class A, class B>
Tape emit(const node::Where<C, A, B>& n, Code& code);
template <class T, class... I>
Tape emit(const node::Gather<T, I...>& n, Code& code);

template <node::Arith kOp, class A, class B>
Tape emit(const node::Binary<kOp, A, B>& n, Code& code) {
  Tape t{"", {emit(n.a, code), emit(n.b, code)}};
  const std::string &x = t.kids[0].var, &y = t.kids[1].var;
  using enum node::Arith;
  if constexpr (kOp == Min) t.var = code.value(cat("fmin(", x, ", ", y, ")"));
  else if constexpr (kOp == Max) t.var = code.value(cat("fmax(", x, ", ", y, ")"));
  else t.var = code.value(cat(x, kOp == Add ? " + " : kOp == Sub ? " - " : kOp == Mul ? " * " : " / ", y));
  return t;
}

template <node::Fn kFn, class A>
Tape emit(const node::Unary<kFn, A>& n, Code& code) {
  Tape t{"", {emit(n.a, code)}};
  const std::string& x = t.kids[0].var;
  const std::string one = code.literal(1);
  using enum node::Fn;
  if constexpr (kFn == Neg) t.var = code.value("-" + x);
  else if constexpr (kFn == Abs) t.var = code.value(cat("fabs(", x, ")"));
  else if constexpr (kFn == Exp) t.var = code.value(cat("exp(", x, ")"));
  else if constexpr (kFn == Log) t.var = code.value(cat("log(", x, ")"));
  else if constexpr (kFn == Tanh) t.var = code.value(cat("tanh(", x, ")"));
  else if constexpr (kFn == Sigmoid) t.var = code.value(cat(one, " / (", one, " + exp(-", x, "))"));
  else t.var = code.value(cat("sqrt(", x, ")"));
  return t;
}

template <node::Compare kOp, class A, class B>
Tape emit(const node::Comparison<kOp, A, B>& n, Code& code) {
  Tape t{"", {emit(n.a, code), emit(n.b, code)}};
  using enum node::Compare;
  const char* op = kOp == Lt ? " < " : kOp == Le ? " <= " : kOp == Gt ? " > " : kOp == Ge ? " >= " : kOp == Eq ? " == " : " != ";
  t.var = code.define("bool", cat(t.kids[0].var, op, t.kids[1].var));
  return t;
}

template <node::Logic kOp, class A, class B>
Tape emit(const node::Logical<kOp, A, B>& n, Code& code) {
  Tape t{"", {emit(n.a, code), emit(n.b, code)}};
  t.var = code.define("bool", cat(t.kids[0].var, kOp == node::Logic::And ? " && " : " || ", t.kids[1].var));
  return t;
}

template <class A>
Tape emit(const node::Not<A>& n, Code& code) {
  Tape t{"", {emit(n.a, code)}};
  t.var = code.define("bool", "!" + t.kids[0].var);
  return t;
}

template <class C, class A, class B>
Tape emit(const node::Where<C, A, B>& n, Code& code) {
  Tape t{"", {emit(n.c, code), emit(n.a, code), emit(n.b, code)}};
  t.var = code.value(cat(t.kids[0].var, " ? ", t.kids[1].var, " : ", t.kids[2].var));
  return t;
}

// The indices are checked as the CPU checks them (in bounds and whole, before the conversion); a read out of
// bounds gives 0 and, where live, the error flag.
template <class T, class... I>
Tape emit(const node::Gather<T, I...>& n, Code& code) {
  Tape t;
  std::apply([&](const auto&... i) { (t.kids.push_back(emit(i, code)), ...); }, n.index);
  t.slot = int(code.captured_ranks.size());
  code.captured_ranks.push_back(int(sizeof...(I)));
  const std::string cap = cat("d.cap", t.slot);
  t.ok = cat("ok", t.slot);
  t.dense = cat("dense", t.slot);
  const std::string off = cat("off", t.slot);
  code.line(cat("bool ", t.ok, " = true;"));
  code.line(cat("long long ", t.dense, " = 0, ", off, " = 0;"));
  for (size_t k = 0; k < t.kids.size(); ++k) {
    const std::string x = t.kids[k].var, size = cat(cap, "_size[", k, "]");
    code.line(cat("{ const bool g = ", x, " >= (", code.compute, ")0 && ", x, " < (", code.compute, ")", size, " && ", x,
                  " == trunc(", x, "); ", t.ok, " = ", t.ok, " && g; const long long i = g ? (long long)", x, " : 0; ",
                  t.dense, " = ", t.dense, " * ", size, " + i; ", off, " += i * ", cap, "_stride[", k, "]; }"));
  }
  code.line(cat("if (!", t.ok, " && live) *d.error = 1;"));
  t.var = code.value(cat(t.ok, " ? (", code.compute, ")", cuda::detail::load_element<T>(cap, off), " : (", code.compute, ")0"));
  return t;
}

// The backward sweep: pushes the adjoint `g` of a node's value down to `dscore` and, as atomic adds, into the
// gradient buffers of captured tensors. Subtrees that reach neither emit nothing.
template <class N>
void backward(const N& n, const Tape& t, const std::string& g, Code& code);

template <class N>
constexpr bool reaches_gradient = !N::is_bool && (N::uses & (kScore | kCaptured)) != 0;

inline void backward_node(const node::Score&, const Tape&, const std::string& g, Code& code) {
  code.line(cat("dscore += ", g, ";"));
}
template <node::Arith kOp, class A, class B>
void backward_node(const node::Binary<kOp, A, B>& n, const Tape& t, const std::string& g, Code& code) {
  const std::string &x = t.kids[0].var, &y = t.kids[1].var;
  using enum node::Arith;
  if constexpr (kOp == Add || kOp == Sub) {
    backward(n.a, t.kids[0], g, code);
    if constexpr (reaches_gradient<B>) backward(n.b, t.kids[1], kOp == Add ? g : code.value("-" + g), code);
  } else if constexpr (kOp == Mul) {
    if constexpr (reaches_gradient<A>) backward(n.a, t.kids[0], code.value(cat(g, " * ", y)), code);
    if constexpr (reaches_gradient<B>) backward(n.b, t.kids[1], code.value(cat(g, " * ", x)), code);
  } else if constexpr (kOp == Div) {
    const std::string q = code.value(cat(g, " / ", y));
    backward(n.a, t.kids[0], q, code);
    if constexpr (reaches_gradient<B>) backward(n.b, t.kids[1], code.value(cat("-(", q, " * (", x, " / ", y, "))")), code);
  } else {  // to the chosen side, to a on ties (as the CPU)
    const std::string to_a = code.define("bool", cat(x, kOp == Min ? " <= " : " >= ", y));
    backward(n.a, t.kids[0], code.value(cat(to_a, " ? ", g, " : (", code.compute, ")0")), code);
    backward(n.b, t.kids[1], code.value(cat(to_a, " ? (", code.compute, ")0 : ", g)), code);
  }
}
template <node::Fn kFn, class A>
void backward_node(const node::Unary<kFn, A>& n, const Tape& t, const std::string& g, Code& code) {
  const std::string &x = t.kids[0].var, &y = t.var, zero = cat("(", code.compute, ")0"), one = code.literal(1);
  using enum node::Fn;
  std::string dx;
  if constexpr (kFn == Neg) dx = "-" + g;
  else if constexpr (kFn == Abs) dx = cat(x, " < ", zero, " ? -", g, " : (", x, " == ", zero, " ? ", zero, " : ", g, ")");
  else if constexpr (kFn == Exp) dx = cat(g, " * ", y);
  else if constexpr (kFn == Log) dx = cat(g, " / ", x);
  else if constexpr (kFn == Tanh) dx = cat(g, " * (", one, " - ", y, " * ", y, ")");
  else if constexpr (kFn == Sigmoid) dx = cat(g, " * (", y, " * (", one, " - ", y, "))");
  else dx = cat("(", g, " * ", code.literal(0.5), ") / ", y);
  backward(n.a, t.kids[0], code.value(dx), code);
}
template <class C, class A, class B>
void backward_node(const node::Where<C, A, B>& n, const Tape& t, const std::string& g, Code& code) {
  const std::string &c = t.kids[0].var, zero = cat("(", code.compute, ")0");
  backward(n.a, t.kids[1], code.value(cat(c, " ? ", g, " : ", zero)), code);
  backward(n.b, t.kids[2], code.value(cat(c, " ? ", zero, " : ", g)), code);
}
template <class T, class... I>
void backward_node(const node::Gather<T, I...>&, const Tape& t, const std::string& g, Code& code) {
  if constexpr (!std::is_floating_point_v<T>) return;  // (as on the CPU: gradients for float and double tables)
  const std::string grad = cat("d.cap", t.slot, "_grad");
  code.line(cat("if (", t.ok, " && ", grad, ") kiln_atomic_add(&((", code.compute, "*)", grad, ")[", t.dense, "], ", g, ");"));
}

template <class N>
void backward(const N& n, const Tape& t, const std::string& g, Code& code) {
  if constexpr (reaches_gradient<N>) backward_node(n, t, g, code);
}

}  // namespace kiln::attention::cuda_mod
