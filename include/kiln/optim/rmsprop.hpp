#pragma once
// torch.optim.RMSprop, PyTorch's update rule:
//   g = grad + weight_decay * p;   v = alpha * v + (1 - alpha) * g^2
//   centered: a = alpha * a + (1 - alpha) * g, avg = sqrt(v - a^2) + eps;   else avg = sqrt(v) + eps
//   momentum: b = momentum * b + g / avg, p -= lr * b;   else p -= lr * g / avg
// All of a parameter's state and the parameter are updated in one fused pass.
#include "kiln/optim/optimizer.hpp"

namespace kiln::optim {

class RMSpropOptions {
 public:
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  KILN_OPTION(double, lr, 1e-2);
  KILN_OPTION(double, alpha, 0.99);
  KILN_OPTION(double, eps, 1e-8);
  KILN_OPTION(double, weight_decay, 0.0);
  KILN_OPTION(double, momentum, 0.0);
  KILN_OPTION(bool, centered, false);
};

template <Dtype T = float>
class RMSprop : public Optimizer<RMSpropOptions, T> {
 public:
  using Optimizer<RMSpropOptions, T>::Optimizer;

 protected:
  struct State {
    bool started = false;
    Tensor<T> v, a, b;  // square average, gradient average (centered), momentum buffer
  };

  void update(Tensor<T>& p, const Tensor<T>& grad, const RMSpropOptions& o) override {
    State& s = state_[p.impl_ptr().get()];
    if (!s.started) {
      s.started = true;
      s.v = Optimizer<RMSpropOptions, T>::zeros_like(p);
      if (o.centered()) s.a = Optimizer<RMSpropOptions, T>::zeros_like(p);
      if (o.momentum() > 0) s.b = Optimizer<RMSpropOptions, T>::zeros_like(p);
    }
    const double alpha = o.alpha(), lr = o.lr(), mu = o.momentum(), eps = o.eps();
    const auto g = grad + p * o.weight_decay();
    const auto v = s.v * alpha + g * g * (1 - alpha);
    if (o.centered()) {
      const auto a = s.a * alpha + g * (1 - alpha);
      const auto avg = sqrt(v - a * a) + eps;
      if (mu > 0) {
        const auto b = s.b * mu + g / avg;
        eval_all({&s.v, &s.a, &s.b, &p}, v, a, b, p - b * lr);
      } else {
        eval_all({&s.v, &s.a, &p}, v, a, p - g / avg * lr);
      }
    } else {
      const auto avg = sqrt(v) + eps;
      if (mu > 0) {
        const auto b = s.b * mu + g / avg;
        eval_all({&s.v, &s.b, &p}, v, b, p - b * lr);
      } else {
        eval_all({&s.v, &p}, v, p - g / avg * lr);
      }
    }
  }

 private:
  std::unordered_map<const TensorImpl*, State> state_;
};

template <Dtype T>
RMSprop(std::vector<Tensor<T>>, RMSpropOptions) -> RMSprop<T>;

}  // namespace kiln::optim
