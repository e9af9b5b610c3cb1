#pragma once
// torch.linalg.solve and torch.linalg.inv, batched over leading dims, with their gradients.
//
//   X = linalg::solve(A, B);  // A [*, n, n], B [*, n, k] or [*, n] (a vector: B.dim() == 1, or B's shape
//                             // is A's without the last dim); batch dims broadcast; A X = B
//   X = linalg::solve(A, B, /*left=*/false);  // X A = B, B [*, k, n]; a vector B is refused, as PyTorch
//                                             // (one row: B [*, 1, n])
//   Y = linalg::inv(A);       // A [*, n, n]
//
// A singular matrix (an exactly zero pivot of its LU factorization) throws LinAlgError naming the batch
// element. Gradients (Giles, "An extended collection of matrix derivative results", 2008):
//   solve: gB = A^-T G, gA = -gB X^T;   inv: gA = -Y^T G Y^T.
#include "kiln/linalg/lu.hpp"

namespace kiln::linalg {

namespace detail {

template <class T>
struct SolveBackward : autograd::Node {
  SolveBackward(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& x) : a_(a.impl_ptr()), x_(x.impl_ptr()) {
    next_edges.push_back(autograd::gradient_edge(a.impl_ptr()));
    next_edges.push_back(autograd::gradient_edge(b.impl_ptr()));
  }
  std::string name() const override { return "LinalgSolveBackward"; }
  void release_saved() override { a_ = x_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr, nullptr};
    const Stack<T> A(Tensor<T>(a_.unpack(*this))), X(Tensor<T>(x_.unpack(*this))), G{Tensor<T>(grads[0])};
    const Stack<T> gA(A.tensor.shape(), "linalg.solve backward"), gB(X.tensor.shape(), "linalg.solve backward");
    const bool want_a = next_edges[0].valid();
    for_each_matrix(A.count, cubic_cost(A.rows) + 2 * A.rows * X.cols * A.rows, [&](int64_t i) -> int64_t {
      const LU<T> lu(A[i]);
      gB[i] = lu.transpose().solve(G[i]);
      if (want_a) gA[i].noalias() = -gB[i] * X[i].transpose();
      return 0;
    });
    return {want_a ? gA.tensor.impl_ptr() : nullptr, next_edges[1].valid() ? gB.tensor.impl_ptr() : nullptr};
  }

 private:
  autograd::SavedTensor a_, x_;
};

template <class T>
struct InvBackward : autograd::Node {
  InvBackward(const Tensor<T>& a, const Tensor<T>& y) : y_(y.impl_ptr()) {
    next_edges.push_back(autograd::gradient_edge(a.impl_ptr()));
  }
  std::string name() const override { return "LinalgInvBackward"; }
  void release_saved() override { y_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    const Stack<T> Y(Tensor<T>(y_.unpack(*this))), G{Tensor<T>(grads[0])};
    const Stack<T> gA(Y.tensor.shape(), "linalg.inv backward");
    for_each_matrix(Y.count, 2 * cubic_cost(Y.rows), [&](int64_t i) -> int64_t {
      gA[i].noalias() = -(Y[i].transpose() * G[i] * Y[i].transpose());
      return 0;
    });
    return {gA.tensor.impl_ptr()};
  }

 private:
  autograd::SavedTensor y_;
};

// X = A^-1 B for matrices of one batch shape.
template <class T>
Tensor<T> solve_matrices(const Tensor<T>& a, const Tensor<T>& b, const Shape& a_shape) {
  const Stack<T> A(a), B(b), X(b.shape(), "linalg.solve");
  const Failure failed = for_each_matrix(A.count, cubic_cost(A.rows) + 2 * A.rows * A.rows * B.cols, [&](int64_t i) {
    const LU<T> lu(A[i]);
    if (const int64_t k = zero_pivot<T>(lu)) return k;
    X[i] = lu.solve(B[i]);
    return int64_t(0);
  });
  if (failed)
    throw LinAlgError(cat("linalg.solve: ", batch_prefix(a_shape, failed.index),
                          "the solver failed because the input matrix is singular (the diagonal element ", failed.code,
                          " of its LU factorization is zero)"));
  if (needs_grad(a, b)) record(X.tensor, std::make_shared<SolveBackward<T>>(a, b, X.tensor));
  return X.tensor;
}

}  // namespace detail

// Solves A X = B, or X A = B with left = false (torch.linalg.solve).
template <Operand XA, Operand XB>
Tensor<typename XA::value_type> solve(const XA& a_in, const XB& b_in, bool left = true) {
  using T = typename XA::value_type;
  static_assert(std::is_same_v<T, typename XB::value_type>,
                "kiln: operands of linalg::solve have different dtypes; convert one with .to<T>()");
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(a_in), b = detail::as_tensor(b_in);
  if (detail::on_cuda("linalg.solve", a, b)) return solve(a.cpu(), b.cpu(), left).to(a.device());
  detail::require_square("linalg.solve", "A", a.shape());
  const bool vector = detail::is_vector_rhs(a.shape(), b.shape());
  // X A = B is A^T X^T = B^T: views, so gradients flow through the transposes. PyTorch refuses a vector B there.
  if (!left) {
    check<ShapeError>(!vector, "linalg.solve: B of shape ", b.shape(), " is a vector (1-d, or A's shape ", a.shape(),
                      " without the last dim), which left = false does not take (as PyTorch); for rows x A = b pass "
                      "B.unsqueeze(-2)");
    return solve(a.transpose(-1, -2), b.transpose(-1, -2)).transpose(-1, -2);
  }
  const Tensor<T> b2 = vector ? b.unsqueeze(-1) : b;
  check<ShapeError>(b2.dim() >= 2 && b2.size(-2) == a.size(-1), "linalg.solve: incompatible shapes of A ", a.shape(),
                    " and B ", b.shape(), " (A is ", a.size(-1), " x ", a.size(-1), ", B needs ", a.size(-1),
                    " rows)");
  const auto [ae, be] = detail::broadcast_batch(a, b2, "linalg.solve");
  const Tensor<T> x = detail::solve_matrices(ae, be, ae.shape());
  return vector ? x.squeeze(-1) : x;
}

// The inverse of each square matrix (torch.linalg.inv).
template <Operand X>
Tensor<typename X::value_type> inv(const X& x) {
  using T = typename X::value_type;
  detail::require_float<T>();
  const Tensor<T> a = detail::as_tensor(x);
  if (detail::on_cuda("linalg.inv", a)) return inv(a.cpu()).to(a.device());
  detail::require_square("linalg.inv", "A", a.shape());
  const detail::Stack<T> A(a), Y(a.shape(), "linalg.inv");
  const detail::Failure failed = detail::for_each_matrix(A.count, 2 * detail::cubic_cost(A.rows), [&](int64_t i) {
    const detail::LU<T> lu(A[i]);
    if (const int64_t k = detail::zero_pivot<T>(lu)) return k;
    Y[i] = lu.inverse();
    return int64_t(0);
  });
  if (failed)
    throw LinAlgError(detail::cat("linalg.inv: ", detail::batch_prefix(a.shape(), failed.index),
                                  "the diagonal element ", failed.code,
                                  " is zero, the inversion could not be completed because the input matrix is singular"));
  if (detail::needs_grad(a)) detail::record(Y.tensor, std::make_shared<detail::InvBackward<T>>(a, Y.tensor));
  return Y.tensor;
}

}  // namespace kiln::linalg
