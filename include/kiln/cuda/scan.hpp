#pragma once
// cumsum of CUDA tensors (tensor/reduce.hpp's cumsum calls cuda_cumsum in builds with KILN_WITH_CUDA and includes
// this header at its end): one thread per line along the dim of a contiguous [outer, n, inner] input walks its n
// elements in order and accumulates as the CPU does (double for floating types, int64 for integers and bool), so
// every running sum is the CPU's.
//
// Descriptor: lines (outer * inner) | src | dst | n | inner.
#include "kiln/cuda/evaluate.hpp"
#include "kiln/tensor/reduce.hpp"

namespace kiln::cuda {

template <Dtype T, Dtype Out>
KernelSource cumsum_kernel(bool index32, std::string entry = "kiln_cumsum") {
  using detail::cat;
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = 1;
  k.outputs = 1;
  k.variant = {false, 0, index32};
  const std::string acc = is_floating_v<T> ? "double" : "long long";
  const std::string body = cat(
      "    const kiln_index first = i / d.inner * d.n * d.inner + i % d.inner;\n",
      "    ", acc, " acc = 0;\n",
      "    for (kiln_index t = 0; t < (kiln_index)d.n; ++t) {\n",
      "      const kiln_index at = first + t * d.inner;\n",
      "      acc += (", acc, ")", detail::load_element<T>("d.src", "at"), ";\n",
      "      ", detail::store_element<Out>("d.dst", "at", cat("(", detail::compute_name<Out>(), ")acc")), "\n",
      "    }\n");
  detail::assemble(k, {{"long long lines", 1}, {"const void* src", 1}, {"void* dst", 1}, {"long long n", 1}, {"long long inner", 1}},
                   detail::grid_stride_loop("i", "d.lines", body));
  return k;
}

}  // namespace kiln::cuda

namespace kiln::detail {

// out = the running sums of in along the middle of [outer, n, inner] (both contiguous, on one device).
template <Dtype T, Dtype Out>
void cuda_cumsum(const Tensor<T>& in, const Tensor<Out>& out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t lines = outer * inner;
  if (lines == 0 || n == 0) return;
  const bool index32 = cuda::detail::fits_index32(in.numel());
  struct Tag;
  const cuda::KernelSource& kernel = kernel_for<std::tuple<T, Out, Tag>>(
      index32 ? "i32" : "i64", [&] { return cuda::cumsum_kernel<T, Out>(index32); });
  using cuda::detail::word_of;
  const auto words = cuda::detail::checked_block(
      {word_of(lines), word_of(static_cast<const void*>(in.impl().device_bytes())),
       word_of(static_cast<const void*>(out.impl().device_bytes())), word_of(n), word_of(inner)},
      kernel);
  cuda::DeviceContext::get(in.device().index()).launch(kernel, words, launch_for(lines));
}

}  // namespace kiln::detail
