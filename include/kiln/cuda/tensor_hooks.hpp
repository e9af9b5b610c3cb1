#pragma once
// Registers the CUDA backend's memory operations with the core (core/device.hpp) in every program that includes
// <kiln/cuda.hpp>, so Tensor::to(Device), cuda() and cpu() (tensor/device_copy.hpp) work there: a CUDA tensor's
// memory comes from its device's caching allocator and copies go through the driver (cuda/runtime.hpp).
#include "kiln/core/device.hpp"
#include "kiln/cuda/runtime.hpp"

namespace kiln::cuda::detail {

// From the bin of the thread's current stream (cuda/stream.hpp): that stream may reuse the block at once when it is freed.
inline void* allocate_tensor_memory(int device, size_t bytes) {
  return DeviceContext::get(device).allocator().allocate(bytes, current_stream_of(device));
}
inline void free_tensor_memory(int device, void* p) { DeviceContext::get(device).allocator().free(p); }
// Host to device, or device to host after the device's work is done; Tensor::to goes between two devices through
// the host.
inline void copy_tensor_memory(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  check<std::logic_error>(src_device.is_cpu() != dst_device.is_cpu(), "kiln::cuda: a copy from ", src_device.str(),
                          " to ", dst_device.str(), " (one side must be the host)");
  if (src_device.is_cpu()) {
    DeviceContext::get(dst_device.index()).copy_to_device(dst, src, bytes);
  } else {
    DeviceContext& c = DeviceContext::get(src_device.index());
    c.synchronize();
    c.copy_to_host(dst, src, bytes);
  }
}

inline void zero_tensor_memory(void* p, Device device, size_t bytes) { DeviceContext::get(device.index()).fill_zero(p, bytes); }

inline constexpr kiln::detail::CudaHooks kTensorHooks = {allocate_tensor_memory, free_tensor_memory, copy_tensor_memory,
                                                         zero_tensor_memory};
inline const bool tensor_hooks_registered = (kiln::detail::cuda_hooks() = &kTensorHooks, true);

}  // namespace kiln::cuda::detail
