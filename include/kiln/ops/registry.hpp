#pragma once
// The op table's lists. A new op is one struct in unary.hpp/binary.hpp plus one line here; the
// public functions, the op tests and the docs are generated from these lists (KILN_BINARY_NUMBER_OPS: tests only).
#include "kiln/ops/binary.hpp"

// X(function name, op struct)
#define KILN_UNARY_OPS(X)                                                                          \
  X(neg, Neg) X(abs, Abs) X(square, Square) X(sign, Sign) X(relu, Relu) X(reciprocal, Reciprocal) \
  X(sqrt, Sqrt) X(rsqrt, Rsqrt) X(exp, Exp) X(exp2, Exp2) X(expm1, Expm1) X(log, Log)            \
  X(log2, Log2) X(log1p, Log1p) X(sin, Sin) X(cos, Cos) X(tan, Tan) X(tanh, Tanh)                 \
  X(sigmoid, Sigmoid) X(softplus, Softplus) X(erf, Erf) X(floor, Floor) X(ceil, Ceil)             \
  X(round, Round) X(zeros_like, ZerosLike) X(logical_not, LogicalNot)

#define KILN_BINARY_OPS(X)                                                                \
  X(add, Add) X(sub, Sub) X(mul, Mul) X(div, Div) X(pow, Pow) X(minimum, Minimum)        \
  X(maximum, Maximum) X(eq, Eq) X(ne, Ne) X(lt, Lt) X(le, Le) X(gt, Gt) X(ge, Ge)        \
  X(logical_and, LogicalAnd) X(logical_or, LogicalOr) X(logical_xor, LogicalXor)

#define KILN_TERNARY_OPS(X) X(where, Where)

// Binary entries whose second operand is always a plain number (a Scalar node), so it has no gradient (no_grad):
// clamp_min / clamp_max with a number bound. No function is generated from this list: the composites clamp_min,
// clamp_max and clamp (expr/functions.hpp) pick these entries for number bounds and maximum / minimum for tensor
// bounds. The OpSpec checks and the table-driven tests (ops, derivatives, gradcheck, CUDA codegen) include them,
// with a number as the second operand where a gradient is checked.
#define KILN_BINARY_NUMBER_OPS(X) X(clamp_min, ClampMin) X(clamp_max, ClampMax)

namespace kiln::ops {
#define KILN_CHECK_SPEC(fn, Op) static_assert(OpSpec<Op>, "kiln: op table entry " #Op " is incomplete");
// (checked in expr/functions.hpp, once the functions the derivatives call are defined)
}  // namespace kiln::ops
