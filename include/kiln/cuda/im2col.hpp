#pragma once
// conv2d's im2col and its adjoint col2im on CUDA tensors (nn/conv.hpp's CPU loops, as two kernels per dtype): the
// convolution is then one cuBLAS product, as on the CPU. The geometry is descriptor words, so one kernel serves
// every shape. col2im gathers: each input element sums the columns that read it (no atomics, the same order every
// run), accumulating in the compute type.
//
// Descriptor: n | src | dst | h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw.
#include <array>

#include "kiln/cuda/evaluate.hpp"

namespace kiln::cuda {

inline constexpr int kConvGeometryWords = 12;

namespace detail {

inline KernelSource conv_columns_kernel(std::string entry, bool index32, const std::string& body) {
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = 1;
  k.outputs = 1;
  k.variant = {false, 0, index32};
  const std::string geometry =
      "    const kiln_index h = d.g[0], w = d.g[1], ho = d.g[2], wo = d.g[3], kh = d.g[4], kw = d.g[5], sh = d.g[6],\n"
      "        sw = d.g[7], ph = d.g[8], pw = d.g[9], dh = d.g[10], dw = d.g[11];\n";
  assemble(k,
           {{"long long n", 1}, {"const void* src", 1}, {"void* dst", 1}, {cat("long long g[", kConvGeometryWords, "]"), kConvGeometryWords}},
           grid_stride_loop("i", "d.n", geometry + body));
  return k;
}

}  // namespace detail

// dst[n][(c * kh + i) * kw + j][oh * wo + ow] = src[n][c][oh * sh - ph + i * dh][ow * sw - pw + j * dw] (0 outside),
// over dst's elements; src contiguous [N, C, H, W].
template <Dtype T>
KernelSource im2col_kernel(bool index32, std::string entry = "kiln_im2col") {
  using detail::cat;
  const std::string body = cat(
      "    const kiln_index p = i % (ho * wo), r = i / (ho * wo), kk = r % (kh * kw), nc = r / (kh * kw);\n"
      "    const kiln_index ih = p / wo * sh - ph + kk / kw * dh, iw = p % wo * sw - pw + kk % kw * dw;\n"
      "    const bool inside = ih >= 0 && ih < h && iw >= 0 && iw < w;\n",
      "    ", detail::store_element<T>("d.dst", "i",
                                    cat("inside ? ", detail::load_element<T>("d.src", "(nc * h + ih) * w + iw"), " : (",
                                        detail::compute_name<T>(), ")0")),
      "\n");
  return detail::conv_columns_kernel(std::move(entry), index32, body);
}

// The adjoint, over dst's elements ([N, C, H, W]): the sum of the columns of src ([N, C * kh * kw, Ho * Wo]) that
// im2col copies from that element.
template <Dtype T>
KernelSource col2im_kernel(bool index32, std::string entry = "kiln_col2im") {
  using detail::cat;
  const std::string body = cat(
      "    const kiln_index iw = i % w, ih = i / w % h, nc = i / (w * h);\n",
      "    ", detail::compute_name<T>(), " acc = 0;\n",
      "    for (kiln_index a = 0; a < kh; ++a) {\n"
      "      const kiln_index y = ih + ph - a * dh;\n"
      "      if (y < 0 || y % sh != 0 || y / sh >= ho) continue;\n"
      "      for (kiln_index b = 0; b < kw; ++b) {\n"
      "        const kiln_index x = iw + pw - b * dw;\n"
      "        if (x < 0 || x % sw != 0 || x / sw >= wo) continue;\n",
      "        acc += ", detail::load_element<T>("d.src", "((nc * kh + a) * kw + b) * ho * wo + y / sh * wo + x / sw"), ";\n",
      "      }\n"
      "    }\n"
      "    ", detail::store_element<T>("d.dst", "i", "acc"), "\n");
  return detail::conv_columns_kernel(std::move(entry), index32, body);
}

// The block: n elements of dst, src and dst's addresses, the geometry.
inline std::vector<uint64_t> conv_columns_descriptor(const KernelSource& k, int64_t n, const void* src, void* dst,
                                                     const std::array<int64_t, kConvGeometryWords>& geometry) {
  std::vector<uint64_t> w = {detail::word_of(n), detail::word_of(src), detail::word_of(static_cast<const void*>(dst))};
  for (int64_t v : geometry) w.push_back(detail::word_of(v));
  return detail::checked_block(std::move(w), k);
}

}  // namespace kiln::cuda

namespace kiln::detail {

// im2col (kAdjoint false: src is x [N, C, H, W], out the columns [N, C * kh * kw, Ho * Wo]) or col2im (true: src is
// the columns, out x's shape) on src's device; src contiguous.
template <bool kAdjoint, Dtype T>
Tensor<T> cuda_conv_columns(const Tensor<T>& src, const Shape& out_shape,
                            const std::array<int64_t, cuda::kConvGeometryWords>& geometry) {
  const Tensor<T> out(cuda_empty<T>(out_shape, src.device()));
  if (out.numel() == 0) return out;
  const bool index32 = cuda::detail::fits_index32(std::max(out.numel(), src.numel()));
  struct Tag;
  const cuda::KernelSource& kernel = kernel_for<std::tuple<T, Tag, std::bool_constant<kAdjoint>>>(
      index32 ? "i32" : "i64",
      [&] { return kAdjoint ? cuda::col2im_kernel<T>(index32) : cuda::im2col_kernel<T>(index32); });
  const auto words = cuda::conv_columns_descriptor(kernel, out.numel(), src.impl().device_bytes(),
                                                   out.impl().device_bytes(), geometry);
  cuda::DeviceContext::get(src.device().index()).launch(kernel, words, launch_for(out.numel()));
  return out;
}

}  // namespace kiln::detail
