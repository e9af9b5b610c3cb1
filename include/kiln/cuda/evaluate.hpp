#pragma once
// Elementwise expressions over CUDA tensors, evaluated on their device: `Tensor<float> y = a * b + 1` with CUDA
// tensors a and b runs one generated kernel (cuda/codegen.hpp) through the runtime (cuda/runtime.hpp) into a new
// CUDA tensor. The core calls this from Tensor(expr) when the program is built with KILN_WITH_CUDA (a build-wide
// switch, as EIGEN_USE_GPU is for Eigen: every file of the program must see the same definition of the core's
// evaluation, so it cannot depend on which headers a file includes); without it, such an expression is refused
// by the CPU code it reaches. Each expression type keeps its kernels per loop variant, so a warm evaluation
// generates no source; the kernel cache and the context skip the compile and the module load.
//
// Not yet on CUDA: autograd through these evaluations (refused with the reason), reductions, matmul and the rest
// of the ops (refused by the CPU code they reach: core/tensor_impl.hpp).
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include "kiln/cuda/descriptor.hpp"
#include "kiln/cuda/runtime.hpp"

namespace kiln::detail {

// The device of an expression's leaves (none for an expression of scalars); leaves on two devices are an error.
template <class E>
std::optional<Device> leaves_device(const E& expr) {
  std::optional<Device> device;
  for_each_leaf(expr, [&](const auto& leaf) {
    const Device d = leaf.impl->device();
    check<std::invalid_argument>(!device || *device == d, "kiln: an expression mixes tensors on ", device ? device->str() : "",
                                 " and ", d.str(), "; move them to one device first (.to(device))");
    device = d;
  });
  return device;
}

template <class E>
std::shared_ptr<TensorImpl> cuda_evaluate_new(const E& expr, Device device) {
  using T = typename E::value_type;
  cuda::DeviceContext& context = cuda::DeviceContext::get(device.index());
  const Shape shape = expr.shape();
  const size_t bytes = size_t(numel_of(shape)) * element_size(scalar_type_of<T>());
  void* memory = bytes ? context.allocator().allocate(bytes) : nullptr;
  auto out = std::make_shared<TensorImpl>();
  out->storage = std::make_shared<Storage>(memory, bytes, [&context](void* p) { if (p) context.allocator().free(p); }, device);
  out->shape = shape;
  out->strides = contiguous_strides(shape);
  out->dtype = scalar_type_of<T>();
  if (bytes == 0) return out;
  const cuda::KernelVariant variant = cuda::choose_variant(expr, shape, out->strides);
  // This expression type's kernels, by variant (the source is the same for every value of its scalars).
  static std::mutex mutex;
  static std::map<std::string, cuda::KernelSource> kernels;
  const cuda::KernelSource* kernel;
  {
    std::lock_guard lock(mutex);
    auto it = kernels.find(variant.key());
    if (it == kernels.end()) it = kernels.emplace(variant.key(), cuda::forward_kernel(expr, variant)).first;
    kernel = &it->second;
  }
  const auto words = cuda::detail::descriptor(*kernel, shape, {{out->device_bytes(), out->strides}}, {}, expr);
  const unsigned grid = unsigned(std::clamp<int64_t>((numel_of(shape) + 1023) / 1024, 1, 8192));
  context.launch(*kernel, words, {.grid = grid, .block = 256});
  return out;
}

}  // namespace kiln::detail
