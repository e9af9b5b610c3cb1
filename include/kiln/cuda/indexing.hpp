#pragma once
// gather, index_select, embedding and scatter_add of CUDA tensors on their device: the host side of the index
// kernels (cuda/index_kernels.hpp). tensor/gather.hpp calls these in programs built with KILN_WITH_CUDA (<kiln/kiln.hpp>
// includes this header there) after its own checks of shapes and devices, so the CPU and CUDA paths refuse the same
// inputs with the same messages. One kernel runs over the index's elements, through every operand's strides (a
// transposed self or an expanded index is not copied first).
//
// An index out of range is never read or written: the kernel records it in a two-word error block in device memory
// (zeroed before the launch) and skips it; the host waits for the kernel, reads the block and throws the CPU path's
// message. That wait is one synchronization per call, the price of the CPU's exact error until kiln has a
// device-side assert.
#include <algorithm>
#include <type_traits>
#include <utility>

#include "kiln/cuda/evaluate.hpp"
#include "kiln/cuda/index_kernels.hpp"

namespace kiln::detail {

namespace cuda_index {

enum class Kind { Gather, ScatterAdd };

// out and src at the index's coordinates, the checked index along dim of `out` (a scatter) or `src` (a gather):
// the kernel for (T, rank, dim, 32- or 64-bit offsets), made once, launched on out's device; throws the CPU path's
// message naming `op` for an index out of range.
template <Kind K, Dtype T>
void launch(const TensorImpl& out, const TensorImpl& src, const TensorImpl& index, int dim, const char* op) {
  if (index.numel() == 0) return;
  const int64_t limit = (K == Kind::ScatterAdd ? out : src).shape[dim];
  const int rank = index.shape.size();
  int64_t reach = index.numel();
  for (const TensorImpl* t : {&out, &src, &index})
    reach = std::max(reach, cuda::detail::max_offset(t->shape, t->strides));
  const bool index32 = cuda::detail::fits_index32(reach);
  struct Tag;
  const cuda::KernelSource& kernel = kernel_for<std::pair<T, Tag>>(cat(rank, "_", dim, index32 ? "_i32" : "_i64"), [&] {
    if constexpr (K == Kind::ScatterAdd) return cuda::scatter_add_kernel<T>(rank, dim, index32);
    else return cuda::gather_kernel<T>(rank, dim, index32);
  });
  const Device device = out.device();
  cuda::DeviceContext& context = cuda::DeviceContext::get(device.index());
  const auto error_block = cuda_empty<int64_t>({2}, device);
  auto* error = reinterpret_cast<int64_t*>(error_block->device_bytes());
  context.fill_zero(error, 2 * sizeof(int64_t));
  const auto words = cuda::index_descriptor(kernel, index.shape, {out.device_bytes(), out.strides},
                                            {src.device_bytes(), src.strides}, {index.device_bytes(), index.strides},
                                            limit, error);
  context.launch(kernel, words, launch_for(index.numel()));
  context.synchronize();
  int64_t host[2];
  context.copy_to_host(host, error, sizeof host);
  cuda::check_index_error(host, op, dim, limit);
}

}  // namespace cuda_index

// A new CUDA tensor of index's shape: self gathered along dim (self and index on one device, shapes checked).
template <Dtype T>
Tensor<T> cuda_gather(const Tensor<T>& self, int dim, const Tensor<int64_t>& index, const char* op) {
  const Tensor<T> out(cuda_empty<T>(index.shape(), self.device()));
  cuda_index::launch<cuda_index::Kind::Gather, T>(out.impl(), self.impl(), index.impl(), dim, op);
  return out;
}

// out[c with c[dim] = index[c]] += src[c] on out's device, atomically (indices may repeat).
template <Dtype T>
void cuda_scatter_add_into(const Tensor<T>& out, int dim, const Tensor<int64_t>& index, const Tensor<T>& src,
                           const char* op) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                std::is_same_v<T, int64_t>)
    cuda_index::launch<cuda_index::Kind::ScatterAdd, T>(out.impl(), src.impl(), index.impl(), dim, op);
  else
    throw std::invalid_argument(cat(op, ": a ", dtype_name(scalar_type_of<T>()), " CUDA tensor of shape ", out.shape(),
                                    ": scatter_add on CUDA takes float32, float64, int32 and int64 tensors (the "
                                    "device's atomic adds)"));
}

}  // namespace kiln::detail
