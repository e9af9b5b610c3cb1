#pragma once
// torch.linalg.qr, batched over leading dims (Householder, as LAPACK's geqrf; no gradient in kiln).
//
//   auto [Q, R] = linalg::qr(A);              // A [*, m, n], k = min(m, n): Q [*, m, k], R [*, k, n]
//   auto [Q, R] = linalg::qr(A, "complete");  // Q [*, m, m], R [*, m, n]
//   auto [Q, R] = linalg::qr(A, "r");         // R only; Q is an empty tensor, as torch's
//
// Q has orthonormal columns and R is upper triangular; the signs of R's diagonal are LAPACK's, not
// normalized (as torch).
#include <string_view>

#include "kiln/linalg/common.hpp"


namespace kiln::linalg {

template <Dtype T>
struct QRResult {
  Tensor<T> Q;
  Tensor<T> R;
  QRResult to(Device device) const { return {Q.to(device), R.to(device)}; }
};

template <Operand X>
QRResult<typename X::value_type> qr(const X& x, std::string_view mode = "reduced") {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(x);
  if (detail::on_cuda("linalg.qr", a)) return qr(a.cpu(), mode).to(a.device());
  detail::require_matrix("linalg.qr", "A", a.shape());
  check(mode == "reduced" || mode == "complete" || mode == "r", "linalg.qr: mode must be \"reduced\", \"complete\" or ",
        "\"r\", got \"", mode, "\"");
  detail::refuse_grad("linalg.qr", a);
  const detail::Stack<T> A(a);
  const int64_t m = A.rows, n = A.cols, k = mode == "complete" ? m : std::min(m, n);
  const Shape batch = detail::batch_shape(a.shape());
  auto with = [&](int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return s;
  };
  const bool want_q = mode != "r";
  const detail::Stack<T> Q(want_q ? with(m, k) : with(0, 0), "linalg.qr"), R(with(k, n), "linalg.qr");
  detail::for_each_matrix(A.count, m * n * std::min(m, n), [&](int64_t i) -> int64_t {
    const Eigen::HouseholderQR<detail::Matrix<T>> f(A[i]);
    R[i] = f.matrixQR().topRows(k).template triangularView<Eigen::Upper>();
    if (want_q) Q[i] = f.householderQ() * detail::Matrix<T>::Identity(m, k);
    return 0;
  });
  return QRResult<T>{want_q ? Q.tensor : Tensor<T>(TensorImpl::allocate({0}, scalar_type_of<T>(), "linalg.qr")),
                     R.tensor};
}

}  // namespace kiln::linalg
