#pragma once
// The backward of every view (view, reshape, permute, transpose, slice, select, unsqueeze,
// squeeze, expand, flatten, index): one node, as PyTorch's as_strided backward. The view's
// gradient is summed over the view's broadcast (stride-0) dims, written into a zeroed buffer laid
// out like the base's storage at the view's place, and read back in the base's shape. Type-erased:
// one node class for every dtype.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kiln/autograd/engine.hpp"
#include "kiln/core/config.hpp"

namespace kiln::autograd {

struct ViewBackward : Node {
  KILN_DECL ViewBackward(const ImplPtr& base, const ImplPtr& view, const char* kind);
  KILN_DECL std::string name() const override;
  KILN_DECL GradList apply(GradList&& grads) override;

 private:
  // The strides, sorted, are those of a contiguous tensor of these sizes in some order of dims.
  KILN_DECL static bool covers_once(const Shape& shape, const Strides& strides);

  ImplPtr base_;
  Shape view_shape_;
  Strides view_strides_;
  int64_t view_offset_ = 0;
  bool covers_base_once_;
  std::string kind_;
};

KILN_DECL void record_view(const ImplPtr& base, const ImplPtr& view, const char* kind);

#if KILN_HEADER_DEFINITIONS
KILN_DECL ViewBackward::ViewBackward(const ImplPtr& base, const ImplPtr& view, const char* kind)
    : base_(base->view_as(base->shape, base->strides, base->offset)),  // layout only: no autograd meta
      view_shape_(view->shape),
      view_strides_(view->strides),
      view_offset_(view->offset),
      // A reshape, transpose or permute of a whole contiguous base: every base element exactly once.
      covers_base_once_(base->is_contiguous() && view->offset == base->offset && view->numel() == base->numel() &&
                        covers_once(view->shape, view->strides)),
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
    if (g->strides == view_strides_) return {g->view_as(base_->shape, contiguous_strides(base_->shape), g->offset)};
    // Otherwise (a permute's, a transpose's) one strided copy into a fresh base-shaped gradient: no
    // zeroed buffer, no second copy.
    const ImplPtr out = TensorImpl::allocate(base_->shape, g->dtype, "backward");
    copy_elements(*out->view_as(view_shape_, view_strides_, 0), *g);
    return {out};
  }
  // Every element of a broadcast dim (stride 0, size > 1) maps to one element of the base.
  Shape summed = view_shape_;
  for (int i = 0; i < summed.size(); ++i)
    if (view_strides_[i] == 0) summed[i] = 1;
  const ImplPtr src = sum_to_shape(g, summed);
  // A zeroed buffer covering the base's span of storage; the view's gradient goes to the view's place.
  int64_t lo = base_->offset, hi = base_->offset;
  for (int i = 0; i < base_->shape.size(); ++i) {
    const int64_t reach = (base_->shape[i] - 1) * base_->strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t span = base_->numel() == 0 ? 0 : hi - lo + 1;
  const ImplPtr buffer = TensorImpl::allocate({span}, g->dtype, "backward");
  std::memset(buffer->data_bytes(), 0, size_t(span) * element_size(g->dtype));
  copy_elements(*buffer->view_as(summed, view_strides_, view_offset_ - lo), *src);
  return {copy_gradient(*buffer->view_as(base_->shape, base_->strides, base_->offset - lo))};
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

KILN_DECL void record_view(const ImplPtr& base, const ImplPtr& view, const char* kind) {
  AutogradMeta& meta = meta_of(view);
  meta.grad_fn = std::make_shared<ViewBackward>(base, view, kind);
  meta.output_nr = 0;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::autograd
