#pragma once
// Indexing with integer tensors, as torch's: index_select, gather, scatter_add, and masked_fill. Each is
// differentiable: index_select and gather send their gradient back with scatter_add (repeated indices
// accumulate), scatter_add passes its gradient to self and gathers it for src, and masked_fill is an
// elementwise expression (where), so it fuses and differentiates like one.
//
// CUDA tensors (in programs built with KILN_WITH_CUDA) are gathered and scattered on their device by
// cuda/indexing.hpp, after the same checks; the backward nodes' buffers live on the gradient's device. Operands on
// two devices are refused.
#include <stdexcept>

#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {

#ifdef KILN_WITH_CUDA
// (cuda/indexing.hpp, which <kiln/kiln.hpp> includes in such builds)
template <Dtype T>
Tensor<T> cuda_gather(const Tensor<T>& self, int dim, const Tensor<int64_t>& index, const char* op);
template <Dtype T>
void cuda_scatter_add_into(const Tensor<T>& out, int dim, const Tensor<int64_t>& index, const Tensor<T>& src,
                           const char* op);
#endif

// Walks every element of a tensor of shape `shape` (row-major) and calls f(i, j, coord): i is the
// element's flat index and coord its coordinates, j the flat index in a contiguous tensor of shape
// `target` of the element with the same coordinates except along `dim`, where it has index_at(i,
// coord[dim]), checked to be in [0, target[dim]): a negative index is an error, as in torch.
template <class IndexAt, class F>
void for_each_mapped(const Shape& shape, const Shape& target, int dim, const char* op, IndexAt&& index_at, F&& f) {
  const int rank = shape.size();
  const Strides tst = contiguous_strides(target);
  int64_t coord[kMaxRank] = {};
  const int64_t n = numel_of(shape);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = index_at(i, coord[dim]);
    if (k < 0 || k >= target[dim])
      throw std::out_of_range(cat(op, ": index ", k, " is out of range for dim ", dim, " of size ", target[dim]));
    int64_t j = 0;
    for (int d = 0; d < rank; ++d) j += (d == dim ? k : coord[d]) * tst[d];
    f(i, j, coord);
    for (int d = rank - 1; d >= 0; --d) {  // odometer
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
}

// gather / scatter_add, as torch: index has `bound`'s rank and is at most its size along every dim but `skip`
// (self's indexed dim; -1 for scatter_add's src, which is read at the index's coordinates).
inline void check_index_shape(const char* op, const Shape& index, const Shape& bound, int skip, const char* what) {
  check<ShapeError>(index.size() == bound.size(), op, ": index of shape ", index, " must have as many dims as ",
                    what, " of shape ", bound);
  for (int d = 0; d < index.size(); ++d)
    check<ShapeError>(d == skip || index[d] <= bound[d], op, ": index of shape ", index, " is larger than ", what,
                      " of shape ", bound, " along dim ", d);
}

// Two operands of `op` on one device: nothing here moves memory between devices.
inline void check_same_device(const char* op, const char* a_name, const TensorImpl& a, const char* b_name,
                              const TensorImpl& b) {
  check<std::invalid_argument>(a.device() == b.device(), op, ": ", a_name, " of shape ", a.shape, " is on ",
                               a.device().str(), " but ", b_name, " of shape ", b.shape, " is on ", b.device().str(),
                               "; move them to one device first (.to(device))");
}

// A 0-dim tensor as one of shape [1]: torch's gather, index_select and scatter_add treat it so.
template <Dtype T>
Tensor<T> at_least_1d(const Tensor<T>& t) {
  return t.dim() == 0 ? t.reshape({1}) : t;
}

template <Dtype T>
void scatter_add_into(Tensor<T>& out, int dim, const Tensor<int64_t>& index, const Tensor<T>& src, const char* op) {
#ifdef KILN_WITH_CUDA
  if (out.is_cuda()) return cuda_scatter_add_into(out, dim, index, src, op);
#endif
  const Tensor<int64_t> idx = index.contiguous();
  const Tensor<T> s = src.contiguous();
  const int64_t* ip = idx.data_ptr();
  const T* sp = s.data_ptr();
  T* op_ = out.data_ptr();
  const Strides sst = contiguous_strides(s.shape());
  const int rank = idx.dim();
  // src is read at the index element's coordinates (src may be larger than index).
  for_each_mapped(idx.shape(), out.shape(), dim, op, [&](int64_t i, int64_t) { return ip[i]; },
                  [&](int64_t, int64_t j, const int64_t* coord) {
                    int64_t at = 0;
                    for (int d = 0; d < rank; ++d) at += coord[d] * sst[d];
                    op_[j] = T(compute_t<T>(op_[j]) + compute_t<T>(sp[at]));
                  });
}

// A new tensor of index's shape: self gathered along dim (shapes and devices checked), on self's device.
template <Dtype T>
Tensor<T> gather_values(const Tensor<T>& self, int dim, const Tensor<int64_t>& index, const char* op) {
#ifdef KILN_WITH_CUDA
  if (self.is_cuda()) return cuda_gather(self, dim, index, op);
#endif
  const Tensor<int64_t> idx = index.contiguous();
  const Tensor<T> s = self.contiguous();
  Tensor<T> out(TensorImpl::allocate(idx.shape(), scalar_type_of<T>(), op));
  const int64_t* ip = idx.data_ptr();
  const T* sp = s.data_ptr();
  T* o = out.data_ptr();
  for_each_mapped(idx.shape(), s.shape(), dim, op, [&](int64_t i, int64_t) { return ip[i]; },
                  [&](int64_t i, int64_t j, const int64_t*) { o[i] = sp[j]; });
  return out;
}

}  // namespace detail

// out[i][j] = self[index[i][j]][j] for dim 0 (and likewise for other dims); out has index's shape.
template <Dtype T>
Tensor<T> gather(const Tensor<T>& self, int64_t dim, const Tensor<int64_t>& index);

// self with src[i][j] added at [index[i][j]][j] for dim 0 (repeated indices accumulate).
template <Dtype T>
Tensor<T> scatter_add(const Tensor<T>& self, int64_t dim, const Tensor<int64_t>& index, const Tensor<T>& src);

namespace autograd {
// gather / index_select: the gradient is scattered (added) back to where each element came from.
template <Dtype T>
struct GatherBackward : Node {
  GatherBackward(const ImplPtr& self, int dim, const Tensor<int64_t>& index, const char* kind)
      : dim_(dim), index_(index.impl_ptr()), self_shape_(self->shape), kind_(kind) {
    next_edges.push_back(gradient_edge(self));
  }
  std::string name() const override { return kind_; }
  GradList apply(GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    NoGradGuard no_grad;
    Tensor<T> out = zeros<T>(self_shape_, grads[0]->device());
    kiln::detail::scatter_add_into(out, dim_, Tensor<int64_t>(index_.unpack(*this)), Tensor<T>(grads[0]), kind_);
    return {out.impl_ptr()};
  }

 private:
  int dim_;
  SavedTensor index_;
  Shape self_shape_;
  const char* kind_;
};

// scatter_add: self's gradient passes through; src's is gathered from it.
template <Dtype T>
struct ScatterAddBackward : Node {
  ScatterAddBackward(const ImplPtr& self, const ImplPtr& src, int dim, const Tensor<int64_t>& index)
      : dim_(dim), index_(index.impl_ptr()), src_shape_(src->shape) {
    next_edges.push_back(gradient_edge(self));
    next_edges.push_back(gradient_edge(src));
  }
  std::string name() const override { return "ScatterAddBackward"; }
  GradList apply(GradList&& grads) override {
    if (!grads.at(0)) return {nullptr, nullptr};
    NoGradGuard no_grad;
    const Tensor<T> g(grads[0]);
    GradList out{grads[0], nullptr};
    if (next_edges[1].valid()) {
      // src may be larger than index: its other elements get no gradient.
      Tensor<T> gs = zeros<T>(src_shape_, g.device());
      const Tensor<int64_t> index(index_.unpack(*this));
      Tensor<T> part = gather(g, dim_, index);
      Tensor<T> view = gs;
      for (int d = 0; d < index.dim(); ++d) view = view.narrow(d, 0, index.size(d));
      view.copy_(part);
      out[1] = gs.impl_ptr();
    }
    return out;
  }

 private:
  int dim_;
  SavedTensor index_;
  Shape src_shape_;
};
}  // namespace autograd

namespace detail {
// gather along dim d (checked), recording `kind` as the node when self requires grad; the result has index's shape.
template <Dtype T>
Tensor<T> gather_as(const Tensor<T>& self_, int d, const Tensor<int64_t>& index, const char* op, const char* kind) {
  const Tensor<T> self = at_least_1d(self_);
  const Tensor<int64_t> idx = at_least_1d(index);
  check_index_shape(op, idx.shape(), self.shape(), d, "self");
  check_same_device(op, "self", self.impl(), "index", idx.impl());
  Tensor<T> out = gather_values(self, d, idx, op);
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && self.requires_grad())
      autograd::meta_of(out.impl_ptr()).grad_fn = std::make_shared<autograd::GatherBackward<T>>(self.impl_ptr(), d, idx, kind);
  }
  return index.dim() == 0 ? out.reshape({}) : out;
}

// index_select, with `op` naming the caller in errors (embedding is one).
template <Dtype T>
Tensor<T> index_select_as(const Tensor<T>& self, int64_t dim, const Tensor<int64_t>& index, const char* op) {
  const int d = wrap_dim(dim, self.dim(), op);
  check<ShapeError>(index.dim() <= 1, op, ": index must be 1-d, got shape ", index.shape());
  check_same_device(op, "self", self.impl(), "index", index.impl());  // before the index is expanded
  check<ShapeError>(self.dim() > 0 || index.numel() == 1, op,
                    ": an index into a 0-dim tensor must have one value, got ", index.numel());
  // As a gather with the index broadcast over the other dims.
  Shape line;
  for (int i = 0; i < self.dim(); ++i) line.push_back(i == d ? index.numel() : 1);
  Shape out_shape = self.shape();
  if (self.dim() > 0) out_shape[d] = index.numel();
  return gather_as(self, d, index.reshape(line).expand(out_shape), op, "IndexSelectBackward");
}
}  // namespace detail

template <Dtype T>
Tensor<T> gather(const Tensor<T>& self, int64_t dim, const Tensor<int64_t>& index) {
  return detail::gather_as(self, wrap_dim(dim, self.dim(), "gather"), index, "gather", "GatherBackward");
}

// The slices of self at the given indices along dim (index: 1-d).
template <Dtype T>
Tensor<T> index_select(const Tensor<T>& self, int64_t dim, const Tensor<int64_t>& index) {
  return detail::index_select_as(self, dim, index, "index_select");
}

template <Dtype T>
Tensor<T> scatter_add(const Tensor<T>& self_, int64_t dim, const Tensor<int64_t>& index_, const Tensor<T>& src_) {
  const int d = wrap_dim(dim, self_.dim(), "scatter_add");
  const Tensor<T> self = detail::at_least_1d(self_), src = detail::at_least_1d(src_);
  const Tensor<int64_t> index = detail::at_least_1d(index_);
  detail::check_index_shape("scatter_add", index.shape(), src.shape(), -1, "src");
  detail::check_index_shape("scatter_add", index.shape(), self.shape(), d, "self");
  detail::check_same_device("scatter_add", "self", self.impl(), "index", index.impl());
  detail::check_same_device("scatter_add", "self", self.impl(), "src", src.impl());
  Tensor<T> out;
  {
    NoGradGuard no_grad;
    out = self.clone();
    detail::scatter_add_into(out, d, index, src, "scatter_add");
  }
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && (self.requires_grad() || src.requires_grad()))
      autograd::meta_of(out.impl_ptr()).grad_fn =
          std::make_shared<autograd::ScatterAddBackward<T>>(self.impl_ptr(), src.impl_ptr(), d, index);
  }
  return self_.dim() == 0 ? out.reshape({}) : out;
}

// self with value wherever mask (broadcast to self's shape) is true.
template <Dtype T, OperandOrScalar V>
Tensor<T> masked_fill(const Tensor<T>& self, const Tensor<bool>& mask, const V& value) {
  check<ShapeError>(broadcast_shapes(mask.shape(), self.shape(), "masked_fill") == self.shape(),
                    "masked_fill: mask of shape ", mask.shape(), " cannot be broadcast to self's shape ", self.shape());
  return Tensor<T>(where(mask, value, self));
}

}  // namespace kiln
