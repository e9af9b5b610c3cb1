#pragma once
// torch.linalg.eigh and eigvalsh: eigenvalues (ascending) and orthonormal eigenvectors of symmetric
// matrices, batched over leading dims, with their gradient.
//
//   auto [L, V] = linalg::eigh(A);      // A [*, n, n]: L [*, n] ascending, V [*, n, n], A = V diag(L) V^T
//   auto L = linalg::eigvalsh(A, "U");  // reads A's upper triangle ("L", the default: the lower one)
//
// Each eigenvector's sign is arbitrary, as in torch. A failure to converge throws LinAlgError.
// Gradient (torch's linalg_eig_backward for Hermitian input): with S = (V^T gV - gV^T V) / 2 and
// E_ij = w_j - w_i, gA = V (S / E off the diagonal, gw on it) V^T, symmetric. A loss that depends on an
// eigenvector's sign, or eigenvalues that coincide, have no well-defined gradient (inf or NaN), as in torch.
#include <optional>
#include <string_view>

#include "kiln/linalg/common.hpp"


namespace kiln::linalg {

template <Dtype T>
struct EighResult {
  Tensor<T> eigenvalues;
  Tensor<T> eigenvectors;
  EighResult to(Device device) const { return {eigenvalues.to(device), eigenvectors.to(device)}; }
};

namespace detail {

template <class T>
struct EighBackward : autograd::Node {
  EighBackward(const Tensor<T>& a, const Tensor<T>& values, const Tensor<T>& vectors)
      : values_(values.impl_ptr()), vectors_(vectors.impl_ptr()) {
    next_edges.push_back(autograd::gradient_edge(a.impl_ptr()));
  }
  std::string name() const override { return "LinalgEighBackward"; }
  int num_outputs() const override { return 2; }
  void release_saved() override { values_ = vectors_ = {}; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    const ImplPtr g_values = grads.size() > 0 ? grads[0] : nullptr, g_vectors = grads.size() > 1 ? grads[1] : nullptr;
    if (!g_values && !g_vectors) return {nullptr};
    const Stack<T> V(Tensor<T>(vectors_.unpack(*this)));
    const Tensor<T> w = Tensor<T>(values_.unpack(*this)).contiguous();
    const Tensor<T> gw = g_values ? Tensor<T>(g_values).contiguous() : Tensor<T>();
    const std::optional<Stack<T>> gV = g_vectors ? std::optional<Stack<T>>(Stack<T>(Tensor<T>(g_vectors))) : std::nullopt;
    const Stack<T> gA(V.tensor.shape(), "linalg.eigh backward");
    const int64_t n = V.rows;
    for_each_matrix(V.count, 3 * cubic_cost(n), [&](int64_t b) -> int64_t {
      const T* wb = w.data_ptr() + b * n;
      Matrix<T> inner = Matrix<T>::Zero(n, n);
      if (gV) {
        const Matrix<T> vg = V[b].transpose() * (*gV)[b];
        inner = T(0.5) * (vg - vg.transpose());
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) inner(i, j) = i == j ? T(0) : inner(i, j) / (wb[j] - wb[i]);
      }
      if (gw.defined())
        for (int64_t i = 0; i < n; ++i) inner(i, i) = gw.data_ptr()[b * n + i];
      gA[b].noalias() = V[b] * inner * V[b].transpose();
      return 0;
    });
    return {gA.tensor.impl_ptr()};
  }

 private:
  autograd::SavedTensor values_, vectors_;
};

template <class T>
EighResult<T> eigh_impl(const Tensor<T>& a, std::string_view uplo, bool vectors, const char* op) {
  require_float<T>();
  if (on_cuda(op, a)) return eigh_impl(a.cpu(), uplo, vectors, op).to(a.device());
  require_square(op, "A", a.shape());
  check(uplo == "L" || uplo == "U", op, ": UPLO must be \"L\" or \"U\", got \"", uplo, "\"");
  const bool grad = needs_grad(a);
  vectors = vectors || grad;  // the gradient needs them
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
  if (grad) {
    const auto node = std::make_shared<EighBackward<T>>(a, values, V.tensor);
    record(values, node);
    autograd::AutogradMeta& meta = autograd::meta_of(V.tensor.impl_ptr());
    meta.grad_fn = node;
    meta.output_nr = 1;
  }
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
