#pragma once
// Declarations of the elementwise functions the op table's derivatives call. They are defined in
// expr/functions.hpp; declaring them here lets a derivative, written once as a generic function,
// work both on expressions (for autograd) and on doubles (for the derivative tests).
#include "kiln/core/concepts.hpp"

namespace kiln {

template <OperandOrScalar X> auto sign(const X& x);
template <OperandOrScalar X> auto exp(const X& x);
template <OperandOrScalar X> auto log(const X& x);
template <OperandOrScalar X> auto sin(const X& x);
template <OperandOrScalar X> auto cos(const X& x);
template <OperandOrScalar X> auto sigmoid(const X& x);
template <OperandOrScalar X> auto zeros_like(const X& x);
template <OperandOrScalar A, OperandOrScalar B> auto pow(const A& a, const B& b);
template <OperandOrScalar A, OperandOrScalar B> auto logical_and(const A& a, const B& b);
template <OperandOrScalar C, OperandOrScalar A, OperandOrScalar B> auto where(const C& c, const A& a, const B& b);

// Marks an operand that has no gradient (the condition of where).
struct NoGrad {};
inline constexpr NoGrad no_grad{};

}  // namespace kiln
