#pragma once
// Tensor<T>::to(Device), cuda() and cpu() (libtorch's): copies between host memory and CUDA devices through the
// CUDA backend's hooks (core/device.hpp), so this header carries no CUDA code; without <kiln/cuda.hpp> in the
// program a CUDA device is refused with the reason. The copy is contiguous. A CUDA view (permuted, sliced) comes
// to the host as its storage's whole span and is laid out there. The copy is differentiable: its gradient goes back
// to the source's device.
#include <memory>

#include "kiln/autograd/engine.hpp"
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

namespace autograd {
// The backward of a copy between devices: the gradient goes back to the source's device (torch's ToCopyBackward).
template <Dtype T>
struct ToDeviceBackward : Node {
  explicit ToDeviceBackward(const ImplPtr& input) : from_(input->device()) { next_edges.push_back(gradient_edge(input)); }
  std::string name() const override { return "ToCopyBackward"; }
  GradList apply(GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    return {Tensor<T>(grads[0]).to(from_).impl_ptr()};
  }

 private:
  Device from_;
};
}  // namespace autograd

template <Dtype T>
Tensor<T> Tensor<T>::to(Device device) const {
  const TensorImpl& self = *checked();
  const Device from = self.device();
  if (device == from) return *this;
  if (GradMode::is_enabled() && requires_grad()) {
    Tensor out = detach().to(device);
    autograd::meta_of(out.impl_ptr()).grad_fn = std::make_shared<autograd::ToDeviceBackward<T>>(impl_ptr());
    return out;
  }
  const std::string what = kiln::detail::cat("Tensor::to(", device.str(), ")");
  const detail::CudaHooks& cuda = detail::require_cuda(what.c_str());
  if (from.is_cpu()) {
    const Tensor c = contiguous();
    const Tensor out(TensorImpl::allocate(c.shape(), scalar_type_of<T>(), what.c_str(), device));
    if (const size_t bytes = size_t(c.numel()) * sizeof(T)) cuda.copy(out.impl().device_bytes(), device, c.data_ptr(), kCPU, bytes);
    return out;
  }
  const size_t span = self.storage->nbytes();
  auto host = std::make_shared<Storage>(span);
  if (span) cuda.copy(host->data(), kCPU, self.storage->data(), from, span);
  const Tensor on_host = detail::over_storage<T>(std::move(host), self.shape, self.strides, self.offset).contiguous();
  return device.is_cpu() ? on_host : on_host.to(device);
}

}  // namespace kiln
