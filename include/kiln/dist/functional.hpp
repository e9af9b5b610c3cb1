#pragma once
// Differentiable collectives, as torch.distributed.nn.functional: all_reduce(x, group) returns a new tensor holding
// the sum of every rank's x, recorded by autograd; its backward sums the gradients over the ranks the same way (the
// gradient of rank r's input is the sum of every rank's gradient of the output, since every rank's output depends on
// it). nn::SyncBatchNorm uses it on CUDA tensors, where its statistics are expressions that autograd differentiates.
// Every rank must call it (and run the backward) in the same order.
#include <memory>
#include <vector>

#include "kiln/autograd/function.hpp"
#include "kiln/dist/process_group.hpp"

namespace kiln::dist::functional {

namespace detail {
template <Dtype T>
struct AllReduceSum : autograd::Function<AllReduceSum<T>> {
  static Tensor<T> forward(autograd::AutogradContext* ctx, const Tensor<T>& x, ProcessGroup* group) {
    ctx->saved_data["group"] = group;
    Tensor<T> out = x.clone();
    group->all_reduce(out);
    return out;
  }
  static std::vector<Tensor<T>> backward(autograd::AutogradContext* ctx, std::vector<Tensor<T>> grads) {
    auto* group = std::any_cast<ProcessGroup*>(ctx->saved_data["group"]);
    Tensor<T> g = grads[0].clone();
    group->all_reduce(g);
    return {g, {}};
  }
};
}  // namespace detail

// The sum over the group's ranks of x (on the group's device), differentiable.
template <Dtype T>
Tensor<T> all_reduce(const Tensor<T>& x, const std::shared_ptr<ProcessGroup>& group) {
  check<std::invalid_argument>(bool(group), "dist::functional::all_reduce: the process group is null");
  return detail::AllReduceSum<T>::apply(x, group.get());
}

}  // namespace kiln::dist::functional
