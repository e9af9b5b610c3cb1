#pragma once
// The backward of every view (view, reshape, permute, transpose, slice, select, unsqueeze,
// squeeze, expand, flatten, index): one node, as PyTorch's as_strided backward, over the base's elements
// rather than its memory. The node knows where the view's elements are among the base's (the view's layout
// over a contiguous tensor of the base's shape: Tensor::with_layout), so a view of an expanded base, whose
// elements share addresses, still sends each gradient to one element. The view's gradient is summed over the
// view's broadcast (stride-0) dims and written into a zeroed base-shaped buffer at the view's place. Type-erased:
// one node class for every dtype.
#include <algorithm>
#include <utility>
#include <vector>

#include "kiln/autograd/engine.hpp"
#include "kiln/core/config.hpp"

namespace kiln::autograd {

struct ViewBackward : Node {
  // in_base: the view's layout over a contiguous tensor of base's shape.
  KILN_DECL ViewBackward(const ImplPtr& base, const ViewLayout& in_base, const char* kind);
  KILN_DECL std::string name() const override;
  KILN_DECL GradList apply(GradList&& grads) override;

 private:
  // The strides, sorted, are those of a contiguous tensor of these sizes in some order of dims.
  KILN_DECL static bool covers_once(const Shape& shape, const Strides& strides);

  Shape base_shape_;
  ViewLayout view_;
  bool covers_base_once_;
  std::string kind_;
};

KILN_DECL void record_view(const ImplPtr& base, const ImplPtr& view, const char* kind, const ViewLayout& in_base);

#if KILN_HEADER_DEFINITIONS
KILN_DECL ViewBackward::ViewBackward(const ImplPtr& base, const ViewLayout& in_base, const char* kind)
    : base_shape_(base->shape),
      view_(in_base),
      // A reshape, transpose or permute of the whole base: every base element exactly once.
      covers_base_once_(in_base.offset == 0 && numel_of(in_base.shape) == base->numel() &&
                        covers_once(in_base.shape, in_base.strides)),
      kind_(kind) {
  next_edges.push_back(gradient_edge(base));
}

KILN_DECL std::string ViewBackward::name() const { return kind_; }

KILN_DECL GradList ViewBackward::apply(GradList&& grads) {
  const ImplPtr& g = grads.at(0);
  if (!g) return {nullptr};
  if (covers_base_once_) {
    // The gradient laid out exactly as the view is (a reshape's, usually): its memory is already the
    // base's gradient, read in the base's shape.
    if (g->strides == view_.strides) return {g->view_as(base_shape_, contiguous_strides(base_shape_), g->offset)};
    // Otherwise (a permute's, a transpose's) one strided copy into a fresh base-shaped gradient: no
    // zeroed buffer, no second copy.
    const ImplPtr out = TensorImpl::allocate(base_shape_, g->dtype, "backward", g->device());
    copy_elements(*out->view_as(view_.shape, view_.strides, 0), *g);
    return {out};
  }
  // Every element of a broadcast dim (stride 0, size > 1) maps to one element of the base.
  Shape summed = view_.shape;
  for (int i = 0; i < summed.size(); ++i)
    if (view_.strides[i] == 0) summed[i] = 1;
  const ImplPtr src = sum_to_shape(g, summed);
  // A zeroed base-shaped gradient; the view's gradient goes to the view's place.
  const ImplPtr out = zero_gradient(base_shape_, g->dtype, g->device());
  copy_elements(*out->view_as(summed, view_.strides, view_.offset), *src);
  return {out};
}

KILN_DECL bool ViewBackward::covers_once(const Shape& shape, const Strides& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
  for (int i = 0; i < shape.size(); ++i)
    if (shape[i] > 1) dims.emplace_back(strides[i], shape[i]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (auto [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

KILN_DECL void record_view(const ImplPtr& base, const ImplPtr& view, const char* kind, const ViewLayout& in_base) {
  AutogradMeta& meta = meta_of(view);
  meta.grad_fn = std::make_shared<ViewBackward>(base, in_base, kind);
  meta.output_nr = 0;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::autograd
