#pragma once
// Eigen interop without copies, both ways.
//
//   auto m = kiln::as_eigen(t);        // Eigen::Map of a 1-d or 2-d tensor, with its strides; writable
//   auto a = kiln::as_eigen_array(t);  // the same as an Eigen::Array (coefficient-wise operators)
//   Tensor<double> v = kiln::from_eigen(matrix);  // a kiln view of an Eigen matrix, array, block or map
//   Tensor<double> y = v * 2.0 + w;    // such a view is a leaf like any other tensor
//
// Both directions share memory: writes through one are seen by the other. Neither owns what it views: an
// Eigen::Map of a tensor is valid while the tensor's storage lives, and a kiln view of an Eigen object is
// valid while that object lives (kiln never frees it). Negative strides (kiln's flip) cannot be mapped and
// throw; a 1-d tensor maps to a column vector.
#include <type_traits>

#include "kiln/cpu/gemm.hpp"  // Eigen/Core, with its warnings silenced
#include "kiln/tensor/factory.hpp"

namespace kiln {

template <Dtype T, int Order = Eigen::RowMajor>
using EigenMatrixMap =
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned,
               Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;
template <Dtype T, int Order = Eigen::RowMajor>
using EigenArrayMap =
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Order>, Eigen::Unaligned,
               Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;

namespace detail::eigen {

// {rows, cols, row stride, col stride} of a 1-d (a column) or 2-d tensor, checked for mapping.
template <Dtype T>
std::array<int64_t, 4> layout(const Tensor<T>& t, const char* op) {
  check<ShapeError>(t.dim() == 1 || t.dim() == 2, op, ": Eigen maps 1-d and 2-d tensors, not shape ", t.shape());
  const int64_t rows = t.size(0), cols = t.dim() == 2 ? t.size(1) : 1;
  const int64_t rs = t.stride(0), cs = t.dim() == 2 ? t.stride(1) : 1;
  check<ShapeError>(rs >= 0 && cs >= 0, op, ": Eigen cannot map negative strides ", t.strides(), "; clone() first");
  return {rows, cols, rs, cs};
}

}  // namespace detail::eigen

// A row-major Eigen::Map with the tensor's strides (outer: the row stride, inner: the column stride).
template <Dtype T>
EigenMatrixMap<T> as_eigen(const Tensor<T>& t) {
  const auto [rows, cols, rs, cs] = detail::eigen::layout(t, "as_eigen");
  return EigenMatrixMap<T>(const_cast<T*>(t.data_ptr()), rows, cols,
                           Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(rs, cs));
}

template <Dtype T>
EigenArrayMap<T> as_eigen_array(const Tensor<T>& t) {
  const auto [rows, cols, rs, cs] = detail::eigen::layout(t, "as_eigen_array");
  return EigenArrayMap<T>(const_cast<T*>(t.data_ptr()), rows, cols,
                          Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(rs, cs));
}

// A kiln view of an Eigen object with direct access (Matrix, Array, Map, Ref, Block): shape [rows] for a
// compile-time vector, [rows, cols] otherwise, with the object's strides. Writes through the view change it.
template <class Derived>
  requires Dtype<typename Derived::Scalar> && (bool(Derived::Flags & Eigen::DirectAccessBit))
Tensor<typename Derived::Scalar> from_eigen(const Eigen::DenseBase<Derived>& object) {
  using T = typename Derived::Scalar;
  const Derived& m = object.derived();
  const int64_t inner = m.innerStride(), outer = m.outerStride();
  const bool row_major = Derived::IsRowMajor;
  T* data = const_cast<T*>(m.data());
  if constexpr (Derived::IsVectorAtCompileTime) return from_blob(data, {int64_t(m.size())}, {inner});
  const Strides strides = row_major ? Strides{outer, inner} : Strides{inner, outer};
  return from_blob(data, {int64_t(m.rows()), int64_t(m.cols())}, strides);
}

}  // namespace kiln
