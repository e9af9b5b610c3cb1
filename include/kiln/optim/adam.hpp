#pragma once
// torch.optim.Adam and AdamW (amsgrad and maximize options), PyTorch's update rules (maximize: grad
// negated first):
//   Adam:  g = grad + weight_decay * p                    AdamW: p *= 1 - lr * weight_decay; g = grad
//   m = b1 * m + (1 - b1) * g;   v = b2 * v + (1 - b2) * g^2;   (amsgrad: vmax = max(vmax, v), used for v)
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// m, v (vmax) and p are updated in one fused pass.
#include <cmath>

#include "kiln/optim/optimizer.hpp"

namespace kiln::optim {

class AdamOptions {
 public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& betas(double b1, double b2) {
    beta1_ = b1;
    beta2_ = b2;
    return *this;
  }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  KILN_OPTION(double, lr, 1e-3);
  KILN_OPTION(double, eps, 1e-8);
  KILN_OPTION(double, weight_decay, 0.0);
  KILN_OPTION(bool, amsgrad, false);
  KILN_OPTION(bool, maximize, false);

 private:
  double beta1_ = 0.9, beta2_ = 0.999;
};

// AdamW's options: the same fields, weight decay 1e-2 by default (decoupled); the setters return
// AdamOptions, which AdamW takes.
class AdamWOptions : public AdamOptions {
 public:
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay(1e-2); }
};

namespace detail {
template <Dtype T, class Options, bool kDecoupled>
class AdamBase : public Optimizer<Options, T> {
 public:
  using Optimizer<Options, T>::Optimizer;

 protected:
  struct State {
    int64_t step = 0;
    Tensor<T> m, v, vmax;
  };

  void update(Tensor<T>& p, const Tensor<T>& grad, const Options& o) override;

 private:
  ParamState param_state(const Tensor<T>& p) const override {
    auto it = state_.find(p.impl_ptr().get());
    if (it == state_.end() || it->second.step == 0) return {};
    const State& s = it->second;
    ParamState out{{"step", full<int64_t>({}, s.step)}, {"exp_avg", s.m}, {"exp_avg_sq", s.v}};
    if (s.vmax.defined()) out.emplace("max_exp_avg_sq", s.vmax);
    return out;
  }
  void set_param_state(const Tensor<T>& p, const ParamState& state) override {
    state_.erase(p.impl_ptr().get());
    if (state.empty()) return;
    State& s = state_[p.impl_ptr().get()];
    s.step = this->loaded_step(state);
    s.m = this->loaded_tensor(state, "exp_avg", p);
    s.v = this->loaded_tensor(state, "exp_avg_sq", p);
    if (state.contains("max_exp_avg_sq")) s.vmax = this->loaded_tensor(state, "max_exp_avg_sq", p);
  }
  std::vector<std::string> state_names(const Options& o) const override {
    if (o.amsgrad()) return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {"step", "exp_avg", "exp_avg_sq"};
  }

  std::unordered_map<const TensorImpl*, State> state_;
};

// Defined out of the class, so that a separately compiled program leaves it to its part (docs/design.md).
template <Dtype T, class Options, bool kDecoupled>
void AdamBase<T, Options, kDecoupled>::update(Tensor<T>& p, const Tensor<T>& grad, const Options& o) {
  State& s = state_[p.impl_ptr().get()];
  if (s.step == 0) {
    s.m = Optimizer<Options, T>::zeros_like(p);
    s.v = Optimizer<Options, T>::zeros_like(p);
    if (o.amsgrad()) s.vmax = Optimizer<Options, T>::zeros_like(p);
  }
  ++s.step;
  const double b1 = o.beta1(), b2 = o.beta2(), lr = o.lr(), wd = o.weight_decay();
  const double step_size = lr / (1 - std::pow(b1, double(s.step)));
  const double bc2_sqrt = std::sqrt(1 - std::pow(b2, double(s.step)));
  const double keep = kDecoupled ? 1 - lr * wd : 1.0;  // AdamW decays p first
  const double l2 = kDecoupled ? 0.0 : wd;             // Adam adds wd * p to the gradient
  const auto g = detail::oriented_grad(grad, o.maximize()) + p * l2;
  const auto m = s.m * b1 + g * (1 - b1);
  const auto v = s.v * b2 + g * g * (1 - b2);
  if (o.amsgrad()) {
    const auto vmax = maximum(s.vmax, v);
    eval_all({&s.m, &s.v, &s.vmax, &p}, m, v, vmax, p * keep - m / (sqrt(vmax) / bc2_sqrt + o.eps()) * step_size);
  } else {
    eval_all({&s.m, &s.v, &p}, m, v, p * keep - m / (sqrt(v) / bc2_sqrt + o.eps()) * step_size);
  }
}

}  // namespace detail

KILN_INSTANTIATE(class Optimizer<AdamOptions, float>);
KILN_INSTANTIATE(class detail::AdamBase<float, AdamOptions, false>);
KILN_INSTANTIATE(class detail::AdamBase<float, AdamOptions, true>);

template <Dtype T = float>
class Adam : public detail::AdamBase<T, AdamOptions, false> {
 public:
  using detail::AdamBase<T, AdamOptions, false>::AdamBase;
};
template <Dtype T = float>
class AdamW : public detail::AdamBase<T, AdamOptions, true> {
 public:
  using detail::AdamBase<T, AdamOptions, true>::AdamBase;
};

template <Dtype T>
Adam(std::vector<Tensor<T>>, AdamOptions) -> Adam<T>;
template <Dtype T>
AdamW(std::vector<Tensor<T>>, AdamOptions) -> AdamW<T>;

}  // namespace kiln::optim
