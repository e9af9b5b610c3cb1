#pragma once
// Views: new layouts over the same storage. Each checks its arguments and names itself in errors.
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {

// Resolves one -1 in a requested shape against numel.
inline Shape infer_size(Shape shape, int64_t numel, const char* op, const Shape& from) {
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      check<ShapeError>(infer < 0, op, ": only one dimension can be inferred in ", shape);
      infer = i;
    } else {
      check<ShapeError>(shape[i] >= 0, op, ": invalid shape dimension ", shape[i], " in ", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    check<ShapeError>(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for input of size ", numel);
    shape[infer] = numel / known;
  } else {
    check<ShapeError>(known == numel, op, ": shape ", shape, " is invalid for input of shape ", from, " (", numel,
                      " elements)");
  }
  return shape;
}

// Strides for viewing (shape, strides) as new_shape without copying, if possible (PyTorch's
// computeStride): each run of old dims that is contiguous in memory can be split freely.
inline bool view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape, Strides& out) {
  out = Strides::filled(new_shape.size(), 0);
  if (numel_of(shape) == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int view_d = new_shape.size() - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  while (view_d >= 0) out[view_d--] = 1;  // leading size-1 dims
  return true;
}

}  // namespace detail

// Each view checks its arguments against this tensor's shape, then gives with_layout the function from a layout of
// that shape to the view's (tensor.hpp: autograd also applies it to a contiguous layout).

namespace detail {
// The layout function of view(new_shape) and of reshape's views; the caller has checked that the strides allow it.
inline auto reshaped(const Shape& new_shape) {
  return [new_shape](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{new_shape, {}, offset};
    view_strides(shape, strides, new_shape, l.strides);
    return l;
  };
}
}  // namespace detail

template <Dtype T>
Tensor<T> Tensor<T>::view(Shape new_shape) const {
  new_shape = detail::infer_size(new_shape, numel(), "view", shape());
  Strides st;
  if (!detail::view_strides(shape(), strides(), new_shape, st))
    throw ShapeError(detail::cat("view: shape ", new_shape, " is not compatible with the input's shape ", shape(),
                                 " and strides ", strides(), "; use reshape(), which copies when it must"));
  return with_layout("ViewBackward", detail::reshaped(new_shape));
}

template <Dtype T>
Tensor<T> Tensor<T>::reshape(Shape new_shape) const {
  new_shape = detail::infer_size(new_shape, numel(), "reshape", shape());
  Strides st;
  if (detail::view_strides(shape(), strides(), new_shape, st)) return with_layout("ViewBackward", detail::reshaped(new_shape));
  return clone().view(new_shape);
}

template <Dtype T>
Tensor<T> Tensor<T>::permute(const Dims& order) const {
  check<ShapeError>(order.size() == dim(), "permute: got ", order.size(), " dims ", order, " for a tensor of ", dim(), " dims");
  Dims from = order;
  bool seen[kMaxRank] = {};
  for (int i = 0; i < dim(); ++i) {
    from[i] = wrap_dim(order[i], dim(), "permute");
    check<ShapeError>(!seen[from[i]], "permute: dim ", from[i], " repeats in ", order);
    seen[from[i]] = true;
  }
  return with_layout("PermuteBackward", [&](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{shape, strides, offset};
    for (int i = 0; i < from.size(); ++i) {
      l.shape[i] = shape[int(from[i])];
      l.strides[i] = strides[int(from[i])];
    }
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  const int a = wrap_dim(d0, dim(), "transpose"), b = wrap_dim(d1, dim(), "transpose");
  return with_layout("TransposeBackward", [&](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{shape, strides, offset};
    std::swap(l.shape[a], l.shape[b]);
    std::swap(l.strides[a], l.strides[b]);
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::t() const {
  check<ShapeError>(dim() <= 2, "t: expects a tensor of at most 2 dims, got shape ", shape(), "; use transpose()");
  return dim() < 2 ? *this : transpose(0, 1);
}

template <Dtype T>
Tensor<T> Tensor<T>::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  check<ShapeError>(dim() > 0, "slice: cannot slice a 0-dim tensor");
  const int k = wrap_dim(d, dim(), "slice");
  check(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[k];
  auto clamp_index = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp_index(start);
  end = std::max(start, clamp_index(end));
  return with_layout("SliceBackward", [&](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{shape, strides, offset + start * strides[k]};
    l.shape[k] = (end - start + step - 1) / step;
    l.strides[k] = strides[k] * step;
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::narrow(int64_t d, int64_t start, int64_t length) const {
  const int k = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape()[k];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    throw std::out_of_range(detail::cat("narrow: start ", start, " and length ", length, " exceed dim ", k, " of size ", n));
  return slice(k, start, start + length);
}

template <Dtype T>
Tensor<T> Tensor<T>::select(int64_t d, int64_t index) const {
  check<ShapeError>(dim() > 0, "select: cannot select on a 0-dim tensor");
  const int k = wrap_dim(d, dim(), "select");
  const int64_t n = shape()[k];
  if (index < -n || index >= n)
    throw std::out_of_range(detail::cat("select: index ", index, " is out of range for dim ", k, " of size ", n));
  if (index < 0) index += n;
  return with_layout("SelectBackward", [&](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{shape, strides, offset + index * strides[k]};
    l.shape.erase(k);
    l.strides.erase(k);
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::unsqueeze(int64_t d) const {
  const int k = wrap_dim(d, dim() + 1, "unsqueeze");
  return with_layout("UnsqueezeBackward", [&](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{shape, strides, offset};
    l.shape.insert(k, 1);
    l.strides.insert(k, k < shape.size() ? strides[k] * shape[k] : 1);
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::squeeze() const {
  return with_layout("SqueezeBackward", [](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{{}, {}, offset};
    for (int i = 0; i < shape.size(); ++i)
      if (shape[i] != 1) {
        l.shape.push_back(shape[i]);
        l.strides.push_back(strides[i]);
      }
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  const int k = wrap_dim(d, dim(), "squeeze");
  if (shape()[k] != 1) return *this;
  return with_layout("SqueezeBackward", [&](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{shape, strides, offset};
    l.shape.erase(k);
    l.strides.erase(k);
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::expand(const Shape& new_shape) const {
  check<ShapeError>(new_shape.size() >= dim(), "expand: the requested shape ", new_shape,
                    " has fewer dims than the tensor's shape ", shape());
  Shape s = new_shape;
  const int lead = new_shape.size() - dim();
  for (int i = 0; i < new_shape.size(); ++i) {
    const int j = i - lead;
    if (j < 0) {
      check<ShapeError>(new_shape[i] >= 0, "expand: -1 is not allowed in a new leading dim of ", new_shape);
      continue;
    }
    const int64_t have = shape()[j];
    if (new_shape[i] == -1) s[i] = have;
    else
      check<ShapeError>(new_shape[i] == have || (have == 1 && new_shape[i] >= 0), "expand: the tensor's shape ",
                        shape(), " cannot be expanded to ", new_shape, " (dim ", j, " has size ", have, ", not 1)");
  }
  // A dim keeps its stride where its size stays, else (new, or size 1 expanded) steps by 0.
  return with_layout("ExpandBackward", [&](const Shape& shape, const Strides& strides, int64_t offset) {
    ViewLayout l{s, Strides::filled(s.size(), 0), offset};
    for (int i = lead; i < s.size(); ++i)
      if (s[i] == shape[i - lead]) l.strides[i] = strides[i - lead];
    return l;
  });
}

template <Dtype T>
Tensor<T> Tensor<T>::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int a = wrap_dim(start_dim, dim(), "flatten"), b = wrap_dim(end_dim, dim(), "flatten");
  check<ShapeError>(a <= b, "flatten: start_dim ", a, " comes after end_dim ", b);
  Shape s;
  for (int i = 0; i < a; ++i) s.push_back(shape()[i]);
  int64_t merged = 1;
  for (int i = a; i <= b; ++i) merged *= shape()[i];
  s.push_back(merged);
  for (int i = b + 1; i < dim(); ++i) s.push_back(shape()[i]);
  return reshape(s);
}

}  // namespace kiln
