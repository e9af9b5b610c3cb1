#pragma once
// torch.nn.utils.clip_grad_norm_ and clip_grad_value_, on the parameters' .grad in place.
#include <cmath>
#include <limits>
#include <vector>

#include "kiln/tensor/reduce.hpp"

namespace kiln::optim {

// Scales every gradient by max_norm / (total_norm + 1e-6) when that is below 1, where total_norm is
// the norm_type-norm of all gradients together (inf: the largest magnitude). Returns total_norm.
template <Dtype T>
double clip_grad_norm_(const std::vector<Tensor<T>>& params, double max_norm, double norm_type = 2) {
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type);
  // Summed where the gradients are, as a 0-d double tensor: one copy to the host (not one per parameter on a GPU).
  Tensor<double> sum;
  for (const Tensor<T>& p : params) {
    const Tensor<T> g = p.grad();
    if (!g.defined()) continue;
    const Tensor<double> n = kiln::detail::untracked_norm(g, norm_type).template to<double>();
    if (!sum.defined()) sum = inf ? n : Tensor<double>(pow(n, norm_type));
    else sum = inf ? Tensor<double>(maximum(sum, n)) : Tensor<double>(sum + pow(n, norm_type));
  }
  double total = sum.defined() ? sum.item() : 0.0;
  if (!inf) total = std::pow(total, 1 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    for (const Tensor<T>& p : params) {
      Tensor<T> g = p.grad();
      if (g.defined()) g *= coef;
    }
  }
  return total;
}

// Clamps every gradient element to [-clip_value, clip_value].
template <Dtype T>
void clip_grad_value_(const std::vector<Tensor<T>>& params, double clip_value) {
  NoGradGuard no_grad;
  for (const Tensor<T>& p : params) {
    Tensor<T> g = p.grad();
    if (g.defined()) g.copy_(clamp(g, -clip_value, clip_value));
  }
}

KILN_INSTANTIATE(double clip_grad_norm_<float>(const std::vector<Tensor<float>>&, double, double));
KILN_INSTANTIATE(void clip_grad_value_<float>(const std::vector<Tensor<float>>&, double));

}  // namespace kiln::optim
