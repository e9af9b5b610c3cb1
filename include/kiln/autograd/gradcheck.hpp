#pragma once
// kiln::autograd::gradcheck: compares the Jacobian that backward computes with central finite
// differences in float64, as torch.autograd.gradcheck (defaults eps 1e-6, atol 1e-5, rtol 1e-3),
// and reports the first mismatching element.
#include <functional>
#include <string>
#include <vector>

#include "kiln/tensor/factory.hpp"

namespace kiln::autograd {

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, output element, both values
  explicit operator bool() const { return ok; }
};

// f maps the inputs (float64 tensors requiring grad) to one output tensor. Every element of every
// input is perturbed; every element of the output is backpropagated (so keep the tensors small).
inline GradcheckResult gradcheck(const std::function<Tensor<double>(const std::vector<Tensor<double>>&)>& f,
                                 std::vector<Tensor<double>> inputs, double eps = 1e-6, double atol = 1e-5,
                                 double rtol = 1e-3) {
  for (auto& x : inputs) {
    x = x.detach().contiguous().clone().detach();
    x.requires_grad_();
  }
  const Tensor<double> out = f(inputs);
  const int64_t n_out = out.numel();
  // Analytical: one backward per output element, gradient e_j.
  std::vector<std::vector<std::vector<double>>> analytic(inputs.size());  // [input][out elem][in elem]
  for (int64_t j = 0; j < n_out; ++j) {
    for (auto& x : inputs) x.zero_grad();
    Tensor<double> e = zeros<double>(out.shape());
    e.data_ptr()[j] = 1;
    if (out.requires_grad()) out.backward(e, /*retain_graph=*/true);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor<double> g = inputs[i].grad();
      analytic[i].push_back(g.defined() ? g.contiguous().to_vector() : std::vector<double>(inputs[i].numel(), 0.0));
    }
  }
  // Numerical: central differences, one input element at a time.
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    double* p = inputs[i].data_ptr();
    for (int64_t k = 0; k < inputs[i].numel(); ++k) {
      const double saved = p[k];
      p[k] = saved + eps;
      const std::vector<double> hi = f(inputs).contiguous().to_vector();
      p[k] = saved - eps;
      const std::vector<double> lo = f(inputs).contiguous().to_vector();
      p[k] = saved;
      for (int64_t j = 0; j < n_out; ++j) {
        const double numeric = (hi[j] - lo[j]) / (2 * eps);
        const double a = analytic[i][j][k];
        if (!(std::abs(a - numeric) <= atol + rtol * std::abs(numeric))) {
          return {false, kiln::detail::cat("gradcheck: Jacobian mismatch for input ", i, " element ", k,
                                           " and output element ", j, ": backward gives ", a,
                                           ", finite differences give ", numeric)};
        }
      }
    }
  }
  return {};
}

}  // namespace kiln::autograd
