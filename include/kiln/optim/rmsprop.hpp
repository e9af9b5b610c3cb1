#pragma once
// torch.optim.RMSprop, PyTorch's update rule:
//   g = (maximize ? -grad : grad) + weight_decay * p;   v = alpha * v + (1 - alpha) * g^2
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
  KILN_OPTION(bool, maximize, false);
};

KILN_INSTANTIATE(class Optimizer<RMSpropOptions, float>);

template <Dtype T = float>
class RMSprop : public Optimizer<RMSpropOptions, T> {
 public:
  using Optimizer<RMSpropOptions, T>::Optimizer;

 protected:
  struct State {
    Tensor<T> v, a, b;  // square average, gradient average (centered), momentum buffer
  };

  void update(Tensor<T>& p, const Tensor<T>& grad, const RMSpropOptions& o) override;

 private:
  ParamState param_state(const Tensor<T>& p) const override {
    auto it = state_.find(p.impl_ptr().get());
    if (it == state_.end()) return {};
    const State& s = it->second;
    ParamState out{{"square_avg", s.v}};
    if (s.a.defined()) out.emplace("grad_avg", s.a);
    if (s.b.defined()) out.emplace("momentum_buffer", s.b);
    return out;
  }
  void set_param_state(const Tensor<T>& p, const ParamState& state) override {
    state_.erase(p.impl_ptr().get());
    if (state.empty()) return;
    State& s = state_[p.impl_ptr().get()];
    s.v = this->loaded_tensor(state, "square_avg", p);
    if (state.contains("grad_avg")) s.a = this->loaded_tensor(state, "grad_avg", p);
    if (state.contains("momentum_buffer")) s.b = this->loaded_tensor(state, "momentum_buffer", p);
  }
  std::vector<std::string> state_names(const RMSpropOptions& o) const override {
    std::vector<std::string> names{"square_avg"};
    if (o.centered()) names.push_back("grad_avg");
    if (o.momentum() > 0) names.push_back("momentum_buffer");
    return names;
  }

  std::unordered_map<const TensorImpl*, State> state_;
};

// Defined out of the class, so that a separately compiled program leaves it to its part (docs/design.md).
template <Dtype T>
void RMSprop<T>::update(Tensor<T>& p, const Tensor<T>& grad, const RMSpropOptions& o) {
  State& s = state_[p.impl_ptr().get()];
  if (!s.v.defined()) {
    s.v = Optimizer<RMSpropOptions, T>::zeros_like(p);
    if (o.centered()) s.a = Optimizer<RMSpropOptions, T>::zeros_like(p);
    if (o.momentum() > 0) s.b = Optimizer<RMSpropOptions, T>::zeros_like(p);
  }
  const double alpha = o.alpha(), lr = o.lr(), mu = o.momentum(), eps = o.eps();
  const auto g = detail::oriented_grad(grad, o.maximize()) + p * o.weight_decay();
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

KILN_INSTANTIATE(class RMSprop<float>);

template <Dtype T>
RMSprop(std::vector<Tensor<T>>, RMSpropOptions) -> RMSprop<T>;

}  // namespace kiln::optim
