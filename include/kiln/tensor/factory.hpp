#pragma once
// Factories: empty, zeros, ones, full, arange, linspace, eye, tensor(...) from values, from_blob.
#include <cmath>
#include <functional>
#include <initializer_list>
#include <vector>

#include "kiln/tensor/views.hpp"

namespace kiln {

// On the host by default, or on `device` (kCUDA: libtorch's torch::zeros(shape, torch::kCUDA)).
template <Dtype T = float>
Tensor<T> empty(const Shape& shape, Device device = kCPU) {
  return Tensor<T>(TensorImpl::allocate(shape, scalar_type_of<T>(), "empty", device));
}

template <Dtype T = float>
Tensor<T> full(const Shape& shape, T value, Device device = kCPU) {
  Tensor<T> t = empty<T>(shape, device);
  t.fill_(value);
  return t;
}
template <Dtype T = float>
Tensor<T> zeros(const Shape& shape, Device device = kCPU) { return full<T>(shape, T(0), device); }
template <Dtype T = float>
Tensor<T> ones(const Shape& shape, Device device = kCPU) { return full<T>(shape, T(1), device); }

// Shaped like t, on t's device.
template <Dtype T>
Tensor<T> empty_like(const Tensor<T>& t) { return empty<T>(t.shape(), t.device()); }
template <Dtype T>
Tensor<T> zeros_like(const Tensor<T>& t) { return zeros<T>(t.shape(), t.device()); }
template <Dtype T>
Tensor<T> ones_like(const Tensor<T>& t) { return ones<T>(t.shape(), t.device()); }
template <Dtype T>
Tensor<T> full_like(const Tensor<T>& t, T value) { return full<T>(t.shape(), value, t.device()); }

// A 1-D tensor holding a copy of the values.
template <Dtype T>
Tensor<T> tensor(const std::vector<T>& values) {
  Tensor<T> t = empty<T>({int64_t(values.size())});
  std::copy(values.begin(), values.end(), t.data_ptr());
  return t;
}
template <Dtype T>
Tensor<T> tensor(std::initializer_list<T> values) { return tensor(std::vector<T>(values)); }

// A 2-D tensor from nested lists: tensor<float>({{1, 2}, {3, 4}}). Rows must have equal lengths.
template <Dtype T>
Tensor<T> tensor(std::initializer_list<std::initializer_list<T>> rows) {
  const int64_t r = int64_t(rows.size()), c = r ? int64_t(rows.begin()->size()) : 0;
  Tensor<T> t = empty<T>({r, c});
  T* p = t.data_ptr();
  for (const auto& row : rows) {
    check<ShapeError>(int64_t(row.size()) == c, "tensor: rows of nested lists have different lengths (", c, " and ",
                      row.size(), ")");
    p = std::copy(row.begin(), row.end(), p);
  }
  return t;
}
// A 3-D tensor from nested lists.
template <Dtype T>
Tensor<T> tensor(std::initializer_list<std::initializer_list<std::initializer_list<T>>> blocks) {
  std::vector<Tensor<T>> parts;
  for (const auto& b : blocks) parts.push_back(tensor<T>(b));
  const int64_t n = int64_t(parts.size());
  const Shape inner = n ? parts[0].shape() : Shape{0, 0};
  Tensor<T> t = empty<T>({n, inner[0], inner[1]});
  for (int64_t i = 0; i < n; ++i) {
    check<ShapeError>(parts[i].shape() == inner, "tensor: blocks of nested lists have different shapes (", inner,
                      " and ", parts[i].shape(), ")");
    t.select(0, i).copy_(parts[i]);
  }
  return t;
}

// Values start, start + step, ... below end (as torch.arange).
template <Dtype T = float>
Tensor<T> arange(double start, double end, double step = 1) {
  check(step != 0, "arange: step must be nonzero");
  const double steps = (end - start) / step;
  check(std::isfinite(steps), "arange: the range [", start, ", ", end, ") with step ", step, " is not finite");
  check(steps >= 0, "arange: step ", step, " has the wrong sign for the range [", start, ", ", end, ")");  // as torch
  const double count = std::ceil(steps);
  Tensor<T> t = empty<T>({int64_t(count)});
  T* p = t.data_ptr();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(start + double(i) * step);
  return t;
}
template <Dtype T = float>
Tensor<T> arange(double end) { return arange<T>(0, end, 1); }

// steps values from start to end inclusive (as torch.linspace).
template <Dtype T = float>
Tensor<T> linspace(double start, double end, int64_t steps) {
  check(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor<T> t = empty<T>({steps});
  T* p = t.data_ptr();
  const double delta = steps > 1 ? (end - start) / double(steps - 1) : 0;
  // The second half counts back from end, as PyTorch, so both ends are exact; one step is start.
  for (int64_t i = 0; i < steps; ++i)
    p[i] = T(i < steps / 2 || steps == 1 ? start + delta * double(i) : end - delta * double(steps - 1 - i));
  return t;
}

template <Dtype T = float>
Tensor<T> eye(int64_t n, int64_t m = -1) {
  if (m < 0) m = n;
  Tensor<T> t = zeros<T>({n, m});
  T* p = t.data_ptr();
  for (int64_t i = 0; i < std::min(n, m); ++i) p[i * m + i] = T(1);
  return t;
}

// A tensor over the user's memory: no copy; the memory must outlive every view of it unless a
// deleter is given (called when the last view goes).
template <Dtype T>
Tensor<T> from_blob(T* data, const Shape& shape, std::function<void(void*)> deleter = {}) {
  return from_blob(data, shape, contiguous_strides(shape), std::move(deleter));
}
template <Dtype T>
Tensor<T> from_blob(T* data, const Shape& shape, const Strides& strides, std::function<void(void*)> deleter = {}) {
  check<ShapeError>(shape.size() == strides.size(), "from_blob: shape ", shape, " and strides ", strides,
                    " have different ranks");
  checked_numel(shape, "from_blob");
  int64_t reach = 0;
  for (int i = 0; i < shape.size(); ++i) {
    check<ShapeError>(strides[i] >= 0, "from_blob: negative stride in ", strides);
    if (shape[i] > 0) reach += (shape[i] - 1) * strides[i];
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, size_t(reach + 1) * sizeof(T), std::move(deleter));
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = scalar_type_of<T>();
  return Tensor<T>(impl);
}

}  // namespace kiln
