#pragma once
// The backward of every view (view, reshape, permute, transpose, slice, select, unsqueeze,
// squeeze, expand, flatten, index): one node, as PyTorch's as_strided backward. The view's
// gradient is first summed over the view's broadcast (stride-0) dims, then written into a zeroed
// buffer laid out like the base's storage at the view's place, and read back in the base's shape.
#include "kiln/autograd/engine.hpp"
#include "kiln/tensor/reduce.hpp"

namespace kiln::autograd {

template <Dtype T>
struct ViewBackward : Node {
  ViewBackward(const ImplPtr& base, const ImplPtr& view, const char* kind) : kind_(kind) {
    base_ = base->view_as(base->shape, base->strides, base->offset);  // layout only: no autograd meta
    view_shape_ = view->shape;
    view_strides_ = view->strides;
    view_offset_ = view->offset;
    next_edges.push_back(gradient_edge(base));
  }
  std::string name() const override { return kind_; }

  GradList apply(GradList&& grads) override {
    const ImplPtr& g = grads.at(0);
    if (!g) return {nullptr};
    {
      const Tensor<T> grad(g);
      // Sum over the dims the view broadcast (stride 0, size > 1): they all map to one element.
      Dims broadcast;
      Strides strides = view_strides_;
      for (int i = 0; i < view_shape_.size(); ++i)
        if (view_strides_[i] == 0 && view_shape_[i] > 1) broadcast.push_back(i);
      Tensor<T> src = broadcast.empty() ? grad : sum(grad, broadcast, /*keepdim=*/true);
      Shape src_shape = src.shape();
      // A buffer covering the base's span of storage, in the base's layout, zeroed.
      int64_t lo = base_->offset, hi = base_->offset;
      for (int i = 0; i < base_->shape.size(); ++i) {
        const int64_t reach = (base_->shape[i] - 1) * base_->strides[i];
        (reach < 0 ? lo : hi) += reach;
      }
      Tensor<T> buffer(TensorImpl::allocate({base_->numel() == 0 ? 0 : hi - lo + 1}, scalar_type_of<T>(), "backward"));
      buffer.zero_();
      Tensor<T> base_grad(buffer.impl_ptr()->view_as(base_->shape, base_->strides, base_->offset - lo));
      Tensor<T> target(buffer.impl_ptr()->view_as(src_shape, strides, view_offset_ - lo));
      target.copy_(src);
      return {base_grad.contiguous().impl_ptr()};
    }
  }

 private:
  ImplPtr base_;
  Shape view_shape_;
  Strides view_strides_;
  int64_t view_offset_ = 0;
  std::string kind_;
};

template <Dtype T>
void record_view(const ImplPtr& base, const ImplPtr& view, const char* kind) {
  auto node = std::make_shared<ViewBackward<T>>(base, view, kind);
  AutogradMeta& meta = meta_of(view);
  meta.grad_fn = std::move(node);
  meta.output_nr = 0;
}

}  // namespace kiln::autograd
