#pragma once
// Tensor<T>'s autograd members.
#include "kiln/autograd/fused.hpp"

namespace kiln {

template <Dtype T>
Tensor<T>& Tensor<T>::requires_grad_(bool requires_grad) {
  check<std::logic_error>(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad; use detach()");
  if (requires_grad) {
    check(is_floating_v<T>, "requires_grad_: only floating-point tensors can require grad, not ",
          dtype_name(scalar_type_of<T>()));
    check<std::logic_error>(!is_inference() || InferenceMode::is_enabled(),
                            "requires_grad_: an inference tensor (made under InferenceMode) cannot require grad "
                            "outside InferenceMode; clone() it first");
  }
  autograd::meta_of(checked()).requires_grad = requires_grad;
  return *this;
}

template <Dtype T>
bool Tensor<T>::requires_grad() const {
  return autograd::requires_grad(*checked());
}

template <Dtype T>
Tensor<T> Tensor<T>::grad() const {
  const auto& meta = checked()->autograd;
  return meta && meta->grad ? Tensor<T>(meta->grad) : Tensor<T>();
}

template <Dtype T>
void Tensor<T>::zero_grad(bool set_to_none) {
  auto& meta = checked()->autograd;
  if (!meta || !meta->grad) return;
  if (set_to_none) meta->grad.reset();
  else Tensor<T>(meta->grad).zero_();
}

template <Dtype T>
bool Tensor<T>::is_leaf() const {
  const auto& meta = checked()->autograd;
  return !meta || !meta->grad_fn;
}

template <Dtype T>
std::shared_ptr<autograd::Node> Tensor<T>::grad_fn() const {
  const auto& meta = checked()->autograd;
  return meta ? meta->grad_fn : nullptr;
}

template <Dtype T>
Tensor<T> Tensor<T>::detach() const {
  return Tensor(checked()->view_as(shape(), strides(), storage_offset()));  // a new impl: no autograd meta
}

template <Dtype T>
void Tensor<T>::backward(const Tensor<T>& gradient, bool retain_graph) const {
  check<std::logic_error>(requires_grad(), "backward: the tensor does not require grad and has no grad_fn");
  autograd::ImplPtr g;
  if (gradient.defined()) {
    check<ShapeError>(gradient.shape() == shape(), "backward: gradient of shape ", gradient.shape(),
                      " for a tensor of shape ", shape());
    g = gradient.impl_ptr();
  } else {
    check<std::logic_error>(numel() == 1, "backward: grad can be implicitly created only for scalar outputs; ",
                            "this tensor has shape ", shape());
    g = TensorImpl::allocate(shape(), scalar_type_of<T>(), "backward", device());
    Tensor<T>(g).fill_(1);
  }
  autograd::BackwardOptions options;
  options.retain_graph = retain_graph;
  autograd::run_backward({autograd::gradient_edge(checked())}, {g}, options);
}

template <Dtype T>
template <class F>
void Tensor<T>::register_hook(F fn) const {
  check<std::logic_error>(requires_grad(), "register_hook: the tensor does not require grad");
  auto hook = [fn](const autograd::ImplPtr& g) -> autograd::ImplPtr {
    if constexpr (std::is_void_v<std::invoke_result_t<F, Tensor<T>>>) {
      fn(Tensor<T>(g));
      return nullptr;
    } else {
      const Tensor<T> r = fn(Tensor<T>(g));
      return r.defined() ? r.impl_ptr() : nullptr;
    }
  };
  autograd::AutogradMeta& meta = autograd::meta_of(checked());
  if (is_leaf()) meta.hooks.push_back(std::move(hook));
  else meta.grad_fn->pre_hooks.push_back({meta.output_nr, std::move(hook)});
}

namespace autograd {

// The gradients of the outputs with respect to the inputs, as torch::autograd::grad: .grad of no
// tensor is touched. grad_outputs defaults to ones for scalar outputs. An input the outputs do not
// depend on throws unless allow_unused (its gradient is then undefined). Gradients are computed
// without recording (create_graph, for higher derivatives, is not supported).
template <Dtype T>
std::vector<Tensor<T>> grad(const std::vector<Tensor<T>>& outputs, const std::vector<Tensor<T>>& inputs,
                            const std::vector<Tensor<T>>& grad_outputs = {}, bool retain_graph = false,
                            bool allow_unused = false) {
  check(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "autograd::grad: ", grad_outputs.size(),
        " grad_outputs for ", outputs.size(), " outputs");
  std::vector<Edge> roots;
  GradList root_grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor<T>& out = outputs[i];
    check<std::logic_error>(out.requires_grad(), "autograd::grad: output ", i, " does not require grad");
    if (!grad_outputs.empty() && grad_outputs[i].defined()) {
      check<ShapeError>(grad_outputs[i].shape() == out.shape(), "autograd::grad: grad_output ", i, " has shape ",
                        grad_outputs[i].shape(), ", its output ", out.shape());
      root_grads.push_back(grad_outputs[i].impl_ptr());
    } else {
      check<std::logic_error>(out.numel() == 1, "autograd::grad: grad can be implicitly created only for scalar ",
                              "outputs; output ", i, " has shape ", out.shape());
      Tensor<T> one(TensorImpl::allocate(out.shape(), scalar_type_of<T>(), "autograd::grad", out.device()));
      one.fill_(1);
      root_grads.push_back(one.impl_ptr());
    }
    roots.push_back(gradient_edge(out.impl_ptr()));
  }
  std::vector<Edge> capture;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check<std::logic_error>(inputs[i].requires_grad(), "autograd::grad: input ", i, " does not require grad");
    capture.push_back(gradient_edge(inputs[i].impl_ptr()));
  }
  GradList captured(inputs.size());
  BackwardOptions options;
  options.retain_graph = retain_graph;
  options.capture = &capture;
  options.captured = &captured;
  run_backward(roots, std::move(root_grads), options);
  std::vector<Tensor<T>> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check<std::logic_error>(captured[i] || allow_unused, "autograd::grad: input ", i,
                            " was not used to compute the outputs; pass allow_unused=true");
    result.push_back(captured[i] ? Tensor<T>(captured[i]) : Tensor<T>());
  }
  return result;
}

}  // namespace autograd

}  // namespace kiln
