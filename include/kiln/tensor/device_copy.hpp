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
// A CUDA tensor's elements on the host: its storage's whole span copied, with the tensor's own layout (shape,
// strides, offset, dtype). Not a template, so Tensor::to and printing (tensor/print.hpp) share one compiled copy.
KILN_DECL std::shared_ptr<TensorImpl> host_view_of(const TensorImpl& self, const char* what);

#if KILN_HEADER_DEFINITIONS
KILN_DECL std::shared_ptr<TensorImpl> host_view_of(const TensorImpl& self, const char* what) {
  const CudaHooks& cuda = require_cuda(what);
  const size_t span = self.storage->nbytes();
  auto host = std::make_shared<Storage>(span);
  if (span) cuda.copy(host->data(), kCPU, self.storage->data(), self.device(), span);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(host);
  impl->shape = self.shape;
  impl->strides = self.strides;
  impl->offset = self.offset;
  impl->dtype = self.dtype;
  return impl;
}
#endif
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
  const Tensor on_host = Tensor(detail::host_view_of(self, what.c_str())).contiguous();
  return device.is_cpu() ? on_host : on_host.to(device);
}

}  // namespace kiln
