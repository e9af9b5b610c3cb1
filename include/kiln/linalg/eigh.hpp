#pragma once
// torch.linalg.eigh and eigvalsh: eigenvalues (ascending) and orthonormal eigenvectors of symmetric
// matrices, batched over leading dims (no gradient in kiln).
//
//   auto [L, V] = linalg::eigh(A);      // A [*, n, n]: L [*, n] ascending, V [*, n, n], A = V diag(L) V^T
//   auto L = linalg::eigvalsh(A, "U");  // reads A's upper triangle ("L", the default: the lower one)
//
// Each eigenvector's sign is arbitrary, as in torch. A failure to converge throws LinAlgError.
#include <string_view>

#include "kiln/linalg/common.hpp"


namespace kiln::linalg {

template <Dtype T>
struct EighResult {
  Tensor<T> eigenvalues;
  Tensor<T> eigenvectors;
};

namespace detail {

template <class T>
EighResult<T> eigh_impl(const Tensor<T>& a, std::string_view uplo, bool vectors, const char* op) {
  require_float<T>();
  require_square(op, "A", a.shape());
  check(uplo == "L" || uplo == "U", op, ": UPLO must be \"L\" or \"U\", got \"", uplo, "\"");
  refuse_grad(op, a);
  const Stack<T> A(a);
  Shape values_shape = batch_shape(a.shape(), 1);
  const Stack<T> V(vectors ? a.shape() : Shape{0, 0}, op);
  Tensor<T> values(TensorImpl::allocate(values_shape, scalar_type_of<T>(), op));
  const int64_t n = A.rows;
  const Failure failed = for_each_matrix(A.count, 4 * cubic_cost(n), [&](int64_t i) -> int64_t {
    // Eigen reads the lower triangle; "U" hands it A^T, whose lower triangle is A's upper one.
    const Matrix<T> m = uplo == "U" ? Matrix<T>(A[i].transpose()) : Matrix<T>(A[i]);
    const Eigen::SelfAdjointEigenSolver<Matrix<T>> es(m, vectors ? Eigen::ComputeEigenvectors : Eigen::EigenvaluesOnly);
    if (es.info() != Eigen::Success) return 1;
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(values.data_ptr() + i * n, n) = es.eigenvalues();
    if (vectors) V[i] = es.eigenvectors();
    return 0;
  });
  if (failed)
    throw LinAlgError(cat(op, ": ", batch_prefix(a.shape(), failed.index),
                          "the algorithm failed to converge because the input matrix is ill-conditioned or has too "
                          "many repeated eigenvalues"));
  return {values, V.tensor};
}

}  // namespace detail

template <Operand X>
auto eigh(const X& x, std::string_view uplo = "L") {
  return detail::eigh_impl(detail::as_tensor(x), uplo, true, "linalg.eigh");
}

template <Operand X>
auto eigvalsh(const X& x, std::string_view uplo = "L") {
  return detail::eigh_impl(detail::as_tensor(x), uplo, false, "linalg.eigvalsh").eigenvalues;
}

}  // namespace kiln::linalg
