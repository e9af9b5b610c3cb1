#pragma once
// torch.optim.SGD: momentum, dampening, Nesterov, L2 weight decay, maximize.
//   g = (maximize ? -grad : grad) + weight_decay * p
//   b = g on the first step, else momentum * b + (1 - dampening) * g
//   p -= lr * (nesterov ? g + momentum * b : b)          (p -= lr * g without momentum)
#include "kiln/optim/optimizer.hpp"

namespace kiln::optim {

class SGDOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  KILN_OPTION(double, lr, 0.0);
  KILN_OPTION(double, momentum, 0.0);
  KILN_OPTION(double, dampening, 0.0);
  KILN_OPTION(double, weight_decay, 0.0);
  KILN_OPTION(bool, nesterov, false);
  KILN_OPTION(bool, maximize, false);  // ascend: the gradient negated first, as PyTorch
};

KILN_INSTANTIATE(class Optimizer<SGDOptions, float>);

template <Dtype T = float>
class SGD : public Optimizer<SGDOptions, T> {
 public:
  using Optimizer<SGDOptions, T>::Optimizer;

 protected:
  void update(Tensor<T>& p, const Tensor<T>& grad, const SGDOptions& o) override;

 private:
  ParamState param_state(const Tensor<T>& p) const override {
    auto it = momentum_.find(p.impl_ptr().get());
    if (it == momentum_.end()) return {};
    return {{"momentum_buffer", it->second}};
  }
  void set_param_state(const Tensor<T>& p, const ParamState& state) override {
    momentum_.erase(p.impl_ptr().get());
    if (!state.empty()) momentum_.emplace(p.impl_ptr().get(), this->loaded_tensor(state, "momentum_buffer", p));
  }
  std::vector<std::string> state_names(const SGDOptions& o) const override {
    if (o.momentum() == 0) return {};
    return {"momentum_buffer"};
  }

  std::unordered_map<const TensorImpl*, Tensor<T>> momentum_;
};

// Defined out of the class, so that a separately compiled program leaves it to its part (docs/design.md).
template <Dtype T>
void SGD<T>::update(Tensor<T>& p, const Tensor<T>& grad, const SGDOptions& o) {
  check<std::invalid_argument>(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0),
                               "SGD: Nesterov momentum requires a momentum and zero dampening");
  const double lr = o.lr(), wd = o.weight_decay(), mu = o.momentum();
  const auto g = detail::oriented_grad(grad, o.maximize()) + p * wd;
  if (mu == 0) {
    eval_all({&p}, p - g * lr);
    return;
  }
  auto it = momentum_.find(p.impl_ptr().get());
  if (it == momentum_.end()) {  // the first step: the buffer is the gradient itself
    Tensor<T> b = Optimizer<SGDOptions, T>::zeros_like(p);
    if (o.nesterov()) eval_all({&b, &p}, g, p - (g + g * mu) * lr);
    else eval_all({&b, &p}, g, p - g * lr);
    momentum_.emplace(p.impl_ptr().get(), b);
    return;
  }
  Tensor<T>& b = it->second;
  const auto next = b * mu + g * (1 - o.dampening());
  if (o.nesterov()) eval_all({&b, &p}, next, p - (g + next * mu) * lr);
  else eval_all({&b, &p}, next, p - next * lr);
}

KILN_INSTANTIATE(class SGD<float>);

template <Dtype T>
SGD(std::vector<Tensor<T>>, SGDOptions) -> SGD<T>;

}  // namespace kiln::optim
