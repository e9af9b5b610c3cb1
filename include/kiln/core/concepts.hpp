#pragma once
// The concepts that pick kiln's overloads. Tags instead of base classes, so the layers below the
// Tensor class can recognize it without including it.
#include <type_traits>

namespace kiln {

// A lazy expression node (Leaf, Scalar, Map): has the member type kiln_expr.
template <class X>
concept Expression = requires { typename X::kiln_expr; };

// A Tensor<T> handle: has the member type kiln_tensor.
template <class X>
concept TensorHandle = requires { typename X::kiln_tensor; };

// Something an elementwise op takes as an operand.
template <class X>
concept Operand = Expression<X> || TensorHandle<X>;

// An operand or a C++ number (a scalar converts to the other operands' dtype).
template <class X>
concept OperandOrScalar = Operand<X> || std::is_arithmetic_v<X>;

}  // namespace kiln
