#pragma once
// Tensor<T>: a handle to a TensorImpl, with libtorch's value semantics. Copying a Tensor shares it;
// `t = expr` rebinds t to a newly computed tensor; writing into existing memory is explicit
// (copy_, +=, fill_, an assignment to a view such as `t.select(0, 1) = expr`).
#include <algorithm>
#include <array>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "kiln/autograd/grad_mode.hpp"
#include "kiln/autograd/meta.hpp"
#include "kiln/cpu/eval.hpp"
#include "kiln/expr/functions.hpp"

namespace kiln {

template <Dtype T = float>
class Tensor;
namespace indexing {
class TensorIndex;
}

namespace autograd {
struct Node;
inline bool requires_grad(const TensorImpl& impl);
template <class E>
bool needs_graph(const E& e);
template <class E, bool kMaterialized>
void record_fused(const E& e, const std::shared_ptr<TensorImpl>& out, const Shape& expr_shape,
                  const Shape& expanded_grad_shape, const char* kind, double scale);
void record_view(const std::shared_ptr<TensorImpl>& base, const std::shared_ptr<TensorImpl>& view, const char* kind,
                 const ViewLayout& in_base);
}  // namespace autograd

namespace detail {
std::shared_ptr<TensorImpl> write_into(const auto& expr, const std::shared_ptr<TensorImpl>& dst, const char* op);
template <class E>
std::shared_ptr<TensorImpl> evaluate_new(const E& expr);
template <class E>
std::shared_ptr<TensorImpl> evaluate_recorded(const E& expr);
#ifdef KILN_WITH_CUDA
// (cuda/evaluate.hpp, which <kiln/kiln.hpp> includes in such builds)
template <class E>
std::optional<Device> leaves_device(const E& expr);
template <class E>
std::shared_ptr<TensorImpl> cuda_evaluate_new(const E& expr, Device device);
template <class E>
void cuda_assign(const E& expr, TensorImpl& dst);
template <size_t K, class... E>
void cuda_assign_all(const std::array<std::shared_ptr<TensorImpl>, K>& dst, const E&... e);
#endif
}  // namespace detail

template <Dtype T>
class Tensor {
 public:
  using value_type = T;
  using kiln_tensor = void;

  Tensor() = default;  // undefined, as libtorch's Tensor()
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {
    check<DTypeError>(!impl_ || impl_->dtype == scalar_type_of<T>(), "Tensor<", dtype_name(scalar_type_of<T>()),
                      ">: the tensor holds ", impl_ ? dtype_name(impl_->dtype) : "", " values");
  }
  // Evaluates an expression into a new tensor: `Tensor<float> d = a * b + c;` is one fused pass.
  template <Expression E>
  Tensor(const E& expr) : impl_(detail::evaluate_recorded(expr)) {  // NOLINT: implicit by design
    static_assert(std::is_same_v<typename E::value_type, T>,
                  "kiln: the expression's dtype differs from the tensor's; convert it with .to<T>()");
  }

  // ---- rebinding (lvalue) and writing through (rvalue, e.g. t.select(0, 1) = x) ---------------
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & noexcept = default;
  template <Expression E>
  Tensor& operator=(const E& expr) & {
    return *this = Tensor(expr);
  }
  Tensor& operator=(const Tensor& src) && { return copy_(src); }
  template <Expression E>
  Tensor& operator=(const E& expr) && { return copy_(expr); }
  template <class S>
    requires std::is_arithmetic_v<S> || is_half_v<S>
  Tensor& operator=(S value) && { return fill_(value); }

  // ---- metadata --------------------------------------------------------------------------------
  bool defined() const { return bool(impl_); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  TensorImpl& impl() const { return *checked(); }
  const Shape& shape() const { return checked()->shape; }
  const Shape& sizes() const { return shape(); }
  int64_t size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
  const Strides& strides() const { return checked()->strides; }
  int64_t stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }
  int64_t storage_offset() const { return checked()->offset; }
  int dim() const { return shape().size(); }
  int64_t numel() const { return checked()->numel(); }
  ScalarType dtype() const { return scalar_type_of<T>(); }
  bool is_contiguous() const { return checked()->is_contiguous(); }
  uint64_t version() const { return checked()->version(); }
  T* data_ptr() const { return reinterpret_cast<T*>(checked()->data_bytes()); }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // The value of a one-element tensor (copied to the host, after the device's work, for a CUDA tensor).
  T item() const {
    check(numel() == 1, "item: a tensor with ", numel(), " elements cannot be converted to a scalar");
    if (!is_cuda()) return *data_ptr();
    T value;
    detail::require_cuda("item").copy(&value, kCPU, impl_->device_bytes(), device(), sizeof(T));
    return value;
  }
  // The elements in row-major order (copied to the host for a CUDA tensor).
  std::vector<T> to_vector() const {
    const Tensor c = contiguous();
    if (!is_cuda()) return std::vector<T>(c.data_ptr(), c.data_ptr() + c.numel());
    const auto host = std::make_unique<T[]>(size_t(c.numel()));  // (not the vector: std::vector<bool> has no data())
    if (c.numel() > 0)
      detail::require_cuda("to_vector").copy(host.get(), kCPU, c.impl_->device_bytes(), device(), size_t(c.numel()) * sizeof(T));
    return std::vector<T>(host.get(), host.get() + c.numel());
  }

  // ---- in place --------------------------------------------------------------------------------
  // Writes src (broadcast to this shape) into this tensor's memory; correct when they overlap.
  template <class S>
    requires OperandOrScalar<S> || is_half_v<S>
  Tensor& copy_(const S& src) {
    if constexpr (!Operand<S>) {
      return fill_(src);
    } else {
      const auto node = detail::to_node<T>(src);
      static_assert(std::is_same_v<typename decltype(node)::value_type, T>,
                    "kiln: copy_ source has a different dtype; convert it with .to<T>()");
      detail::write_into(node, checked(), "copy_");
      return *this;
    }
  }
  template <class S>
    requires std::is_arithmetic_v<S> || is_half_v<S>
  Tensor& fill_(S value) {
    detail::write_into(Scalar<T>(compute_t<T>(value)), checked(), "fill_");
    return *this;
  }
  Tensor& zero_() { return fill_(0); }
  template <OperandOrScalar S> Tensor& operator+=(const S& s) { return copy_(*this + s); }
  template <OperandOrScalar S> Tensor& operator-=(const S& s) { return copy_(*this - s); }
  template <OperandOrScalar S> Tensor& operator*=(const S& s) { return copy_(*this * s); }
  template <OperandOrScalar S> Tensor& operator/=(const S& s) { return copy_(*this / s); }

  // ---- copies ----------------------------------------------------------------------------------
  Tensor contiguous() const { return is_contiguous() ? *this : clone(); }
  Tensor clone() const { return Tensor(Leaf<T>(checked())); }
  template <Dtype U>
  Tensor<U> to() const {
    if constexpr (std::is_same_v<T, U>) return *this;
    else return Tensor<U>(Leaf<T>(checked()).template to<U>());
  }

  // ---- devices (tensor/device_copy.hpp; CUDA needs <kiln/cuda.hpp>) -----------------------------
  Device device() const { return checked()->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  // A contiguous copy on `device`, or this tensor when it is there already.
  Tensor to(Device device) const;
  Tensor cuda(int index = 0) const { return to(Device(kCUDA, index)); }
  Tensor cpu() const { return to(kCPU); }

  // ---- views (share storage) -------------------------------------------------------------------
  Tensor view(Shape new_shape) const;
  Tensor reshape(Shape new_shape) const;
  Tensor permute(const Dims& order) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor slice(int64_t d, int64_t start = 0, int64_t end = std::numeric_limits<int64_t>::max(), int64_t step = 1) const;
  Tensor narrow(int64_t d, int64_t start, int64_t length) const;
  Tensor select(int64_t d, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor unsqueeze(int64_t d) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t d) const;
  Tensor expand(const Shape& new_shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // ---- autograd (autograd/tensor_autograd.hpp) -------------------------------------------------
  // Marks a leaf as needing its gradient (floating dtypes only).
  Tensor& requires_grad_(bool requires_grad = true);
  bool requires_grad() const;
  // The accumulated gradient (undefined until a backward reached this leaf).
  Tensor grad() const;
  // Sets .grad to undefined (set_to_none, PyTorch's default) or to zeros.
  void zero_grad(bool set_to_none = true);
  bool is_leaf() const;
  // Made under InferenceMode: no version counter, no place in a graph (see InferenceMode).
  bool is_inference() const { return checked()->storage && checked()->storage->is_inference(); }
  // The node that produced this tensor (null for leaves); name() prints it.
  std::shared_ptr<autograd::Node> grad_fn() const;
  // The same values, cut from the graph.
  Tensor detach() const;
  // Backpropagates from this tensor (a scalar, or with the gradient of something with respect to it).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // fn(grad) runs when this tensor's gradient is computed; returning a Tensor replaces the gradient.
  template <class F>
  void register_hook(F fn) const;

  // t.index({Slice(), 0, None}) and t.index_put_({...}, value), as libtorch's (tensor/indexing.hpp).
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  template <OperandOrScalar S>
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const S& value);

 private:
  const std::shared_ptr<TensorImpl>& checked() const {
    if (!impl_) throw std::logic_error("kiln: the tensor is undefined (default-constructed)");
    return impl_;
  }
  // A view of this tensor's storage, laid out as layout(shape, strides, offset) maps this tensor's layout. When this
  // tensor requires grad, the view records a node (kind names it, e.g. "TransposeBackward") that routes its gradient
  // back (autograd/view_backward.hpp), told where the view's elements are among this tensor's: the same function
  // applied to a contiguous tensor of this shape. (Memory cannot tell: two elements of an expanded tensor share one.)
  template <class MakeLayout>
  Tensor with_layout(const char* kind, const MakeLayout& layout) const {
    const ViewLayout l = layout(shape(), strides(), storage_offset());
    Tensor v(impl_->view_as(l.shape, l.strides, l.offset));
    if constexpr (is_floating_v<T>) {
      if (GradMode::is_enabled() && autograd::requires_grad(*impl_))
        autograd::record_view(impl_, v.impl_, kind, layout(shape(), contiguous_strides(shape()), int64_t(0)));
    }
    return v;
  }
  std::shared_ptr<TensorImpl> impl_;
};

template <Dtype T>
Tensor(const Tensor<T>&) -> Tensor<T>;
template <Expression E>
Tensor(const E&) -> Tensor<typename E::value_type>;

template <class Derived>
auto ExprBase<Derived>::eval() const {
  return Tensor<typename Derived::value_type>(self());
}

// ---- evaluation -------------------------------------------------------------------------------

namespace detail {

inline void check_versions(const auto& expr) {
  for_each_leaf(expr, [](const auto& leaf) {
    if (leaf.impl->version() != leaf.version)
      throw StaleExpressionError(cat("kiln: an expression is evaluated after its leaf of shape ", leaf.impl->shape,
                                     " was modified in place (version ", leaf.version, ", now ", leaf.impl->version(),
                                     "); build the expression again after the modification"));
  });
}

// A new tensor holding expr's values; records nothing (library internals and the engine use it, so
// their expressions do not each instantiate a backward).
template <class E>
std::shared_ptr<TensorImpl> evaluate_new(const E& expr) {
  check_versions(expr);
#ifdef KILN_WITH_CUDA
  if (const std::optional<Device> d = leaves_device(expr); d && d->is_cuda()) return cuda_evaluate_new(expr, *d);
#endif
  auto out = TensorImpl::allocate(expr.shape(), scalar_type_of<typename E::value_type>(), "eval");
  if (out->numel() > 0) cpu::assign(expr, *out);
  return out;
}

// The same, recording a FusedBackward node when a leaf requires grad (Tensor(expr), eval()).
template <class E>
std::shared_ptr<TensorImpl> evaluate_recorded(const E& expr) {
  auto out = evaluate_new(expr);
  if constexpr (is_floating_v<typename E::value_type> && leaf_count_v<E> > 0) {
    if (autograd::needs_graph(expr)) autograd::record_fused<E, true>(expr, out, out->shape, out->shape, "FusedBackward", 1.0);
  }
  return out;
}

// expr's values in a new tensor, recording nothing, for code that always runs under no-grad: backward formulas
// (the engine runs every node without recording). Tensor(expr) would compile the
// expression's fused backward too, never run there: 4.3 s of the 12.6 s that a call of norm() added to a file
// (docs/performance.md). Where a leaf does need a graph it throws, so a call outside no-grad cannot drop a
// gradient silently.
template <class E>
Tensor<typename E::value_type> untracked(const E& expr) {
  check<std::logic_error>(!autograd::needs_graph(expr),
                          "kiln: an untracked evaluation met a leaf that requires grad in grad mode");
  return Tensor<typename E::value_type>(evaluate_new(expr));
}
template <Dtype T>
const Tensor<T>& untracked(const Tensor<T>& t) {
  return t;
}

// Byte range [first, last] that a layout touches (a non-empty tensor).
inline std::pair<int64_t, int64_t> byte_span(const TensorImpl& t) {
  const int64_t es = int64_t(element_size(t.dtype));
  int64_t lo = t.offset, hi = t.offset;
  for (int i = 0; i < t.shape.size(); ++i) {
    const int64_t reach = (t.shape[i] - 1) * t.strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo * es, hi * es + es - 1};
}

// True when writing dst element by element could change a value the leaf has yet to read: the
// leaf shares dst's memory, and does not read each element exactly where it is written.
inline bool overlaps_unsafely(const TensorImpl& leaf, const TensorImpl& dst) {
  if (leaf.storage != dst.storage || leaf.numel() == 0) return false;
  const auto [a0, a1] = byte_span(leaf);
  const auto [b0, b1] = byte_span(dst);
  if (a1 < b0 || b1 < a0) return false;
  if (leaf.offset != dst.offset || leaf.dtype != dst.dtype) return true;
  const Strides st = broadcast_strides(leaf.shape, leaf.strides, dst.shape);
  for (int i = 0; i < dst.shape.size(); ++i)
    if (dst.shape[i] > 1 && st[i] != dst.strides[i]) return true;
  return false;
}

// An in-place destination where several elements are one memory location (a dim of size > 1 and stride 0, as
// expand makes) has no defined result: `e += 1` would add once per alias. torch refuses it too.
inline void check_no_internal_overlap(const TensorImpl& dst, const char* op) {
  for (int i = 0; i < dst.shape.size(); ++i)
    check<std::logic_error>(dst.shape[i] <= 1 || dst.strides[i] != 0, op, ": the destination of shape ", dst.shape,
                            " and strides ", dst.strides, " has more than one element at a single memory location (",
                            "as an expanded view does); clone() it before writing in place");
}

// An in-place write is not recorded by autograd: refused into a tensor that requires grad in grad mode (torch refuses
// one into a leaf that requires grad), and from a source that needs a graph. Every in-place write checks it: copy_,
// fill_ and the operators through write_into, the random fills (tensor/random.hpp) before they draw.
inline void check_untracked_write(const TensorImpl& dst, const char* op, bool source_needs_graph = false) {
  if (source_needs_graph || (GradMode::is_enabled() && autograd::requires_grad(dst)))
    throw std::logic_error(cat(op, ": in-place writes to or from tensors that require grad are not recorded; ",
                               "write `t = expr` to get a new tensor, or use a kiln::NoGradGuard"));
}

// dst = expr (broadcast to dst's shape), in place; bumps dst's version.
// dst = expr (broadcast), where dst's memory is; in builds with KILN_WITH_CUDA a CUDA destination or CUDA leaves go to
// the device (cuda/evaluate.hpp: also the copies between devices that copy_ allows, as torch's).
template <class E>
void assign_on_device(const E& expr, TensorImpl& dst) {
#ifdef KILN_WITH_CUDA
  if (const std::optional<Device> d = leaves_device(expr); dst.device().is_cuda() || (d && d->is_cuda()))
    return cuda_assign(expr, dst);
#endif
  cpu::assign(expr, dst);
}

std::shared_ptr<TensorImpl> write_into(const auto& expr, const std::shared_ptr<TensorImpl>& dst, const char* op) {
  const Shape src_shape = expr.shape();
  if (broadcast_shapes(src_shape, dst->shape, op) != dst->shape)
    throw ShapeError(cat(op, ": source of shape ", src_shape, " cannot be broadcast to the destination's shape ", dst->shape));
  check_versions(expr);
  check_untracked_write(*dst, op, autograd::needs_graph(expr));
  using E = std::remove_cvref_t<decltype(expr)>;
  // Copying a tensor onto the same data (same storage, offset, shape, strides, dtype) changes nothing: torch's
  // copy_ returns at once, before refusing an expanded destination, and its version still moves.
  if constexpr (std::is_same_v<E, Leaf<typename E::value_type>>) {
    const TensorImpl& src = *expr.impl;
    if (src.storage == dst->storage && src.offset == dst->offset && src.dtype == dst->dtype &&
        src.shape == dst->shape && src.strides == dst->strides) {
      dst->storage->bump_version();
      return dst;
    }
  }
  // Writing one value everywhere (fill_, zero_) is defined on an expanded view, and torch allows it.
  if constexpr (leaf_count_v<E> > 0) check_no_internal_overlap(*dst, op);
  bool overlap = false;
  for_each_leaf(expr, [&](const auto& leaf) { overlap |= overlaps_unsafely(*leaf.impl, *dst); });
  if (dst->numel() > 0) {
    if (overlap) {
      using V = typename std::remove_cvref_t<decltype(expr)>::value_type;
      const Leaf<V> staged(evaluate_new(expr));
      assign_on_device(staged, *dst);
    } else {
      assign_on_device(expr, *dst);
    }
  }
  dst->storage->bump_version();
  return dst;
}

}  // namespace detail

// Evaluates expr into out (broadcast to out's shape), in place.
template <Expression E, Dtype T>
void eval(const E& expr, Tensor<T>& out) {
  out.copy_(expr);
}

// outs[k] = exprs[k] for every k, in place and in one fused pass: every expression is evaluated at a
// position before any output there is written, so an output may appear in the expressions (read at
// that same position): `kiln::eval_all({&m, &p}, b1 * m + (1 - b1) * g, p - lr * (b1 * m + ...))`.
// The outputs share one shape and dtype; each expression broadcasts to it. Float and double.
template <Dtype T, Operand... E>
void eval_all(std::initializer_list<Tensor<T>*> outs, const E&... exprs) {
  static_assert(sizeof...(E) >= 1, "kiln: eval_all needs at least one expression");
  constexpr size_t K = sizeof...(E);
  check<std::invalid_argument>(outs.size() == K, "eval_all: ", outs.size(), " outputs for ", K, " expressions");
  std::array<std::shared_ptr<TensorImpl>, K> dst;
  std::array<const TensorImpl*, K> raw;
  size_t k = 0;
  for (Tensor<T>* t : outs) {
    dst[k] = t->impl_ptr();
    raw[k] = dst[k].get();
    check<ShapeError>(!dst[k] || dst[k]->shape == dst[0]->shape, "eval_all: output ", k, " has shape ",
                      dst[k] ? dst[k]->shape : Shape{}, ", output 0 ", dst[0]->shape);
    if (dst[k]) detail::check_no_internal_overlap(*dst[k], "eval_all");
    ++k;
  }
  const auto nodes = std::make_tuple(detail::to_node<T>(exprs)...);
  std::apply([&](const auto&... e) {
    size_t i = 0;
    ((detail::check_versions(e),
      check<ShapeError>(broadcast_shapes(e.shape(), dst[0]->shape, "eval_all") == dst[0]->shape, "eval_all: expression ",
                        i, " of shape ", e.shape(), " cannot be broadcast to the outputs' shape ", dst[0]->shape),
      ++i),
     ...);
    const bool recording = (autograd::needs_graph(e) || ...);
    for (const auto& d : dst)
      check<std::logic_error>(!recording && !(GradMode::is_enabled() && autograd::requires_grad(*d)),
                              "eval_all: in-place writes to or from tensors that require grad are not recorded; use a "
                              "kiln::NoGradGuard");
    auto no_unsafe_overlap = [&](const auto& leaf) {
      for (const auto& d : dst)
        check<std::logic_error>(!detail::overlaps_unsafely(*leaf.impl, *d), "eval_all: an input of shape ",
                                leaf.impl->shape, " overlaps an output other than element for element");
    };
    (for_each_leaf(e, no_unsafe_overlap), ...);
    if (dst[0]->numel() == 0) return;
#ifdef KILN_WITH_CUDA
    if (dst[0]->device().is_cuda()) return detail::cuda_assign_all(dst, e...);
#endif
    cpu::assign_all(raw, e...);
  }, nodes);
  for (const auto& d : dst) d->storage->bump_version();
}

}  // namespace kiln

// Recording and the autograd members need the Tensor class complete.
#include "kiln/autograd/tensor_autograd.hpp"
#include "kiln/autograd/view_backward.hpp"
