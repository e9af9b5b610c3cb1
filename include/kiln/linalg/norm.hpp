#pragma once
// torch.linalg.vector_norm, matrix_norm and norm.
//
//   linalg::vector_norm(x)                 // 2-norm of all elements; ord any double (inf, -inf, 0: count)
//   linalg::vector_norm(x, 1, Dims{-1})    // along dims, keepdim as torch
//   linalg::matrix_norm(A)                 // "fro" over the last two dims; "nuc", 1, -1, 2, -2, inf, -inf
//   linalg::norm(x)                        // dim and ord absent: the 2-norm of x flattened
//   linalg::norm(A, "nuc"), linalg::norm(x, 3.0, Dims{0})  // one dim: vector norm; two: matrix norm
//
// The vector norms and the "fro", 1, -1, inf, -inf matrix norms are kiln reductions of expressions, so they
// fuse and have gradients; the singular-value norms ("nuc", 2, -2) come from svdvals and have none.
#include <cmath>
#include <optional>
#include <string_view>

#include "kiln/linalg/svd.hpp"
#include "kiln/tensor/reduce.hpp"

namespace kiln::linalg {

template <Operand X>
auto vector_norm(const X& x, double ord = 2, std::optional<Dims> dim = std::nullopt, bool keepdim = false) {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> t = detail::as_tensor(x);
  if (!dim || dim->size() == 0) {
    if (!keepdim) return Tensor<T>(kiln::norm(t, ord));
    Dims all;
    for (int i = 0; i < t.dim(); ++i) all.push_back(i);
    return Tensor<T>(kiln::norm(t, ord, all, true));
  }
  return Tensor<T>(kiln::norm(t, ord, *dim, keepdim));
}

namespace detail {

inline std::pair<int, int> matrix_dims(const Shape& s, const Dims& dim, const char* op) {
  check<ShapeError>(s.size() >= 2, op, ": A must have at least 2 dimensions, got shape ", s);
  check<ShapeError>(dim.size() == 2, op, ": dim must be a 2-tuple, got ", dim.size(), " dims");
  const int d0 = wrap_dim(dim[0], int(s.size()), op), d1 = wrap_dim(dim[1], int(s.size()), op);
  check<ShapeError>(d0 != d1, op, ": dims must be different, got (", dim[0], ", ", dim[1], ")");
  return {d0, d1};
}

// The shape after reducing dims d0 and d1 (kept as size 1 when keepdim).
inline Shape without_dims(const Shape& s, int d0, int d1, bool keepdim) {
  Shape out;
  for (int i = 0; i < int(s.size()); ++i) {
    if (i != d0 && i != d1) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// A reduction of the singular values of the matrices in dims (d0, d1): sum, max or min.
template <class T>
Tensor<T> singular_value_norm(const Tensor<T>& a, int d0, int d1, double ord, bool keepdim) {
  refuse_grad("linalg.matrix_norm", a);
  Dims order;
  for (int i = 0; i < a.dim(); ++i)
    if (i != d0 && i != d1) order.push_back(i);
  order.push_back(d0);
  order.push_back(d1);
  const Tensor<T> s = svdvals(a.permute(order));
  const Tensor<T> r = ord == 2 ? amax(s, -1) : ord == -2 ? amin(s, -1) : sum(s, -1);
  return r.reshape(without_dims(a.shape(), d0, d1, keepdim));
}

}  // namespace detail

// ord: 1 / -1 (max / min column sum of |a|), inf / -inf (max / min row sum), 2 / -2 (largest / smallest
// singular value).
template <Operand X>
auto matrix_norm(const X& x, double ord, Dims dim = {-2, -1}, bool keepdim = false) {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(x);
  const char* op = "linalg.matrix_norm";
  const auto [d0, d1] = detail::matrix_dims(a.shape(), dim, op);
  const double inf = std::numeric_limits<double>::infinity();
  if (std::abs(ord) == 2) return detail::singular_value_norm(a, d0, d1, ord, keepdim);
  check(std::abs(ord) == 1 || std::abs(ord) == inf, op, ": order ", ord, " is not supported (1, -1, 2, -2, inf, -inf, ",
        "\"fro\" or \"nuc\")");
  // 1-norms sum over rows (d0) and pick among columns; inf-norms the other way round.
  const int summed = std::abs(ord) == 1 ? d0 : d1, picked = std::abs(ord) == 1 ? d1 : d0;
  const Tensor<T> sums = sum(abs(a), Dims{summed}, true);
  const Tensor<T> r = ord > 0 ? amax(sums, Dims{picked}, true) : amin(sums, Dims{picked}, true);
  return keepdim ? r : r.reshape(detail::without_dims(a.shape(), d0, d1, false));
}

// ord: "fro" (the default: the 2-norm of the elements) or "nuc" (the sum of the singular values).
template <Operand X>
auto matrix_norm(const X& x, std::string_view ord = "fro", Dims dim = {-2, -1}, bool keepdim = false) {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(x);
  const char* op = "linalg.matrix_norm";
  const auto [d0, d1] = detail::matrix_dims(a.shape(), dim, op);
  check(ord == "fro" || ord == "nuc", op, ": order \"", ord, "\" is not supported (\"fro\", \"nuc\" or a number)");
  if (ord == "nuc") return detail::singular_value_norm(a, d0, d1, 0, keepdim);
  return Tensor<T>(kiln::norm(a, 2, Dims{d0, d1}, keepdim));
}

// torch.linalg.norm: without dim, a 1-d input takes a vector norm and a 2-d input a matrix norm (any other
// rank needs dim, unless ord is absent too: then x is flattened); with dim, one dim is a vector norm and
// two a matrix norm.
template <Operand X>
auto norm(const X& x, std::optional<double> ord = std::nullopt, std::optional<Dims> dim = std::nullopt,
          bool keepdim = false) {
  using T = typename X::value_type;
  const Tensor<T> a = detail::as_tensor(x);
  if (!ord && !dim) return vector_norm(a, 2, std::nullopt, keepdim);
  if (dim) {
    check<ShapeError>(dim->size() == 1 || dim->size() == 2, "linalg.norm: dim must have 1 or 2 dims, got ",
                      dim->size());
    if (dim->size() == 1) return vector_norm(a, ord.value_or(2), dim, keepdim);
    return ord ? matrix_norm(a, *ord, *dim, keepdim) : matrix_norm(a, "fro", *dim, keepdim);
  }
  check<ShapeError>(a.dim() == 1 || a.dim() == 2, "linalg.norm: with ord and without dim the input must be 1-d or 2-d, ",
                    "got shape ", a.shape());
  return a.dim() == 1 ? vector_norm(a, *ord, std::nullopt, keepdim) : matrix_norm(a, *ord, Dims{-2, -1}, keepdim);
}

template <Operand X>
auto norm(const X& x, std::string_view ord, std::optional<Dims> dim = std::nullopt, bool keepdim = false) {
  using T = typename X::value_type;
  const Tensor<T> a = detail::as_tensor(x);
  check<ShapeError>(dim ? dim->size() == 2 : a.dim() == 2, "linalg.norm: order \"", ord,
                    "\" is a matrix norm: give a 2-d input or two dims, got shape ", a.shape());
  return matrix_norm(a, ord, dim.value_or(Dims{-2, -1}), keepdim);
}

}  // namespace kiln::linalg
