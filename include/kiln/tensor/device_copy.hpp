#pragma once
// Tensor<T>::to(Device), cuda() and cpu() (libtorch's): copies between host memory and CUDA devices through the
// CUDA backend's hooks (core/device.hpp), so this header carries no CUDA code; without <kiln/cuda.hpp> in the
// program a CUDA device is refused with the reason. The copy is contiguous. A CUDA view (permuted, sliced) comes
// to the host as its storage's whole span and is laid out there. Gradients do not cross devices yet: a tensor
// that requires grad is refused in grad mode, never silently detached.
#include <memory>

#include "kiln/autograd/grad_mode.hpp"
#include "kiln/tensor/tensor.hpp"

namespace kiln {

namespace detail {
// A tensor of `shape` and `strides` from `offset` over `storage`.
template <Dtype T>
Tensor<T> over_storage(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = scalar_type_of<T>();
  return Tensor<T>(impl);
}
}  // namespace detail

template <Dtype T>
Tensor<T> Tensor<T>::to(Device device) const {
  const TensorImpl& self = *checked();
  const Device from = self.device();
  if (device == from) return *this;
  const std::string what = kiln::detail::cat("Tensor::to(", device.str(), ")");
  check<std::logic_error>(!(GradMode::is_enabled() && requires_grad()), what, ": the ", from.str(),
                          " tensor requires grad, and gradients do not cross devices yet (detach() it, or copy under "
                          "NoGradGuard)");
  const detail::CudaHooks& cuda = detail::require_cuda(what.c_str());
  if (from.is_cpu()) {
    const Tensor c = contiguous();
    const size_t bytes = size_t(c.numel()) * sizeof(T);
    const int index = device.index();
    void* p = bytes ? cuda.allocate(index, bytes) : nullptr;
    auto storage = std::make_shared<Storage>(p, bytes, [free = cuda.free, index](void* q) { if (q) free(index, q); }, device);
    if (bytes) cuda.copy(p, device, c.data_ptr(), kCPU, bytes);
    return detail::over_storage<T>(std::move(storage), c.shape(), contiguous_strides(c.shape()), 0);
  }
  const size_t span = self.storage->nbytes();
  auto host = std::make_shared<Storage>(span);
  if (span) cuda.copy(host->data(), kCPU, self.storage->data(), from, span);
  const Tensor on_host = detail::over_storage<T>(std::move(host), self.shape, self.strides, self.offset).contiguous();
  return device.is_cpu() ? on_host : on_host.to(device);
}

}  // namespace kiln
