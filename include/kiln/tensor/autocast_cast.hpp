#pragma once
// The cast an autocast op applies to a float operand (core/autocast.hpp): t.to<H>(), except that a weight (a
// float leaf that requires grad, in grad mode, inside a region) is cast once per outermost region and reused, as
// PyTorch's autocast caches its weights' casts: a layer applied several times in one forward pass rounds its
// weight once, and the gradients of all its uses flow through the one cast node.
#include "kiln/autograd/grad_mode.hpp"
#include "kiln/autograd/meta.hpp"
#include "kiln/core/autocast.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln::autocast {

// The device type an op on x runs on (its first leaf's; the CPU for an expression of scalars), whose autocast
// region applies to it.
template <Operand X>
DeviceType device_type_of(const X& x) {
  if constexpr (TensorHandle<X>) {
    return x.device().type();
  } else {
    DeviceType type = kCPU;
    bool found = false;
    for_each_leaf(x, [&](const auto& leaf) {
      if (!found) type = leaf.impl->device().type();
      found = true;
    });
    return type;
  }
}
// Whether an autocast region is on for an op on x.
template <Operand X>
bool applies_to(const X& x) {
  return is_enabled(device_type_of(x));
}

template <Dtype H, Operand X>
Tensor<H> cast(const X& x) {
  if constexpr (std::is_same_v<X, Tensor<float>>) {
    const auto& impl = x.impl_ptr();
    if (detail::nesting() > 0 && GradMode::is_enabled() && x.requires_grad() && x.is_leaf()) {
      const detail::CastKey key{impl.get(), scalar_type_of<H>()};
      auto& cache = detail::cast_cache();
      const auto hit = cache.find(key);
      // Valid while it is the same weight, unchanged, and its cast node was not freed by a backward.
      if (hit != cache.end() && hit->second.source.lock() == impl && hit->second.version == impl->version() &&
          !(hit->second.cast->autograd && hit->second.cast->autograd->grad_fn &&
            hit->second.cast->autograd->grad_fn->released))
        return Tensor<H>(hit->second.cast);
      Tensor<H> cast = x.template to<H>();
      cache[key] = CachedCast{impl, impl->version(), cast.impl_ptr()};
      return cast;
    }
  }
  return Tensor<H>(x.template to<H>());
}

}  // namespace kiln::autocast
