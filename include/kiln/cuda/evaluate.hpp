#pragma once
// Elementwise expressions over CUDA tensors, evaluated on their device: `Tensor<float> y = a * b + 1` with CUDA
// tensors a and b runs one generated kernel (cuda/codegen.hpp) through the runtime (cuda/runtime.hpp) into a new
// CUDA tensor; sum, mean, amax and amin of such an expression, along any dims (argmax and argmin along one), run
// one reduction kernel (cuda/reduction.hpp) without materializing it, softmax / log_softmax of a CUDA tensor one
// kernel per call, and writes into CUDA tensors (copy_, fill_, +=, a slice's assignment, eval_all) one kernel
// through the destinations' strides. The core calls this from Tensor(expr) when the program is built with KILN_WITH_CUDA (a build-wide
// switch, as EIGEN_USE_GPU is for Eigen: every file of the program must see the same definition of the core's
// evaluation, so it cannot depend on which headers a file includes); without it, such an expression is refused
// by the CPU code it reaches. Each expression type keeps its kernels per loop variant, so a warm evaluation
// generates no source; the kernel cache and the context skip the compile and the module load.
//
// Autograd through these evaluations: cuda/autograd.hpp. Ops without a CUDA path are refused by the CPU code they
// reach (core/tensor_impl.hpp).
#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "kiln/cuda/descriptor.hpp"
#include "kiln/cuda/reduction.hpp"
#include "kiln/cuda/runtime.hpp"
#include "kiln/tensor/reduce.hpp"

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

// A new contiguous CUDA tensor of `shape` from the device's caching allocator.
template <Dtype T>
std::shared_ptr<TensorImpl> cuda_empty(const Shape& shape, Device device) {
  return TensorImpl::allocate(shape, scalar_type_of<T>(), "cuda", device);
}

// The kernel that make() generates for this call site's expression type and `key` (its loop variant), made once:
// the source is the same for every value of the expression's scalars.
template <class Tag, class Make>
const cuda::KernelSource& kernel_for(const std::string& key, Make&& make) {
  static std::mutex mutex;
  static std::map<std::string, cuda::KernelSource> kernels;
  std::lock_guard lock(mutex);
  auto it = kernels.find(key);
  if (it == kernels.end()) it = kernels.emplace(key, make()).first;
  return it->second;
}

// Blocks of 256 threads for n elements (grid-stride loops cover the rest).
inline cuda::LaunchConfig launch_for(int64_t n) {
  return {.grid = unsigned(std::clamp<int64_t>((n + 1023) / 1024, 1, 8192)), .block = 256};
}
// A reduction's, softmax's or split reduction's kernel k over n rows (outputs, or chunks): a thread per row (each
// walks a row: launch_for's four elements a thread would leave most of a GPU idle), or, for a kernel that runs in
// blocks of block_threads, a warp per row.
inline cuda::LaunchConfig launch_for_rows(const cuda::KernelSource& k, int64_t n) {
  const int64_t block = k.block_threads > 0 ? k.block_threads : 256, per_block = k.block_threads > 0 ? block / 32 : block;
  return {.grid = unsigned(std::clamp<int64_t>((n + per_block - 1) / per_block, 1, 65535)), .block = unsigned(block)};
}

// dst = expr through dst's strides, every leaf on dst's device: the expression's kernel, made once per variant.
template <class E>
void launch_into(const E& expr, TensorImpl& dst) {
  const cuda::KernelVariant variant = cuda::choose_variant(expr, dst.shape, dst.strides);
  const cuda::KernelSource& kernel =
      kernel_for<E>(variant.key(), [&] { return cuda::forward_kernel(expr, variant); });
  const auto words = cuda::detail::descriptor(kernel, dst.shape, {{dst.device_bytes(), dst.strides}}, {}, expr);
  cuda::DeviceContext::get(dst.device().index()).launch(kernel, words, launch_for(dst.numel()));
}

template <class E>
std::shared_ptr<TensorImpl> cuda_evaluate_new(const E& expr, Device device) {
  auto out = cuda_empty<typename E::value_type>(expr.shape(), device);
  if (out->numel() > 0) launch_into(expr, *out);
  return out;
}

// dst = expr (broadcast to dst's shape, through dst's strides). Values from another device (copy_ between the host
// and a device, as torch allows) are evaluated where their leaves are, moved, then written.
template <class E>
void cuda_assign(const E& expr, TensorImpl& dst) {
  using V = typename E::value_type;
  if (const std::optional<Device> from = leaves_device(expr); from && *from != dst.device()) {
    const Tensor<V> moved = Tensor<V>(evaluate_new(expr)).to(dst.device());
    if (dst.device().is_cpu()) return cpu::assign(Leaf<V>(moved.impl_ptr()), dst);
    return launch_into(Leaf<V>(moved.impl_ptr()), dst);
  }
  launch_into(expr, dst);
}

// eval_all on a device: outs[k] = e[k] in one kernel (cuda::forward_kernel_all), every value computed before any
// is stored; the outputs and every leaf on one device.
template <size_t K, class... E>
void cuda_assign_all(const std::array<std::shared_ptr<TensorImpl>, K>& dst, const E&... e) {
  const Device device = dst[0]->device();
  for (const auto& d : dst)
    check<std::invalid_argument>(d->device() == device, "eval_all: outputs on ", device.str(), " and ", d->device().str());
  const auto same_device = [&](const auto& x) {
    if (const std::optional<Device> from = leaves_device(x))
      check<std::invalid_argument>(*from == device, "eval_all: an expression on ", from->str(), " for outputs on ",
                                   device.str(), "; move it to one device first (.to(device))");
  };
  (same_device(e), ...);
  std::vector<Strides> strides;
  std::vector<cuda::ArrayRef> outs;
  for (const auto& d : dst) {
    strides.push_back(d->strides);
    outs.push_back({d->device_bytes(), d->strides});
  }
  const Shape& shape = dst[0]->shape;
  const cuda::KernelVariant variant = cuda::choose_variant(shape, strides, e...);
  const cuda::KernelSource& kernel = kernel_for<std::tuple<E...>>(
      variant.key(), [&] { return cuda::forward_kernel_all(variant, "kiln_eval_all", e...); });
  const auto words = cuda::forward_descriptor_all(kernel, shape, outs, e...);
  cuda::DeviceContext::get(device.index()).launch(kernel, words, launch_for(numel_of(shape)));
}

// sum, mean, amax, amin, argmax or argmin (R; the last two along one dim) of e over the dims rd reduces, into a new
// CUDA tensor of rd's shape.
template <cuda::Reduce R, Dtype Out, class E>
Tensor<Out> cuda_reduce(const E& e, const Shape& in, const Reduction& rd, const char* op, Device device) {
  static_assert(std::is_same_v<Out, typename cuda::detail::Accumulator<R, typename E::value_type>::Result>,
                "kiln: cuda_reduce's Out must be the dtype the kernel writes for this reduction of this expression");
  check_versions(e);
  auto out = TensorImpl::allocate(rd.out, scalar_type_of<Out>(), op, device);
  if (out->numel() == 0) return Tensor<Out>(out);
  const Dims dims = reduced_dims(in, rd);
  Shape kept;
  for (int i = 0; i < in.size(); ++i)
    if (!(rd.mask >> i & 1u)) kept.push_back(in[i]);
  const cuda::ReductionVariant variant = cuda::reduction_variant(in, dims, e);
  cuda::DeviceContext& context = cuda::DeviceContext::get(device.index());
  const cuda::ArrayRef to{out->device_bytes(), contiguous_strides(kept)};
  if (const int64_t splits = cuda::reduction_splits(out->numel(), rd.count); splits > 1) {
    // Few outputs, many elements each: partial results per chunk (8 bytes each: an accumulator, an index), folded;
    // a warp per chunk, then per output.
    struct Partial;
    struct Combine;
    const auto make = [&] { return cuda::split_reduction_kernels<R>(e, variant); };
    const cuda::KernelSource& partial = kernel_for<std::pair<E, Partial>>(cat(int(R), variant.key()), [&] { return make().partial; });
    const cuda::KernelSource& combine = kernel_for<std::pair<E, Combine>>(cat(int(R), variant.key()), [&] { return make().combine; });
    const int64_t items = out->numel() * splits;
    const auto scratch = cuda_empty<int64_t>({2, items}, device);
    using cuda::detail::word_of;
    const auto words = cuda::reduction_descriptor(
        e, combine, in, dims, to,
        {word_of(splits), word_of(static_cast<const void*>(scratch->device_bytes())),
         word_of(static_cast<const void*>(scratch->device_bytes() + items * 8))});
    context.launch(partial, words, launch_for_rows(partial, items));
    context.launch(combine, words, launch_for_rows(combine, out->numel()));
    return Tensor<Out>(out);
  }
  struct Tag;
  const cuda::KernelSource& kernel =
      kernel_for<std::pair<E, Tag>>(cat(int(R), variant.key()), [&] { return cuda::reduction_kernel<R>(e, variant); });
  context.launch(kernel, cuda::reduction_descriptor(e, kernel, in, dims, to), launch_for_rows(kernel, out->numel()));
  return Tensor<Out>(out);
}

// softmax or log_softmax of a CUDA tensor along dim, as the CPU's (a row whose max is not finite gives NaN).
template <bool kLog, Dtype T>
Tensor<T> cuda_softmax(const Tensor<T>& in, int dim, const char* op) {
  auto out = TensorImpl::allocate(in.shape(), scalar_type_of<T>(), op, in.device());
  if (out->numel() == 0) return Tensor<T>(out);
  const Leaf<T> e(in.impl_ptr());
  const cuda::ReductionVariant variant = cuda::reduction_variant(in.shape(), {dim}, e);
  struct Tag;
  const cuda::KernelSource& kernel =
      kernel_for<std::pair<T, Tag>>(cat(kLog, variant.key()), [&] { return cuda::softmax_kernel<kLog>(e, variant); });
  const auto words = cuda::reduction_descriptor(e, kernel, in.shape(), {dim}, {out->device_bytes(), out->strides});
  cuda::DeviceContext::get(in.device().index()).launch(kernel, words, launch_for_rows(kernel, out->numel() / in.size(dim)));
  return Tensor<T>(out);
}

}  // namespace kiln::detail

// cumsum's and topk's line kernels (they use kernel_for and launch_for above).
#include "kiln/cuda/lines.hpp"
