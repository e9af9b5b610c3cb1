#pragma once
// Activation functions as expressions (composites of the op table's entries, so the SIMD loop, the CUDA source and
// the gradient come from their parts): torch.nn.functional's silu, gelu, leaky_relu, elu, selu, celu, hardtanh,
// relu6, hardsigmoid, hardswish, mish, softsign, logsigmoid, tanhshrink, softshrink and hardshrink, with PyTorch's
// defaults, values and gradients at the kinks (checked against torch 2.15 in tests/nn/test_activation.cpp).
// Included by expr/functions.hpp; the nn modules that wrap them are in nn/activation.hpp.
#include <numbers>
#include <stdexcept>

#include "kiln/core/error.hpp"

namespace kiln {

template <OperandOrScalar X>
auto silu(const X& x) { return x * sigmoid(x); }

// gelu with erf (PyTorch's default) and with the tanh approximation (approximate="tanh").
template <OperandOrScalar X>
auto gelu(const X& x) { return x * 0.5 * (erf(x * std::numbers::sqrt2 / 2) + 1); }
template <OperandOrScalar X>
auto gelu_tanh(const X& x) {
  constexpr double k = 0.7978845608028654;  // sqrt(2 / pi)
  return x * 0.5 * (tanh((x + x * x * x * 0.044715) * k) + 1);
}

namespace detail {
// x where x <= 0, else 0: the argument of the exponential branches, which then never overflow where they are not
// taken (where's backward would multiply their infinite derivative by a zero gradient: NaN).
template <OperandOrScalar X>
auto nonpositive_part(const X& x) { return where(x > 0, 0, x); }
}  // namespace detail

// x where x > 0, else negative_slope * x; the gradient at 0 is negative_slope.
template <OperandOrScalar X>
auto leaky_relu(const X& x, double negative_slope = 0.01) { return where(x > 0, x, x * negative_slope); }

// x where x > 0, else alpha * (exp(x) - 1); the gradient at 0 is alpha.
template <OperandOrScalar X>
auto elu(const X& x, double alpha = 1.0) { return where(x > 0, x, expm1(detail::nonpositive_part(x)) * alpha); }

// scale * elu(x, alpha) with the self-normalizing constants of Klambauer et al. (2017).
template <OperandOrScalar X>
auto selu(const X& x) {
  constexpr double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return where(x > 0, x * scale, expm1(detail::nonpositive_part(x)) * (alpha * scale));
}

// x where x > 0, else alpha * (exp(x / alpha) - 1).
template <OperandOrScalar X>
auto celu(const X& x, double alpha = 1.0) {
  check<std::invalid_argument>(alpha != 0, "celu: alpha must not be 0");
  return where(x > 0, x, expm1(detail::nonpositive_part(x) * (1 / alpha)) * alpha);
}

// x clamped to [min_val, max_val]; the gradient is 0 outside (min_val, max_val), the bounds included.
template <OperandOrScalar X>
auto hardtanh(const X& x, double min_val = -1.0, double max_val = 1.0) {
  check<std::invalid_argument>(min_val <= max_val, "hardtanh: min_val ", min_val, " is above max_val ", max_val);
  return clamp(x, min_val, max_val);
}
template <OperandOrScalar X>
auto relu6(const X& x) { return hardtanh(x, 0.0, 6.0); }

// min(max(x + 3, 0), 6) / 6: the gradient is 1/6 on (-3, 3), 0 elsewhere.
template <OperandOrScalar X>
auto hardsigmoid(const X& x) { return clamp(x + 3, 0.0, 6.0) / 6; }

// x * hardsigmoid(x): 0 up to -3, x (x + 3) / 6 between, x from 3 on; the gradient at -3 is 0 and at 3 is 1, as
// PyTorch's (not the middle piece's slopes -0.5 and 1.5).
template <OperandOrScalar X>
auto hardswish(const X& x) { return where(x <= -3, 0, where(x < 3, x * (x + 3) / 6, x)); }

template <OperandOrScalar X>
auto mish(const X& x) { return x * tanh(softplus(x)); }

template <OperandOrScalar X>
auto softsign(const X& x) { return x / (abs(x) + 1); }

// log(sigmoid(x)), computed as -softplus(-x) (no underflow to log(0) for very negative x).
template <OperandOrScalar X>
auto logsigmoid(const X& x) { return -softplus(-x); }

template <OperandOrScalar X>
auto tanhshrink(const X& x) { return x - tanh(x); }

// x - lambda above lambda, x + lambda below -lambda, 0 between (NaN stays NaN); lambda >= 0.
template <OperandOrScalar X>
auto softshrink(const X& x, double lambda = 0.5) {
  check<std::invalid_argument>(lambda >= 0, "softshrink: lambda must be at least 0, got ", lambda);
  return where(x >= -lambda && x <= lambda, 0, where(x > lambda, x - lambda, x + lambda));
}

// x where |x| > lambda, else 0 (NaN stays NaN).
template <OperandOrScalar X>
auto hardshrink(const X& x, double lambda = 0.5) { return where(x >= -lambda && x <= lambda, 0, x); }

}  // namespace kiln
