#pragma once
// Norm-based comparisons of vectors, as torch.nn.functional's normalize, cosine_similarity and pairwise_distance,
// composed of norm and elementwise expressions (their gradients are those ops' backward).
#include "kiln/tensor/reduce.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::nn::functional {

// x / max(||x||_p, eps) along dim (torch.nn.functional.normalize).
template <Dtype T>
Tensor<T> normalize(const Tensor<T>& x, double p = 2, int64_t dim = 1, double eps = 1e-12) {
  return x / clamp_min(norm(x, p, dim, true), eps);
}

// The cosine of the angle between x1 and x2 along dim (broadcast against each other first): the sum over dim of
// (x1 / max(||x1||, eps)) * (x2 / max(||x2||, eps)), each vector divided by its norm first as PyTorch's (results
// stay in [-1, 1]). Where a norm is below eps the gradient is that of the clamp (0 through the norm), where
// PyTorch's passes through the unclamped norm.
template <Dtype T>
Tensor<T> cosine_similarity(const Tensor<T>& x1, const Tensor<T>& x2, int64_t dim = 1, double eps = 1e-8) {
  // (broadcast first, as PyTorch's: a vector's norm is taken over the broadcast dim)
  const Shape shape = broadcast_shapes(x1.shape(), x2.shape(), "cosine_similarity");
  const Tensor<T> a = x1.expand(shape), b = x2.expand(shape);
  return sum(normalize(a, 2, dim, eps) * normalize(b, 2, dim, eps), {dim});
}

// ||x1 - x2 + eps||_p over the last dim (torch.nn.functional.pairwise_distance).
template <Dtype T>
Tensor<T> pairwise_distance(const Tensor<T>& x1, const Tensor<T>& x2, double p = 2, double eps = 1e-6,
                            bool keepdim = false) {
  const int64_t last = std::max(x1.dim(), x2.dim()) - 1;
  return norm(x1 - x2 + eps, p, last, keepdim);
}

}  // namespace kiln::nn::functional
