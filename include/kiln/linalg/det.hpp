#pragma once
// torch.linalg.det and torch.linalg.slogdet, batched over leading dims, with their gradients.
//
//   Tensor<double> d = linalg::det(A);              // A [*, n, n] -> [*]
//   auto [sign, logabsdet] = linalg::slogdet(A);    // det = sign * exp(logabsdet); singular: sign 0, -inf
//
// Both come from the LU factorization: det = sign(P) * prod(diag U). Gradients: d det / dA = adj(A)^T,
// which is det * A^-T where det != 0 and, for a singular A (where adj(A) can still be nonzero: rank n - 1),
// comes from the SVD A = U S V^T: adj(A)^T = det(U) det(V) U diag(prod_{j != i} s_j) V^T.
// d logabsdet / dA = A^-T; sign has no gradient.
#include "kiln/linalg/lu.hpp"


namespace kiln::linalg {

template <Dtype T>
struct SlogdetResult {
  Tensor<T> sign;
  Tensor<T> logabsdet;
  SlogdetResult to(Device device) const { return {sign.to(device), logabsdet.to(device)}; }
};

namespace detail {

// adj(A)^T, the cofactor matrix: det * A^-T when det != 0, else from the SVD.
template <class T>
Matrix<T> cofactors(const MatrixMap<T>& a, T det) {
  if (det != T(0)) return det * LU<T>(a).inverse().transpose();
  using Col = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::JacobiSVD<Col> svd(Col(a), Eigen::ComputeFullU | Eigen::ComputeFullV);
  const auto& s = svd.singularValues();
  const Eigen::Index n = s.size();
  Eigen::Matrix<T, Eigen::Dynamic, 1> others(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    T p = 1;
    for (Eigen::Index j = 0; j < n; ++j)
      if (j != i) p *= s(j);
    others(i) = p;
  }
  const T orientation = svd.matrixU().determinant() * svd.matrixV().determinant();
  return orientation * svd.matrixU() * others.asDiagonal() * svd.matrixV().transpose();
}

// The gradient of det (log_abs = false) or of logabsdet (log_abs = true): g * cofactors / (det or 1).
template <class T, bool kLogAbs>
struct DetBackward : autograd::Node {
  DetBackward(const Tensor<T>& a, const Tensor<T>& det) : a_(a.impl_ptr()), det_(det.impl_ptr()) {
    next_edges.push_back(autograd::gradient_edge(a.impl_ptr()));
  }
  std::string name() const override { return kLogAbs ? "LinalgSlogdetBackward" : "LinalgDetBackward"; }
  void release_saved() override { a_ = det_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    const Stack<T> A(Tensor<T>(a_.unpack(*this)));
    const Tensor<T> det = Tensor<T>(det_.unpack(*this)).contiguous(), g = Tensor<T>(grads[0]).contiguous();
    const Stack<T> gA(A.tensor.shape(), "linalg.det backward");
    for_each_matrix(A.count, 2 * cubic_cost(A.rows), [&](int64_t i) -> int64_t {
      if constexpr (kLogAbs) gA[i] = g.data_ptr()[i] * LU<T>(A[i]).inverse().transpose();
      else gA[i] = g.data_ptr()[i] * cofactors<T>(A[i], det.data_ptr()[i]);
      return 0;
    });
    return {gA.tensor.impl_ptr()};
  }

 private:
  autograd::SavedTensor a_, det_;
};

// Per matrix: {sign, log|det|} (log_abs) or {det, unused}, from one LU factorization.
template <class T>
std::pair<Tensor<T>, Tensor<T>> lu_determinants(const Tensor<T>& a, bool log_abs, const char* op) {
  require_square(op, "A", a.shape());
  const Stack<T> A(a);
  const Shape batch = batch_shape(a.shape());
  Tensor<T> first(TensorImpl::allocate(batch, scalar_type_of<T>(), op));
  Tensor<T> second(TensorImpl::allocate(log_abs ? batch : Shape{}, scalar_type_of<T>(), op));
  T* f = first.data_ptr();
  T* s = second.data_ptr();
  for_each_matrix(A.count, cubic_cost(A.rows), [&](int64_t i) -> int64_t {
    const LU<T> lu(A[i]);
    if (!log_abs) {
      f[i] = lu.determinant();
      return 0;
    }
    T sign = lu.permutationP().determinant(), log_abs_det = 0;
    for (Eigen::Index k = 0; k < A.rows; ++k) {
      const T u = lu.matrixLU()(k, k);
      sign *= u > 0 ? T(1) : u < 0 ? T(-1) : T(0);
      log_abs_det += std::log(std::abs(u));
    }
    f[i] = sign;
    s[i] = log_abs_det;
    return 0;
  });
  return {first, second};
}

}  // namespace detail

// The determinant of each square matrix (torch.linalg.det): [*, n, n] -> [*].
template <Operand X>
Tensor<typename X::value_type> det(const X& x) {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(x);
  if (detail::on_cuda("linalg.det", a)) return det(a.cpu()).to(a.device());
  const Tensor<T> d = detail::lu_determinants(a, false, "linalg.det").first;
  if (detail::needs_grad(a)) detail::record(d, std::make_shared<detail::DetBackward<T, false>>(a, d));
  return d;
}

// sign and log|det| of each square matrix (torch.linalg.slogdet); a singular matrix gives sign 0 and
// logabsdet -inf. The gradient flows through logabsdet.
template <Operand X>
SlogdetResult<typename X::value_type> slogdet(const X& x) {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(x);
  if (detail::on_cuda("linalg.slogdet", a)) return slogdet(a.cpu()).to(a.device());
  auto [sign, logabsdet] = detail::lu_determinants(a, true, "linalg.slogdet");
  if (detail::needs_grad(a)) detail::record(logabsdet, std::make_shared<detail::DetBackward<T, true>>(a, logabsdet));
  return SlogdetResult<T>{sign, logabsdet};
}

}  // namespace kiln::linalg
