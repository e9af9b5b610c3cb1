#pragma once
// TensorImpl: what a Tensor handle points to. Shared storage plus a layout (shape, strides in
// elements, offset in elements) and the run-time dtype. Tensor<T>, AnyTensor and the leaves of
// expressions all hold a std::shared_ptr<TensorImpl>.
#include <memory>

#include "kiln/core/config.hpp"
#include "kiln/core/dtype.hpp"
#include "kiln/core/shape.hpp"
#include "kiln/core/storage.hpp"

namespace kiln {

namespace autograd {
struct AutogradMeta;
}

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;
  ScalarType dtype = ScalarType::Float;
  // requires_grad, .grad, grad_fn and hooks; null for a tensor autograd never saw.
  std::shared_ptr<autograd::AutogradMeta> autograd;

  int64_t numel() const { return numel_of(shape); }
  Device device() const { return storage ? storage->device() : Device(); }
  // The address of element 0 for CPU code; a CUDA tensor is refused here, so no CPU kernel ever reads device
  // memory (an op without a CUDA path fails with this message instead).
  char* data_bytes() const {
    if (storage->device().is_cuda()) [[unlikely]]
      refuse_device_data();
    return device_bytes();
  }
  // The address of element 0 wherever the memory is (a device address for a CUDA tensor: for CUDA kernels).
  char* device_bytes() const {
    return static_cast<char*>(storage->data()) + offset * int64_t(element_size(dtype));
  }
  bool is_contiguous() const {
    if (numel() == 0) return true;  // as PyTorch: no element is out of place
    int64_t expected = 1;
    for (int i = shape.size() - 1; i >= 0; --i) {
      if (shape[i] == 1) continue;
      if (strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
  uint64_t version() const { return storage->version(); }
  [[noreturn]] void refuse_device_data() const {
    throw std::runtime_error(detail::cat("kiln: a ", dtype_name(dtype), " tensor of shape ", shape, " on ", device().str(),
                                         " reached code that runs on the CPU: this op has no CUDA path yet (copy the "
                                         "tensor with .cpu() first)"));
  }

  // A fresh contiguous tensor of this shape and dtype (uninitialized), in host memory or on a CUDA device (from its
  // caching allocator, through the CUDA backend's hooks: core/device.hpp).
  KILN_DECL static std::shared_ptr<TensorImpl> allocate(const Shape& shape, ScalarType dtype, const char* op,
                                                        Device device = kCPU);

  // A new impl sharing this storage with another layout.
  KILN_DECL std::shared_ptr<TensorImpl> view_as(const Shape& new_shape, const Strides& new_strides,
                                                int64_t new_offset) const;
};

#if KILN_HEADER_DEFINITIONS
KILN_DECL std::shared_ptr<TensorImpl> TensorImpl::allocate(const Shape& shape, ScalarType dtype, const char* op,
                                                           Device device) {
  const int64_t n = checked_numel(shape, op);
  const size_t esize = element_size(dtype);
  if (n > int64_t(std::numeric_limits<int64_t>::max() / int64_t(esize)))
    throw OutOfMemoryError(detail::cat(op, ": shape ", shape, " needs more bytes than int64 holds"));
  const size_t bytes = size_t(n) * esize;
  auto impl = std::make_shared<TensorImpl>();
  if (device.is_cpu()) {
    impl->storage = std::make_shared<Storage>(bytes);
  } else {
    const detail::CudaHooks& cuda = detail::require_cuda(op);
    const int index = device.index();
    void* p = bytes ? cuda.allocate(index, bytes) : nullptr;
    impl->storage = std::make_shared<Storage>(p, bytes, [free = cuda.free, index](void* q) { if (q) free(index, q); }, device);
  }
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return impl;
}

KILN_DECL std::shared_ptr<TensorImpl> TensorImpl::view_as(const Shape& new_shape, const Strides& new_strides,
                                                          int64_t new_offset) const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage;
  impl->shape = new_shape;
  impl->strides = new_strides;
  impl->offset = new_offset;
  impl->dtype = dtype;
  return impl;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln
