#pragma once
// Autograd on CUDA tensors, in builds with KILN_WITH_CUDA (where <kiln/kiln.hpp> includes this header): the fused
// backward of an expression (autograd/fused.hpp's node) as one generated kernel on the gradient's device
// (cuda::backward_kernel: every leaf's gradient in one pass, as on the CPU), and the engine's gradient arithmetic
// (autograd/grad_ops.hpp: copy, add, scale, sum over broadcast dims, the non-finite check) as typed evaluations on
// the device, registered with the engine at static initialization. The other backward formulas (softmax, amax,
// views, matmul...) are expressions and reductions, which run where their tensors are.
#include <utility>
#include <vector>

#include "kiln/autograd/grad_ops.hpp"
#include "kiln/cuda/evaluate.hpp"
#include "kiln/tensor/device_copy.hpp"

namespace kiln::detail {

// A handle on t's elements for an expression leaf (a new impl over the same storage; nothing is copied).
inline std::shared_ptr<TensorImpl> leaf_handle(const TensorImpl& t) { return t.view_as(t.shape, t.strides, t.offset); }

// buffers[k] (null: no gradient wanted) = the gradient of e's leaf k in e's `shape`, given g, the incoming gradient
// broadcast to `shape`; a tensor that is several leaves (x * x) gets all of their adjoints in its first leaf's
// buffer (later[k], bit j: leaf j is the same tensor). The kernel skips the outputs passed as null.
template <class E>
void cuda_fused_backward(const E& e, const TensorImpl& g, const Shape& shape, const autograd::GradList& buffers,
                         const uint64_t* later) {
  constexpr int N = leaf_count_v<E>;
  const std::vector<int> slot = cuda::gradient_outputs<E>();
  const Strides dense = contiguous_strides(shape);
  std::vector<cuda::ArrayRef> outs;
  for (int s : slot)
    if (s >= 0) outs.push_back({nullptr, dense});
  // The later leaves' adjoints go to scratch buffers, added to their first leaf's after the kernel.
  std::vector<std::pair<int, std::shared_ptr<TensorImpl>>> scratch;
  for (int k = 0; k < N; ++k) {
    if (!buffers[size_t(k)]) continue;
    outs[size_t(slot[size_t(k)])].data = buffers[size_t(k)]->device_bytes();
    for (int j = k + 1; j < N; ++j)
      if (later[k] >> j & 1u) {
        auto extra = TensorImpl::allocate(shape, buffers[size_t(k)]->dtype, "backward", g.device());
        outs[size_t(slot[size_t(j)])].data = extra->device_bytes();
        scratch.emplace_back(k, std::move(extra));
      }
  }
  // The incoming gradient is broadcast over a reduction's dims (stride 0): then the strided loop.
  const Strides g_strides = broadcast_strides(g.shape, g.strides, shape);
  cuda::KernelVariant variant = cuda::choose_variant(shape, {dense}, e);
  if (variant.contiguous && !(g.shape == shape && g.is_contiguous())) variant = {false, shape.size(), variant.index32};
  variant.index32 = variant.index32 && cuda::detail::fits_index32(cuda::detail::max_offset(shape, g_strides));
  struct Tag;
  const cuda::KernelSource& kernel =
      kernel_for<std::pair<E, Tag>>(variant.key(), [&] { return cuda::backward_kernel(e, variant); });
  const auto words = cuda::backward_descriptor(e, kernel, shape, {g.device_bytes(), g_strides}, outs);
  cuda::DeviceContext::get(g.device().index()).launch(kernel, words, launch_for(numel_of(shape)));
  for (const auto& [k, extra] : scratch) {
    TensorImpl& sum = *buffers[size_t(k)];
    autograd::with_gradient_type(sum.dtype, [&](auto tag) {
      using T = decltype(tag);
      launch_into(Leaf<T>(leaf_handle(sum)) + Leaf<T>(extra), sum);
    });
  }
}

namespace cuda_gradients {

inline void copy_elements(const TensorImpl& dst, const TensorImpl& src) {
  autograd::with_gradient_type(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_into(Leaf<T>(leaf_handle(src)), const_cast<TensorImpl&>(dst));  // (dst: a handle on the memory written)
  });
}

inline std::shared_ptr<TensorImpl> add_grads(const std::shared_ptr<TensorImpl>& a, const std::shared_ptr<TensorImpl>& b) {
  // In place where nothing else refers to a (as the CPU's), else into a new gradient.
  const bool reuse = a.use_count() == 1 && a->storage.use_count() == 1 && a->is_contiguous();
  std::shared_ptr<TensorImpl> sum;
  autograd::with_gradient_type(a->dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto e = Leaf<T>(leaf_handle(*a)) + Leaf<T>(leaf_handle(*b));
    if (reuse) launch_into(e, *a);
    else sum = cuda_evaluate_new(e, a->device());
  });
  return reuse ? a : sum;
}

// (Copied to the host: GradScaler's check, once per gradient and step.)
inline int64_t first_non_finite(const TensorImpl& g) {
  std::shared_ptr<TensorImpl> host;
  autograd::with_gradient_type(g.dtype, [&](auto tag) {
    using T = decltype(tag);
    host = Tensor<T>(leaf_handle(g)).cpu().impl_ptr();
  });
  return autograd::first_non_finite(*host);
}

inline std::shared_ptr<TensorImpl> scaled_gradient(const TensorImpl& g, double s) {
  std::shared_ptr<TensorImpl> out;
  autograd::with_gradient_type(g.dtype, [&](auto tag) {
    using T = decltype(tag);
    out = cuda_evaluate_new(Leaf<T>(leaf_handle(g)) * compute_t<T>(s), g.device());
  });
  return out;
}

// Summed over g's leading dims and the dims where target has size 1 (the caller checked that they broadcast).
inline std::shared_ptr<TensorImpl> sum_to_shape(const std::shared_ptr<TensorImpl>& g, const Shape& target) {
  const int lead = g->shape.size() - target.size();
  Reduction rd;
  for (int i = 0; i < g->shape.size(); ++i) {
    if (i < lead || (target[i - lead] == 1 && g->shape[i] != 1)) {
      rd.mask |= 1u << i;
      rd.count *= g->shape[i];
    } else {
      rd.out.push_back(g->shape[i]);
    }
  }
  std::shared_ptr<TensorImpl> out;
  autograd::with_gradient_type(g->dtype, [&](auto tag) {
    using T = decltype(tag);
    const Leaf<T> leaf(leaf_handle(*g));
    out = rd.mask == 0 ? cuda_evaluate_new(leaf, g->device())  // (only size-1 dims differ)
                       : cuda_reduce<cuda::Reduce::Sum, T>(leaf, g->shape, rd, "backward", g->device()).impl_ptr();
  });
  return out->view_as(target, contiguous_strides(target), 0);
}

inline constexpr autograd::DeviceGradientOps kOps = {copy_elements, add_grads, first_non_finite, scaled_gradient,
                                                     sum_to_shape};
inline const bool registered = (autograd::device_gradient_ops() = &kOps, true);

}  // namespace cuda_gradients

}  // namespace kiln::detail
