#pragma once
// cat and stack, as torch.cat / torch.stack: every input is copied into its slice of one new tensor with
// copy_, so each copy is one pass of the fused evaluator (strided and converted layouts included). The new tensor
// is on the inputs' device (CUDA tensors are copied by one kernel each in programs built with KILN_WITH_CUDA);
// inputs on two devices are refused, as torch's.
// Backward: each input gets its slice of the gradient (stack is cat of unsqueezed inputs).
// unbind, as torch.unbind, is stack's inverse: the slices along a dim as views, with one backward node for all.
#include <algorithm>
#include <initializer_list>
#include <span>
#include <vector>

#include "kiln/tensor/views.hpp"

namespace kiln {

namespace autograd {
struct CatBackward : Node {
  CatBackward(const std::vector<ImplPtr>& inputs, int dim) : dim_(dim) {
    for (const ImplPtr& t : inputs) {
      next_edges.push_back(gradient_edge(t));
      sizes_.push_back(t->shape[dim]);
    }
  }
  std::string name() const override { return "CatBackward"; }
  GradList apply(GradList&& grads) override {
    GradList out(sizes_.size());
    const ImplPtr& g = grads.at(0);
    if (!g) return out;
    int64_t at = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (next_edges[i].valid()) {
        Shape s = g->shape;
        s[dim_] = sizes_[i];
        out[i] = copy_gradient(*g->view_as(s, g->strides, g->offset + at * g->strides[dim_]));
      }
      at += sizes_[i];
    }
    return out;
  }

 private:
  int dim_;
  std::vector<int64_t> sizes_;
};

// The backward of unbind: the slices' gradients stacked into one tensor of the input's shape (zeros for a slice that
// got none). With a select per slice instead, each slice would send back a zeroed tensor of the input's size: work
// quadratic in the number of slices, as for the time steps of a recurrent layer.
struct UnbindBackward : Node {
  UnbindBackward(const ImplPtr& input, int dim) : shape_(input->shape), dim_(dim) {
    next_edges.push_back(gradient_edge(input));
  }
  std::string name() const override { return "UnbindBackward"; }
  int num_outputs() const override { return int(shape_[dim_]); }
  GradList apply(GradList&& grads) override {
    const auto given = std::find_if(grads.begin(), grads.end(), [](const ImplPtr& g) { return bool(g); });
    if (given == grads.end()) return {nullptr};
    const int64_t n = shape_[dim_];
    const bool all = grads.size() == size_t(n) && std::all_of(grads.begin(), grads.end(), [](const ImplPtr& g) { return bool(g); });
    const ImplPtr out = all ? TensorImpl::allocate(shape_, (*given)->dtype, "backward", (*given)->device())
                            : zero_gradient(shape_, (*given)->dtype, (*given)->device());
    const Strides strides = contiguous_strides(shape_);
    Shape slice_shape;
    Strides slice_strides;
    for (int i = 0; i < shape_.size(); ++i)
      if (i != dim_) {
        slice_shape.push_back(shape_[i]);
        slice_strides.push_back(strides[i]);
      }
    for (int64_t i = 0; i < n && size_t(i) < grads.size(); ++i)
      if (grads[size_t(i)]) copy_elements(*out->view_as(slice_shape, slice_strides, i * strides[dim_]), *grads[size_t(i)]);
    return {out};
  }

 private:
  Shape shape_;
  int dim_;
};
}  // namespace autograd

namespace detail {
// Every input of `op` (cat, stack) on tensor 0's device: copy_ would move memory between devices silently.
template <Dtype T>
void check_one_device(const char* op, std::span<const Tensor<T>> tensors) {
  for (size_t i = 1; i < tensors.size(); ++i)
    check<std::invalid_argument>(tensors[i].device() == tensors[0].device(), op, ": tensor ", i, " of shape ",
                                 tensors[i].shape(), " is on ", tensors[i].device().str(), " but tensor 0 of shape ",
                                 tensors[0].shape(), " is on ", tensors[0].device().str(),
                                 "; move them to one device first (.to(device))");
}
}  // namespace detail

// Joins tensors of equal rank along an existing dim; all other dims must match.
template <Dtype T>
Tensor<T> cat(std::span<const Tensor<T>> tensors, int64_t dim = 0) {
  check<ShapeError>(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Shape& first = tensors[0].shape();
  check<ShapeError>(first.size() > 0, "cat: tensor 0 is 0-dim and cannot be concatenated; unsqueeze it first");
  const int d = wrap_dim(dim, first.size(), "cat");
  detail::check_one_device("cat", tensors);
  Shape out_shape = first;
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Shape& s = tensors[i].shape();
    check<ShapeError>(s.size() == first.size(), "cat: tensor ", i, " has ", s.size(), " dims but tensor 0 has ",
                      first.size(), " (shapes ", s, " and ", first, ")");
    for (int k = 0; k < s.size(); ++k)
      check<ShapeError>(k == d || s[k] == first[k], "cat: tensor ", i, " has shape ", s, " but tensor 0 has shape ",
                        first, " (all dims but ", d, " must match)");
    out_shape[d] += s[d];
  }
  Tensor<T> out = empty<T>(out_shape, tensors[0].device());
  {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (const Tensor<T>& t : tensors) {
      out.narrow(d, at, t.size(d)).copy_(t);
      at += t.size(d);
    }
  }
  bool any = false;
  for (const Tensor<T>& t : tensors) any |= t.requires_grad();
  if (GradMode::is_enabled() && any) {
    std::vector<autograd::ImplPtr> inputs;
    for (const Tensor<T>& t : tensors) inputs.push_back(t.impl_ptr());
    autograd::meta_of(out.impl_ptr()).grad_fn = std::make_shared<autograd::CatBackward>(inputs, d);
  }
  return out;
}

// Joins tensors of equal shape along a new dim inserted at `dim` (in [-(rank + 1), rank]).
template <Dtype T>
Tensor<T> stack(std::span<const Tensor<T>> tensors, int64_t dim = 0) {
  check<ShapeError>(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const Shape& first = tensors[0].shape();
  const int d = wrap_dim(dim, first.size() + 1, "stack");
  detail::check_one_device("stack", tensors);
  for (size_t i = 1; i < tensors.size(); ++i)
    check<ShapeError>(tensors[i].shape() == first, "stack: tensor ", i, " has shape ", tensors[i].shape(),
                      " but tensor 0 has shape ", first, " (all tensors must have the same shape)");
  std::vector<Tensor<T>> parts;
  for (const Tensor<T>& t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(std::span<const Tensor<T>>(parts), d);
}

// The slices of t along dim, as views (t.select(dim, i) for each i); their gradients flow back through one node.
template <Dtype T>
std::vector<Tensor<T>> unbind(const Tensor<T>& t, int64_t dim = 0) {
  check<ShapeError>(t.dim() > 0, "unbind: a 0-dim tensor has no dim to unbind");
  const int d = wrap_dim(dim, t.dim(), "unbind");
  const bool record = GradMode::is_enabled() && t.requires_grad();
  const Tensor<T> base = record ? t.detach() : t;
  std::vector<Tensor<T>> slices;
  for (int64_t i = 0; i < t.size(d); ++i) slices.push_back(base.select(d, i));
  if (record) {
    const auto node = std::make_shared<autograd::UnbindBackward>(t.impl_ptr(), d);
    for (size_t i = 0; i < slices.size(); ++i) {
      autograd::AutogradMeta& meta = autograd::meta_of(slices[i].impl_ptr());
      meta.grad_fn = node;
      meta.output_nr = int(i);
    }
  }
  return slices;
}

// The forms callers write: cat({a, b}, 1) and cat(vector, 1).
template <Dtype T>
Tensor<T> cat(std::initializer_list<Tensor<T>> tensors, int64_t dim = 0) {
  return cat(std::span<const Tensor<T>>(tensors.begin(), tensors.size()), dim);
}
template <Dtype T>
Tensor<T> cat(const std::vector<Tensor<T>>& tensors, int64_t dim = 0) {
  return cat(std::span<const Tensor<T>>(tensors), dim);
}
template <Dtype T>
Tensor<T> stack(std::initializer_list<Tensor<T>> tensors, int64_t dim = 0) {
  return stack(std::span<const Tensor<T>>(tensors.begin(), tensors.size()), dim);
}
template <Dtype T>
Tensor<T> stack(const std::vector<Tensor<T>>& tensors, int64_t dim = 0) {
  return stack(std::span<const Tensor<T>>(tensors), dim);
}

}  // namespace kiln
