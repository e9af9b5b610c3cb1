#pragma once
// Kernels that walk each line along a dim of a contiguous [outer, n, inner] tensor, one thread per line
// (tensor/reduce.hpp calls them in builds with KILN_WITH_CUDA; cuda/evaluate.hpp, which defines the rest of
// reduce.hpp's device paths, includes this header at its end):
// - cumsum: the n elements in order, accumulated as the CPU does (double for floating types, int64 for integers and
//   bool), so every running sum is the CPU's.
//   Descriptor: lines (outer * inner) | src | dst | n | inner.
// - topk: k selections, each the best element ordered after the previous pick in the CPU's order (larger first, or
//   smaller; NaN before every number for the largest and after for the smallest; ties by the lower index), so the
//   values and indices are the CPU's. O(n k) per line: fine for a vocabulary's top 40, slow for a long sort.
//   Descriptor: lines | src | values | indices | n | inner | k | largest.
#include "kiln/cuda/evaluate.hpp"
#include "kiln/tensor/reduce.hpp"

namespace kiln::cuda {

namespace detail {
// A kernel with a thread per line i: its descriptor is lines | src, then `fields`.
inline KernelSource line_kernel(std::string entry, int outputs, bool index32, std::vector<Field> fields,
                                const std::string& body) {
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = 1;
  k.outputs = outputs;
  k.variant = {false, 0, index32};
  fields.insert(fields.begin(), {{"long long lines", 1}, {"const void* src", 1}});
  assemble(k, fields, grid_stride_loop("i", "d.lines", body));
  return k;
}
}  // namespace detail

template <Dtype T, Dtype Out>
KernelSource cumsum_kernel(bool index32, std::string entry = "kiln_cumsum") {
  using detail::cat;
  const std::string acc = is_floating_v<T> ? "double" : "long long";
  const std::string body = cat(
      "    const kiln_index first = i / d.inner * d.n * d.inner + i % d.inner;\n",
      "    ", acc, " acc = 0;\n",
      "    for (kiln_index t = 0; t < (kiln_index)d.n; ++t) {\n",
      "      const kiln_index at = first + t * d.inner;\n",
      "      acc += (", acc, ")", detail::load_element<T>("d.src", "at"), ";\n",
      "      ", detail::store_element<Out>("d.dst", "at", cat("(", detail::compute_name<Out>(), ")acc")), "\n",
      "    }\n");
  return detail::line_kernel(std::move(entry), 1, index32, {{"void* dst", 1}, {"long long n", 1}, {"long long inner", 1}},
                             body);
}

template <Dtype T>
KernelSource topk_kernel(bool index32, std::string entry = "kiln_topk") {
  using detail::cat;
  const std::string V(detail::compute_name<T>());
  const std::string body = cat(
      "    const kiln_index o = i / d.inner, c = i % d.inner, first = o * d.n * d.inner + c;\n",
      "    const bool largest = d.largest != 0;\n",
      "    // Whether (a, ia) comes before (b, ib) in the CPU's order.\n",
      "    auto before = [&](", V, " a, long long ia, ", V, " b, long long ib) {\n",
      "      const bool na = a != a, nb = b != b;\n",
      "      if (na || nb) return na && nb ? ia < ib : largest ? na : nb;\n",
      "      if (a != b) return largest ? a > b : a < b;\n",
      "      return ia < ib;\n",
      "    };\n",
      "    ", V, " pick = 0;\n",
      "    long long picked = -1;\n",
      "    for (long long j = 0; j < d.k; ++j) {\n",
      "      ", V, " best = 0;\n",
      "      long long at = -1;\n",
      "      for (long long t = 0; t < d.n; ++t) {\n",
      "        const ", V, " v = ", detail::load_element<T>("d.src", "first + t * (kiln_index)d.inner"), ";\n",
      "        if (picked >= 0 && !before(pick, picked, v, t)) continue;  // taken already\n",
      "        if (at < 0 || before(v, t, best, at)) { best = v; at = t; }\n",
      "      }\n",
      "      const kiln_index out = o * d.k * d.inner + j * d.inner + c;\n",
      "      ", detail::store_element<T>("d.values", "out", "best"), "\n",
      "      ((long long*)d.indices)[out] = at;\n",
      "      pick = best;\n",
      "      picked = at;\n",
      "    }\n");
  return detail::line_kernel(std::move(entry), 2, index32,
                             {{"void* values", 1}, {"void* indices", 1}, {"long long n", 1}, {"long long inner", 1},
                              {"long long k", 1}, {"long long largest", 1}},
                             body);
}

}  // namespace kiln::cuda

namespace kiln::detail {

// Launches a line kernel over `lines` lines of `in` on its device: the block is lines | src | rest.
template <Dtype T>
void launch_lines(const cuda::KernelSource& kernel, const Tensor<T>& in, int64_t lines, const std::vector<uint64_t>& rest) {
  using cuda::detail::word_of;
  std::vector<uint64_t> words = {word_of(lines), word_of(static_cast<const void*>(in.impl().device_bytes()))};
  words.insert(words.end(), rest.begin(), rest.end());
  cuda::DeviceContext::get(in.device().index()).launch(kernel, cuda::detail::checked_block(std::move(words), kernel),
                                                       launch_for(lines));
}

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
  launch_lines(kernel, in, lines, {word_of(static_cast<const void*>(out.impl().device_bytes())), word_of(n), word_of(inner)});
}

// values and indices [outer, k, inner] of the k largest (or smallest) of each line of in (contiguous; all on one
// device).
template <Dtype T>
void cuda_topk(const Tensor<T>& in, const Tensor<T>& values, const Tensor<int64_t>& indices, int64_t outer, int64_t n,
               int64_t inner, int64_t k, bool largest) {
  const int64_t lines = outer * inner;
  if (lines == 0 || k == 0) return;
  const bool index32 = cuda::detail::fits_index32(in.numel());
  struct Tag;
  const cuda::KernelSource& kernel = kernel_for<std::pair<T, Tag>>(index32 ? "i32" : "i64",
                                                                   [&] { return cuda::topk_kernel<T>(index32); });
  using cuda::detail::word_of;
  launch_lines(kernel, in, lines,
               {word_of(static_cast<const void*>(values.impl().device_bytes())),
                word_of(static_cast<const void*>(indices.impl().device_bytes())), word_of(n), word_of(inner), word_of(k),
                word_of(int64_t(largest))});
}

}  // namespace kiln::detail
