#pragma once
// torch.linalg.lstsq: least-squares (m >= n) or minimum-norm (m < n, or rank-deficient) solutions of
// A X = B, batched over broadcast leading dims (no gradient in kiln).
//
//   auto r = linalg::lstsq(A, B);  // A [*, m, n], B [*, m, k] or [*, m]: r.solution [*, n, k] (or [*, n])
//
// driver, as torch's CPU drivers: "gelsy" (the default; complete orthogonal decomposition, i.e. QR with
// column pivoting, rank-revealing), "gelsd" and "gelss" (SVD), "gels" (assumes full rank). rcond: singular
// values (pivots of R for gelsy) below rcond times the largest count as zero; by default eps(T) * max(m, n).
// What each driver fills in, as torch: rank for all but gels; singular_values for gelsd and gelss;
// residuals (the squared residual of each column, [*, k] or [*]) when m > n, the driver is not gelsy and
// every matrix has full rank. The others are empty tensors.
#include <limits>
#include <optional>
#include <string_view>

#include "kiln/linalg/common.hpp"


namespace kiln::linalg {

template <Dtype T>
struct LstsqResult {
  Tensor<T> solution;
  Tensor<T> residuals;
  Tensor<int64_t> rank;
  Tensor<T> singular_values;
  LstsqResult to(Device device) const {
    return {solution.to(device), residuals.to(device), rank.to(device), singular_values.to(device)};
  }
};

template <Operand XA, Operand XB>
LstsqResult<typename XA::value_type> lstsq(const XA& a_in, const XB& b_in, std::optional<double> rcond = std::nullopt,
           std::string_view driver = "gelsy") {
  using T = typename XA::value_type;
  static_assert(std::is_same_v<T, typename XB::value_type>,
                "kiln: operands of linalg::lstsq have different dtypes; convert one with .to<T>()");
  detail::require_float<T>();
  const char* op = "linalg.lstsq";
  const Tensor<T> a0 = detail::as_tensor(a_in), b0 = detail::as_tensor(b_in);
  if (detail::on_cuda(op, a0, b0)) return lstsq(a0.cpu(), b0.cpu(), rcond, driver).to(a0.device());
  detail::require_matrix(op, "A", a0.shape());
  check(driver == "gelsy" || driver == "gelsd" || driver == "gelss" || driver == "gels", op,
        ": driver must be \"gelsy\", \"gelsd\", \"gelss\" or \"gels\", got \"", driver, "\"");
  detail::refuse_grad(op, a0);
  detail::refuse_grad(op, b0);
  const bool vector = detail::is_vector_rhs(a0.shape(), b0.shape());
  const Tensor<T> b1 = vector ? b0.unsqueeze(-1) : b0;
  check<ShapeError>(b1.dim() >= 2 && b1.size(-2) == a0.size(-2), op, ": incompatible shapes of A ", a0.shape(),
                    " and B ", b0.shape(), " (A has ", a0.size(-2), " rows, B needs as many)");
  const auto [ae, be] = detail::broadcast_batch(a0, b1, op);
  const detail::Stack<T> A(ae), B(be);
  const int64_t m = A.rows, n = A.cols, k = B.cols, mn = std::min(m, n);
  const double threshold = rcond ? *rcond : std::numeric_limits<T>::epsilon() * double(std::max(m, n));
  const bool by_svd = driver == "gelsd" || driver == "gelss";
  const Shape batch = detail::batch_shape(ae.shape());
  auto shaped = [&](std::initializer_list<int64_t> tail) {
    Shape s = batch;
    for (int64_t d : tail) s.push_back(d);
    return s;
  };
  const detail::Stack<T> X(shaped({n, k}), op);
  Tensor<int64_t> rank(TensorImpl::allocate(shaped({}), ScalarType::Int64, op));
  Tensor<T> sv(TensorImpl::allocate(by_svd ? shaped({mn}) : Shape{0}, scalar_type_of<T>(), op));
  using Col = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  detail::for_each_matrix(A.count, 2 * m * n * std::max<int64_t>(mn, 1), [&](int64_t i) -> int64_t {
    if (by_svd) {
      Eigen::BDCSVD<Col> f(Col(A[i]), Eigen::ComputeThinU | Eigen::ComputeThinV);
      f.setThreshold(T(threshold));
      X[i] = f.solve(B[i]);
      rank.data_ptr()[i] = f.rank();
      Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(sv.data_ptr() + i * mn, mn) = f.singularValues();
    } else {
      Eigen::CompleteOrthogonalDecomposition<detail::Matrix<T>> f;
      f.setThreshold(T(threshold));
      f.compute(A[i]);
      X[i] = f.solve(B[i]);
      rank.data_ptr()[i] = f.rank();
    }
    return 0;
  });
  bool full_rank = true;
  for (int64_t i = 0; i < A.count; ++i) full_rank = full_rank && rank.data_ptr()[i] == n;
  Tensor<T> residuals(TensorImpl::allocate({0}, scalar_type_of<T>(), op));
  if (m > n && driver != "gelsy" && (driver == "gels" || full_rank)) {
    residuals = Tensor<T>(TensorImpl::allocate(shaped({k}), scalar_type_of<T>(), op));
    T* r = residuals.data_ptr();
    detail::for_each_matrix(A.count, 2 * m * n * k, [&](int64_t i) -> int64_t {
      Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(r + i * k, k) =
          (A[i] * X[i] - B[i]).colwise().squaredNorm();
      return 0;
    });
    if (vector) residuals = residuals.squeeze(-1);
  }
  if (driver == "gels") rank = Tensor<int64_t>(TensorImpl::allocate({0}, ScalarType::Int64, op));
  return LstsqResult<T>{vector ? X.tensor.squeeze(-1) : X.tensor, residuals, rank, sv};
}

}  // namespace kiln::linalg
