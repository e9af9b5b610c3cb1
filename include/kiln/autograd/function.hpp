#pragma once
// Custom autograd Functions, as torch::autograd::Function: a user's forward and backward that
// record like built-in nodes.
//
//   struct ScaledSquare : kiln::autograd::Function<ScaledSquare> {
//     static kiln::Tensor<float> forward(kiln::autograd::AutogradContext* ctx, kiln::Tensor<float> x, double k) {
//       ctx->save_for_backward({x});
//       ctx->saved_data["k"] = k;
//       return x * x * float(k);
//     }
//     static std::vector<kiln::Tensor<float>> backward(kiln::autograd::AutogradContext* ctx,
//                                                      std::vector<kiln::Tensor<float>> grad_outputs) {
//       auto x = ctx->get_saved_variables()[0];
//       double k = std::any_cast<double>(ctx->saved_data["k"]);
//       return {grad_outputs[0] * x * float(2 * k), {}};  // one gradient per forward argument
//     }
//   };
//   kiln::Tensor<float> y = ScaledSquare::apply(x, 3.0);
//
// forward runs without recording and returns one Tensor<T> or a std::vector of them; backward
// gets one gradient per output (zeros where none arrived, as PyTorch's materialize_grads) and
// returns one per forward argument (undefined for non-tensors and for tensors that need none).
// Tensor arguments and outputs share one dtype T.
#include <algorithm>
#include <any>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kiln/tensor/tensor.hpp"

namespace kiln::autograd {

class AutogradContext {
 public:
  std::unordered_map<std::string, std::any> saved_data;

  template <Dtype T>
  void save_for_backward(const std::vector<Tensor<T>>& tensors) {
    saved_.clear();
    for (const Tensor<T>& t : tensors) saved_.emplace_back(t.impl_ptr());
  }
  // The saved tensors (checked against in-place changes since they were saved).
  template <Dtype T = float>
  std::vector<Tensor<T>> get_saved_variables() const {
    std::vector<Tensor<T>> out;
    for (const SavedTensor& s : saved_) out.emplace_back(s.unpack(*owner_));
    return out;
  }
  void mark_non_differentiable(size_t output) { non_differentiable_.push_back(output); }

 private:
  template <class F, Dtype T>
  friend struct CppNode;
  template <class F>
  friend struct Function;
  std::vector<SavedTensor> saved_;
  std::vector<size_t> non_differentiable_;
  const Node* owner_ = nullptr;
};

// The node of one call of F::apply: calls F::backward with the gradients of F's outputs.
template <class F, Dtype T>
struct CppNode : Node {
  AutogradContext ctx;
  std::vector<Shape> output_shapes;
  std::vector<Device> output_devices;  // where a missing output gradient's zeros are made
  std::vector<bool> is_tensor_arg;  // per forward argument: which gradients map to next_edges

  std::string name() const override { return "CppNode"; }
  int num_outputs() const override { return int(output_shapes.size()); }
  void release_saved() override { ctx.saved_.clear(); }

  GradList apply(GradList&& grads) override {
    std::vector<Tensor<T>> grad_outputs;
    for (size_t i = 0; i < output_shapes.size(); ++i) {
      if (i < grads.size() && grads[i]) {
        grad_outputs.emplace_back(grads[i]);
      } else {
        Tensor<T> zero(TensorImpl::allocate(output_shapes[i], scalar_type_of<T>(), "backward", output_devices[i]));
        zero.zero_();
        grad_outputs.push_back(zero);
      }
    }
    NoGradGuard no_grad;
    const std::vector<Tensor<T>> result = F::backward(&ctx, std::move(grad_outputs));
    check<std::logic_error>(result.size() == is_tensor_arg.size(), "backward of a custom Function returned ",
                            result.size(), " gradients for ", is_tensor_arg.size(), " forward arguments");
    GradList out;
    for (size_t a = 0; a < result.size(); ++a) {
      if (!is_tensor_arg[a]) continue;
      const size_t k = out.size();
      if (result[a].defined() && next_edges[k].valid()) {
        check<ShapeError>(result[a].shape() == input_shapes_[k], "backward of a custom Function: the gradient of ",
                          "argument ", a, " has shape ", result[a].shape(), ", the argument ", input_shapes_[k]);
        out.push_back(result[a].impl_ptr());
      } else {
        out.push_back(nullptr);
      }
    }
    return out;
  }

  std::vector<Shape> input_shapes_;
};

template <class F>
struct Function {
  template <class... Args>
  static auto apply(const Args&... args) {
    // Expressions are materialized first (recording their own node), so their leaves get gradients.
    return apply_to_tensors(as_argument(args)...);
  }

 private:
  template <class A>
  static decltype(auto) as_argument(const A& a) {
    if constexpr (Expression<A>) return Tensor<typename A::value_type>(a);
    else return (a);
  }

  template <class... Args>
  static auto apply_to_tensors(const Args&... args) {
    AutogradContext ctx;
    std::vector<ImplPtr> tensor_args;
    std::vector<bool> is_tensor;
    (collect(args, tensor_args, is_tensor), ...);
    auto result = [&] {
      NoGradGuard no_grad;
      return F::forward(&ctx, args...);
    }();
    using R = decltype(result);
    constexpr bool single = !requires { typename R::value_type::value_type; result.size(); };
    std::vector<Tensor<value_type_of<R>>> outputs;
    if constexpr (single) outputs.push_back(result);
    else outputs = result;
    using T = value_type_of<R>;
    bool any = false;
    for (const ImplPtr& t : tensor_args) any |= requires_grad(*t);
    if (GradMode::is_enabled() && any && is_floating_v<T>) {
      auto node = std::make_shared<CppNode<F, T>>();
      for (const ImplPtr& t : tensor_args) {
        node->next_edges.push_back(gradient_edge(t));
        node->input_shapes_.push_back(t->shape);
      }
      node->is_tensor_arg = is_tensor;
      node->ctx = std::move(ctx);
      node->ctx.owner_ = node.get();
      for (size_t i = 0; i < outputs.size(); ++i) {
        node->output_shapes.push_back(outputs[i].shape());
        node->output_devices.push_back(outputs[i].device());
        if (std::find(node->ctx.non_differentiable_.begin(), node->ctx.non_differentiable_.end(), i) !=
            node->ctx.non_differentiable_.end())
          continue;
        // An output that is an input (or a view of one) gets a fresh handle, so the input keeps its own history.
        if (!outputs[i].is_leaf() || outputs[i].requires_grad()) outputs[i] = outputs[i].detach();
        AutogradMeta& meta = meta_of(outputs[i].impl_ptr());
        meta.grad_fn = node;
        meta.output_nr = int(i);
      }
    }
    if constexpr (single) return outputs[0];
    else return outputs;
  }

  template <class R>
  static auto value_type_probe() {
    if constexpr (requires { typename R::value_type::value_type; }) return typename R::value_type::value_type{};
    else return typename R::value_type{};
  }
  template <class R>
  using value_type_of = decltype(value_type_probe<R>());

  template <class A>
  static void collect(const A& a, std::vector<ImplPtr>& tensors, std::vector<bool>& is_tensor) {
    if constexpr (TensorHandle<std::remove_cvref_t<A>>) {
      tensors.push_back(a.impl_ptr());
      is_tensor.push_back(true);
    } else {
      is_tensor.push_back(false);
    }
  }
};

}  // namespace kiln::autograd
