#pragma once
// torch.linalg.svd and svdvals, batched over leading dims (Eigen's divide-and-conquer BDCSVD, as
// LAPACK's gesdd; no gradient in kiln).
//
//   auto [U, S, Vh] = linalg::svd(A);         // A [*, m, n], k = min(m, n): U [*, m, m], S [*, k], Vh [*, n, n]
//   auto [U, S, Vh] = linalg::svd(A, false);  // full_matrices = false: U [*, m, k], Vh [*, k, n]
//   Tensor<double> S = linalg::svdvals(A);    // descending, A = U diag(S) Vh
//
// Singular vectors are unique only up to sign (and rotation within repeated singular values), as in torch.
#include "kiln/linalg/common.hpp"


namespace kiln::linalg {

template <Dtype T>
struct SVDResult {
  Tensor<T> U;
  Tensor<T> S;
  Tensor<T> Vh;
  SVDResult to(Device device) const { return {U.to(device), S.to(device), Vh.to(device)}; }
};

namespace detail {

template <class T>
SVDResult<T> svd_impl(const Tensor<T>& a, bool full_matrices, bool vectors, const char* op) {
  require_float<T>();
  if (on_cuda(op, a)) return svd_impl(a.cpu(), full_matrices, vectors, op).to(a.device());
  require_matrix(op, "A", a.shape());
  refuse_grad(op, a);
  const Stack<T> A(a);
  const int64_t m = A.rows, n = A.cols, k = std::min(m, n);
  const Shape batch = batch_shape(a.shape());
  auto with = [&](int64_t rows, int64_t cols) {  // no storage for vectors svdvals does not compute
    Shape s = vectors ? batch : Shape{};
    s.push_back(vectors ? rows : 0);
    s.push_back(vectors ? cols : 0);
    return s;
  };
  const int64_t ucols = full_matrices ? m : k, vrows = full_matrices ? n : k;
  const Stack<T> U(with(m, ucols), op), Vh(with(vrows, n), op);
  Shape s_shape = batch;
  s_shape.push_back(k);
  Tensor<T> S(TensorImpl::allocate(s_shape, scalar_type_of<T>(), op));
  const unsigned options = !vectors ? 0u
                           : full_matrices ? unsigned(Eigen::ComputeFullU | Eigen::ComputeFullV)
                                           : unsigned(Eigen::ComputeThinU | Eigen::ComputeThinV);
  using Col = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const Failure failed = for_each_matrix(A.count, 8 * m * n * std::max<int64_t>(k, 1), [&](int64_t i) -> int64_t {
    const Eigen::BDCSVD<Col> f(Col(A[i]), options);
    if (f.info() != Eigen::Success) return f.info() == Eigen::InvalidInput ? 2 : 1;
    Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(S.data_ptr() + i * k, k) = f.singularValues();
    if (vectors) {
      U[i] = f.matrixU();
      Vh[i] = f.matrixV().transpose();
    }
    return 0;
  });
  if (failed)
    throw LinAlgError(cat(op, ": ", batch_prefix(a.shape(), failed.index),
                          failed.code == 2 ? "the algorithm failed to converge because the input matrix contained "
                                             "non-finite values"
                                           : "the algorithm failed to converge because the input matrix is "
                                             "ill-conditioned or has too many repeated singular values"));
  return {U.tensor, S, Vh.tensor};
}

}  // namespace detail

template <Operand X>
auto svd(const X& x, bool full_matrices = true) {
  return detail::svd_impl(detail::as_tensor(x), full_matrices, true, "linalg.svd");
}

template <Operand X>
auto svdvals(const X& x) {
  return detail::svd_impl(detail::as_tensor(x), false, false, "linalg.svdvals").S;
}

}  // namespace kiln::linalg
