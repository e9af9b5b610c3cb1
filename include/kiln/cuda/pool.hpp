#pragma once
// max_pool2d and avg_pool2d (adaptive_avg_pool2d too) of CUDA tensors and their backward, as kernels per dtype
// (nn/pool.hpp's CPU loops; it calls cuda_pool in builds with KILN_WITH_CUDA and includes this header at its end).
// The forward kernels run over the output's elements: max keeps the CPU's rule (the first tap, then a greater value
// or the first NaN, which stays) and the flat index of the max in its plane. The backward kernels gather over the
// input's elements, each summing the gradients of the windows that reach it (max: those whose argmax it is; avg: each
// share over its divisor), in the windows' order: no atomics, the same sums every run. The geometry is descriptor
// words, so one kernel per dtype serves every shape.
//
// Descriptor: n | src | index (max: the argmax, int64, written by the forward and read by its backward; avg: null) |
// dst | h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw, count_pad, adaptive.
#include <array>

#include "kiln/cuda/evaluate.hpp"
#include "kiln/nn/pool.hpp"

namespace kiln::cuda {

inline constexpr int kPoolGeometryWords = 14;

namespace detail {

inline KernelSource pool_kernel(std::string entry, bool index32, const std::string& body) {
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = 1;
  k.outputs = 1;
  k.variant = {false, 0, index32};
  const std::string geometry =
      "    const kiln_index h = d.g[0], w = d.g[1], ho = d.g[2], wo = d.g[3], kh = d.g[4], kw = d.g[5], sh = d.g[6],\n"
      "        sw = d.g[7], ph = d.g[8], pw = d.g[9], dh = d.g[10], dw = d.g[11];\n"
      "    const bool count_pad = d.g[12] != 0, adaptive = d.g[13] != 0;\n"
      "    (void)dh; (void)dw; (void)count_pad; (void)adaptive;\n";
  assemble(k,
           {{"long long n", 1},
            {"const void* src", 1},
            {"void* index", 1},
            {"void* dst", 1},
            {cat("long long g[", kPoolGeometryWords, "]"), kPoolGeometryWords}},
           grid_stride_loop("i", "d.n", geometry + body));
  return k;
}

// The averaging window of output position `o` along one axis, [lo, hi) before clipping to the input, as
// PoolWindows::span (avg pooling has no dilation).
inline std::string avg_span(const char* o, const char* lo, const char* hi, const char* in, const char* out,
                            const char* k, const char* s, const char* p) {
  return cat("      const kiln_index ", lo, " = adaptive ? ", o, " * ", in, " / ", out, " : ", o, " * ", s, " - ", p, ";\n",
             "      const kiln_index ", hi, " = adaptive ? ((", o, " + 1) * ", in, " + ", out, " - 1) / ", out, " : ", lo,
             " + ", k, ";\n");
}

// The divisor of the window [r0, r1) x [c0, c1): the padded window with count_pad (fixed windows), else the part
// inside the input, as nn/pool.hpp's for_each_window.
inline const char* avg_divisor() {
  return "      const kiln_index cr0 = r0 < 0 ? 0 : r0, cr1 = r1 < h ? r1 : h, cc0 = c0 < 0 ? 0 : c0, cc1 = c1 < w ? c1 : w;\n"
         "      const kiln_index pr1 = r1 < h + ph ? r1 : h + ph, pc1 = c1 < w + pw ? c1 : w + pw;\n"
         "      const kiln_index full = (r1 - r0) * (c1 - c0), padded = (pr1 - r0) * (pc1 - c0);\n"
         "      const kiln_index divisor = count_pad && !adaptive ? (padded < full ? padded : full)\n"
         "                                                        : (cr1 - cr0) * (cc1 - cc0);\n"
         "      (void)cr0; (void)cr1; (void)cc0; (void)cc1;\n";
}

}  // namespace detail

// Over the output's elements ([N, C, Ho, Wo]): dst = the max of the window of src ([N, C, H, W]), index = its flat
// position in the plane.
template <Dtype T>
KernelSource max_pool_kernel(bool index32, std::string entry = "kiln_max_pool2d") {
  using detail::cat;
  const std::string body = cat(
      "    const kiln_index ow = i % wo, oh = i / wo % ho, nc = i / (wo * ho);\n",
      "    ", detail::compute_name<T>(), " best = 0;\n",
      "    long long at = -1;\n"
      "    for (kiln_index a = 0; a < kh; ++a) {\n"
      "      const kiln_index y = oh * sh - ph + a * dh;\n"
      "      if (y < 0 || y >= h) continue;\n"
      "      for (kiln_index b = 0; b < kw; ++b) {\n"
      "        const kiln_index x = ow * sw - pw + b * dw;\n"
      "        if (x < 0 || x >= w) continue;\n",
      "        const ", detail::compute_name<T>(), " v = ", detail::load_element<T>("d.src", "(nc * h + y) * w + x"), ";\n",
      "        if (at < 0 || (!(v <= best) && best == best)) { best = v; at = y * w + x; }\n"
      "      }\n"
      "    }\n"
      "    ", detail::store_element<T>("d.dst", "i", "best"), "\n",
      "    ((long long*)d.index)[i] = at;\n");
  return detail::pool_kernel(std::move(entry), index32, body);
}

// Over the input's elements: dst = the sum of src (the output's gradient) over the windows whose argmax (index) is
// this element, taken in the windows' row-major order as the CPU adds them.
template <Dtype T>
KernelSource max_pool_backward_kernel(bool index32, std::string entry = "kiln_max_pool2d_backward") {
  using detail::cat;
  const std::string body = cat(
      "    const kiln_index iw = i % w, ih = i / w % h, nc = i / (w * h);\n",
      "    ", detail::compute_name<T>(), " acc = 0;\n",
      "    for (kiln_index a = kh - 1; a >= 0; --a) {\n"
      "      const kiln_index y = ih + ph - a * dh;\n"
      "      if (y < 0 || y % sh != 0 || y / sh >= ho) continue;\n"
      "      for (kiln_index b = kw - 1; b >= 0; --b) {\n"
      "        const kiln_index x = iw + pw - b * dw;\n"
      "        if (x < 0 || x % sw != 0 || x / sw >= wo) continue;\n"
      "        const kiln_index o = (nc * ho + y / sh) * wo + x / sw;\n"
      "        if (((const long long*)d.index)[o] == ih * w + iw) acc += ",
      detail::load_element<T>("d.src", "o"), ";\n",
      "      }\n"
      "    }\n"
      "    ", detail::store_element<T>("d.dst", "i", "acc"), "\n");
  return detail::pool_kernel(std::move(entry), index32, body);
}

// Over the output's elements: dst = the sum of src over the window inside the input, over its divisor.
template <Dtype T>
KernelSource avg_pool_kernel(bool index32, std::string entry = "kiln_avg_pool2d") {
  using detail::cat;
  const std::string c(detail::compute_name<T>());
  const std::string body = cat(
      "    const kiln_index ow = i % wo, oh = i / wo % ho, nc = i / (wo * ho);\n    {\n",
      detail::avg_span("oh", "r0", "r1", "h", "ho", "kh", "sh", "ph"),
      detail::avg_span("ow", "c0", "c1", "w", "wo", "kw", "sw", "pw"), detail::avg_divisor(),
      "      ", c, " acc = 0;\n"
      "      for (kiln_index r = cr0; r < cr1; ++r)\n"
      "        for (kiln_index q = cc0; q < cc1; ++q) acc += ",
      detail::load_element<T>("d.src", "(nc * h + r) * w + q"), ";\n",
      "      ", detail::store_element<T>("d.dst", "i", cat("acc / (", c, ")divisor")), "\n    }\n");
  return detail::pool_kernel(std::move(entry), index32, body);
}

// Over the input's elements: dst = the sum, over the windows that contain this element (in row-major order), of
// src (the output's gradient) over the window's divisor. Windows start in nondecreasing order along each axis, so
// the scan starts at the first that can reach the element and stops at the first that starts past it.
template <Dtype T>
KernelSource avg_pool_backward_kernel(bool index32, std::string entry = "kiln_avg_pool2d_backward") {
  using detail::cat;
  const std::string c(detail::compute_name<T>());
  const std::string body = cat(
      "    const kiln_index iw = i % w, ih = i / w % h, nc = i / (w * h);\n",
      "    const kiln_index oh0 = adaptive ? ih * ho / h : (ih + ph - kh + 1 <= 0 ? 0 : (ih + ph - kh + sh) / sh);\n"
      "    const kiln_index ow0 = adaptive ? iw * wo / w : (iw + pw - kw + 1 <= 0 ? 0 : (iw + pw - kw + sw) / sw);\n",
      "    ", c, " acc = 0;\n",
      "    for (kiln_index oh = oh0; oh < ho; ++oh) {\n",
      detail::avg_span("oh", "r0", "r1", "h", "ho", "kh", "sh", "ph"),
      "      if (r0 > ih) break;\n"
      "      if (r1 <= ih) continue;\n"
      "      for (kiln_index ow = ow0; ow < wo; ++ow) {\n",
      detail::avg_span("ow", "c0", "c1", "w", "wo", "kw", "sw", "pw"),
      "      if (c0 > iw) break;\n"
      "      if (c1 <= iw) continue;\n",
      detail::avg_divisor(),
      "      acc += ", detail::load_element<T>("d.src", "(nc * ho + oh) * wo + ow"), " / (", c, ")divisor;\n",
      "      }\n"
      "    }\n"
      "    ", detail::store_element<T>("d.dst", "i", "acc"), "\n");
  return detail::pool_kernel(std::move(entry), index32, body);
}

// The block: n elements of dst, the addresses, the geometry.
inline std::vector<uint64_t> pool_descriptor(const KernelSource& k, int64_t n, const void* src, void* index, void* dst,
                                             const std::array<int64_t, kPoolGeometryWords>& geometry) {
  std::vector<uint64_t> w = {detail::word_of(n), detail::word_of(src), detail::word_of(static_cast<const void*>(index)),
                             detail::word_of(static_cast<const void*>(dst))};
  for (int64_t v : geometry) w.push_back(detail::word_of(v));
  return detail::checked_block(std::move(w), k);
}

}  // namespace kiln::cuda

namespace kiln::detail {

// dst = the pooling P of src (both contiguous, on one device; nn/pool.hpp allocates dst): the forward from x into the
// output (Max also writes the argmax into `index`), the backward from the output's gradient into x's (MaxBackward
// reads the argmax from `index`). Every element of dst is written.
template <CudaPool P, Dtype T>
void cuda_pool(const Tensor<T>& src, const Tensor<T>& dst, const Tensor<int64_t>& index,
               const nn::functional::detail::PoolWindows& win, bool count_pad) {
  if (dst.numel() == 0) return;
  const bool index32 = cuda::detail::fits_index32(std::max(dst.numel(), src.numel()));
  struct Tag;
  const cuda::KernelSource& kernel = kernel_for<std::tuple<T, Tag, std::integral_constant<CudaPool, P>>>(
      index32 ? "i32" : "i64", [&] {
        if constexpr (P == CudaPool::Max) return cuda::max_pool_kernel<T>(index32);
        else if constexpr (P == CudaPool::MaxBackward) return cuda::max_pool_backward_kernel<T>(index32);
        else if constexpr (P == CudaPool::Avg) return cuda::avg_pool_kernel<T>(index32);
        else return cuda::avg_pool_backward_kernel<T>(index32);
      });
  const std::array<int64_t, cuda::kPoolGeometryWords> geometry = {
      win.h, win.w, win.ho, win.wo, win.k[0], win.k[1], win.s[0], win.s[1], win.p[0], win.p[1], win.d[0], win.d[1],
      int64_t(count_pad), int64_t(win.adaptive)};
  void* index_bytes = index.defined() ? index.impl().device_bytes() : nullptr;
  const auto words = cuda::pool_descriptor(kernel, dst.numel(), src.impl().device_bytes(), index_bytes,
                                           dst.impl().device_bytes(), geometry);
  cuda::DeviceContext::get(src.device().index()).launch(kernel, words, launch_for(dst.numel()));
}

}  // namespace kiln::detail
