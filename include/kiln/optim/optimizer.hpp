#pragma once
// The optimizer base, as libtorch's torch::optim::Optimizer: parameter groups with their own options
// (lr and the rest), per-parameter state, zero_grad() and step(). Each optimizer's step updates a
// parameter and its state in one fused pass (kiln::eval_all), under a NoGradGuard.
#include <memory>
#include <unordered_map>
#include <vector>

#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/tensor.hpp"

// An option with a chainable setter and a getter, as libtorch's TORCH_ARG: Options(0.1).momentum(0.9).
#define KILN_OPTION(type, name, default_value)     \
 public:                                           \
  auto& name(type value) {                         \
    name##_ = value;                               \
    return *this;                                  \
  }                                                \
  type name() const { return name##_; }            \
                                                   \
 private:                                          \
  type name##_ = default_value

namespace kiln::optim {

template <class Options, Dtype T>
class Optimizer {
 public:
  struct ParamGroup {
    std::vector<Tensor<T>> params;
    Options options;
    double initial_lr = -1;  // set by the first LR scheduler bound to the optimizer
  };

  Optimizer(std::vector<Tensor<T>> params, Options defaults) : defaults_(defaults) {
    add_param_group({std::move(params), defaults});
  }
  Optimizer(std::vector<ParamGroup> groups, Options defaults) : defaults_(defaults) {
    for (ParamGroup& g : groups) add_param_group(std::move(g));
  }
  virtual ~Optimizer() = default;

  void add_param_group(ParamGroup group) {
    for (const Tensor<T>& p : group.params)
      check<std::invalid_argument>(p.defined() && p.is_leaf(), "optimizer: parameters must be defined leaf tensors");
    groups_.push_back(std::move(group));
  }
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const Options& defaults() const { return defaults_; }

  // Sets every parameter's gradient to undefined (set_to_none, PyTorch's default) or to zeros.
  void zero_grad(bool set_to_none = true) {
    for (ParamGroup& g : groups_)
      for (Tensor<T>& p : g.params) p.zero_grad(set_to_none);
  }

  // One update of every parameter that has a gradient.
  void step() {
    NoGradGuard no_grad;
    for (ParamGroup& g : groups_)
      for (Tensor<T>& p : g.params) {
        Tensor<T> grad = p.grad();
        if (!grad.defined()) continue;
        check<ShapeError>(grad.shape() == p.shape(), "optimizer: the gradient's shape ", grad.shape(),
                          " differs from the parameter's ", p.shape());
        update(p, grad, g.options);
      }
  }

 protected:
  virtual void update(Tensor<T>& param, const Tensor<T>& grad, const Options& options) = 0;

  // A zero-filled state tensor shaped like the parameter.
  static Tensor<T> zeros_like(const Tensor<T>& p) { return kiln::zeros<T>(p.shape()); }

  Options defaults_;
  std::vector<ParamGroup> groups_;
};

}  // namespace kiln::optim
