#pragma once
// torch.linalg.cholesky, batched over leading dims, with its gradient.
//
//   Tensor<double> L = linalg::cholesky(A);        // A = L L^T, L lower; reads A's lower triangle
//   Tensor<double> U = linalg::cholesky(A, true);  // A = U^T U, U upper; reads A's upper triangle
//
// A matrix that is not positive-definite throws LinAlgError naming the batch element and the order of the
// first leading minor that is not positive-definite, as torch does. Gradient (Murray, "Differentiation of
// the Cholesky decomposition", 2016; torch's cholesky_backward): with P = lower(L^T gL) and
// S = (P + strict_lower(P)^T) / 2, gA = L^-T S L^-1 (symmetric, as A is; for upper, L = U^T and gL = gU^T).
#include "kiln/linalg/common.hpp"


namespace kiln::linalg {

namespace detail {

// The order (1-based) of the first leading minor of a's lower triangle that is not positive-definite:
// an unblocked Cholesky, run only to name it once Eigen's factorization has failed.
template <class T>
int64_t failing_minor(const Matrix<T>& a) {
  const Eigen::Index n = a.rows();
  Matrix<T> l = Matrix<T>::Zero(n, n);
  for (Eigen::Index j = 0; j < n; ++j) {
    T d = a(j, j);
    for (Eigen::Index k = 0; k < j; ++k) d -= l(j, k) * l(j, k);
    if (!(d > T(0))) return j + 1;
    l(j, j) = std::sqrt(d);
    for (Eigen::Index i = j + 1; i < n; ++i) {
      T v = a(i, j);
      for (Eigen::Index k = 0; k < j; ++k) v -= l(i, k) * l(j, k);
      l(i, j) = v / l(j, j);
    }
  }
  return n;  // Eigen failed on a value this loop accepts (rounding at the edge): name the whole matrix
}

template <class T>
struct CholeskyBackward : autograd::Node {
  CholeskyBackward(const Tensor<T>& a, const Tensor<T>& factor, bool upper)
      : factor_(factor.impl_ptr()), upper_(upper) {
    next_edges.push_back(autograd::gradient_edge(a.impl_ptr()));
  }
  std::string name() const override { return "LinalgCholeskyBackward"; }
  void release_saved() override { factor_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    const Stack<T> F(Tensor<T>(factor_.unpack(*this))), G{Tensor<T>(grads[0])};
    const Stack<T> gA(F.tensor.shape(), "linalg.cholesky backward");
    for_each_matrix(F.count, 3 * cubic_cost(F.rows), [&](int64_t i) -> int64_t {
      const Matrix<T> L = upper_ ? Matrix<T>(F[i].transpose()) : Matrix<T>(F[i]);
      const Matrix<T> gL = upper_ ? Matrix<T>(G[i].transpose()) : Matrix<T>(G[i]);
      Matrix<T> P = (L.transpose() * gL.template triangularView<Eigen::Lower>()).template triangularView<Eigen::Lower>();
      Matrix<T> S = T(0.5) * (P + Matrix<T>(P.template triangularView<Eigen::StrictlyLower>()).transpose());
      L.transpose().template triangularView<Eigen::Upper>().solveInPlace(S);                 // L^-T S
      L.template triangularView<Eigen::Lower>().template solveInPlace<Eigen::OnTheRight>(S);  // S L^-1
      gA[i] = S;
      return 0;
    });
    return {gA.tensor.impl_ptr()};
  }

 private:
  autograd::SavedTensor factor_;
  bool upper_;
};

}  // namespace detail

// The Cholesky factor of each symmetric positive-definite matrix (torch.linalg.cholesky).
template <Operand X>
Tensor<typename X::value_type> cholesky(const X& x, bool upper = false) {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(x);
  if (detail::on_cuda("linalg.cholesky", a)) return cholesky(a.cpu(), upper).to(a.device());
  detail::require_square("linalg.cholesky", "A", a.shape());
  const detail::Stack<T> A(a), F(a.shape(), "linalg.cholesky");
  const detail::Failure failed = detail::for_each_matrix(A.count, detail::cubic_cost(A.rows) / 3, [&](int64_t i) {
    // The lower triangle of A (or of A^T, for upper: A's upper triangle).
    const detail::Matrix<T> m = upper ? detail::Matrix<T>(A[i].transpose()) : detail::Matrix<T>(A[i]);
    const Eigen::LLT<detail::Matrix<T>> llt(m);
    if (llt.info() != Eigen::Success) return detail::failing_minor<T>(m);
    if (upper) F[i] = llt.matrixU();
    else F[i] = llt.matrixL();
    return int64_t(0);
  });
  if (failed)
    throw LinAlgError(detail::cat("linalg.cholesky: ", detail::batch_prefix(a.shape(), failed.index),
                                  "the factorization could not be completed because the input is not positive-definite "
                                  "(the leading minor of order ", failed.code, " is not positive-definite)"));
  if (detail::needs_grad(a)) detail::record(F.tensor, std::make_shared<detail::CholeskyBackward<T>>(a, F.tensor, upper));
  return F.tensor;
}

}  // namespace kiln::linalg
