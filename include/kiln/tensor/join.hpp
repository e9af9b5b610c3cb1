#pragma once
// cat and stack, as torch.cat / torch.stack: every input is copied into its slice of one new tensor with
// copy_, so each copy is one pass of the fused evaluator (strided and converted layouts included).
#include <initializer_list>
#include <span>
#include <vector>

#include "kiln/tensor/views.hpp"

namespace kiln {

// Joins tensors of equal rank along an existing dim; all other dims must match.
template <Dtype T>
Tensor<T> cat(std::span<const Tensor<T>> tensors, int64_t dim = 0) {
  check<ShapeError>(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Shape& first = tensors[0].shape();
  check<ShapeError>(first.size() > 0, "cat: tensor 0 is 0-dim and cannot be concatenated; unsqueeze it first");
  const int d = wrap_dim(dim, first.size(), "cat");
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
  Tensor<T> out = empty<T>(out_shape);
  int64_t at = 0;
  for (const Tensor<T>& t : tensors) {
    out.narrow(d, at, t.size(d)).copy_(t);
    at += t.size(d);
  }
  return out;
}

// Joins tensors of equal shape along a new dim inserted at `dim` (in [-(rank + 1), rank]).
template <Dtype T>
Tensor<T> stack(std::span<const Tensor<T>> tensors, int64_t dim = 0) {
  check<ShapeError>(!tensors.empty(), "stack: expected a non-empty list of tensors");
  const Shape& first = tensors[0].shape();
  const int d = wrap_dim(dim, first.size() + 1, "stack");
  for (size_t i = 1; i < tensors.size(); ++i)
    check<ShapeError>(tensors[i].shape() == first, "stack: tensor ", i, " has shape ", tensors[i].shape(),
                      " but tensor 0 has shape ", first, " (all tensors must have the same shape)");
  Shape out_shape = first;
  out_shape.insert(d, int64_t(tensors.size()));
  Tensor<T> out = empty<T>(out_shape);
  for (size_t i = 0; i < tensors.size(); ++i) out.select(d, int64_t(i)).copy_(tensors[i]);
  return out;
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
