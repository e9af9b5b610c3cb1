#pragma once
// 2-d convolution as torch.nn.functional.conv2d (stride, padding, dilation, groups, bias) and the Conv2d
// module (PyTorch's default initialization). The convolution is im2col (a threaded gather of each
// output position's receptive field into columns) followed by kiln's batched GEMM; im2col's backward is
// col2im (the scatter-add of the columns' gradient), and the GEMM and the bias record their own
// backward, so input, weight and bias all get gradients. A CUDA tensor's convolution goes through cuDNN where it is
// usable (cuda/cudnn_conv.hpp), and through im2col kernels around cuBLAS otherwise.
#include <algorithm>
#include <array>
#include <cmath>

#include "kiln/core/autocast.hpp"
#include "kiln/tensor/autocast_cast.hpp"
#include "kiln/cpu/parallel.hpp"
#include "kiln/nn/module.hpp"
#include "kiln/nn/winograd.hpp"
#include "kiln/tensor/linalg.hpp"
#include "kiln/tensor/random.hpp"

#ifdef KILN_WITH_CUDA
namespace kiln::nn {
struct Conv2dGeometry;
}
namespace kiln::detail {
// im2col / col2im on a CUDA tensor (cuda/im2col.hpp), and the convolution through cuDNN (cuda/cudnn_conv.hpp); both
// headers are included at the end of this file in such builds.
template <bool kAdjoint, Dtype T>
Tensor<T> cuda_conv_columns(const Tensor<T>& src, const Shape& out_shape, const std::array<int64_t, 12>& geometry);
template <Dtype T>
bool cudnn_conv2d_applies(const Tensor<T>& x, const Tensor<T>& weight, const Shape& y_shape,
                          const nn::Conv2dGeometry& g, int64_t groups);
template <Dtype T>
Tensor<T> cudnn_conv2d(const Tensor<T>& x, const Tensor<T>& weight, const nn::Conv2dGeometry& g, int64_t groups,
                       const Shape& y_shape);
}  // namespace kiln::detail
#endif

namespace kiln::nn {

struct Conv2dGeometry {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  // The words of CUDA's im2col/col2im kernels (cuda/im2col.hpp) for an input of h x w and an output of ho x wo.
  std::array<int64_t, 12> words(int64_t h, int64_t w, int64_t ho, int64_t wo) const {
    return {h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw};
  }
  // Output positions along one dim; 0 when the dilated kernel does not fit (no rounding toward 0).
  int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) const {
    const int64_t span = in + 2 * p - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
  }
  // {Hout, Wout} for an input [N, C, H, W]; throws when the dilated kernel does not fit the padded input.
  std::array<int64_t, 2> output_hw(const Shape& x) const {
    const int64_t ho = out_size(x[2], kh, sh, ph, dh), wo = out_size(x[3], kw, sw, pw, dw);
    check<ShapeError>(ho > 0 && wo > 0, "conv2d: input of shape ", x, " is smaller than the kernel (", kh, "x", kw,
                      ", dilation ", dh, "x", dw, ", padding ", ph, "x", pw, ")");
    return {ho, wo};
  }
};

namespace functional {
namespace detail {

// cols[n][(c * kh + i) * kw + j][oh * wo + ow] = x[n][c][oh * sh - ph + i * dh][ow * sw - pw + j * dw] (0 outside),
// for contiguous x [N, C, H, W]; `scatter` runs the adjoint: x += the columns at those places.
template <bool kScatter, class T>
void im2col_loop(T* x, T* cols, int64_t n, int64_t c, int64_t h, int64_t w, int64_t ho, int64_t wo,
                 const Conv2dGeometry& g) {
  const int64_t k = g.kh * g.kw, p = ho * wo;
  // Each (sample, channel) pair owns its rows of cols and its plane of x: no two threads share memory.
  cpu::parallel_for(n * c, k * p, 1, [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      T* plane = x + nc * h * w;
      T* rows = cols + nc * k * p;  // (n * C + c) * k rows of p
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          T* row = rows + (i * g.kw + j) * p;
          for (int64_t oh = 0; oh < ho; ++oh) {
            const int64_t ih = oh * g.sh - g.ph + i * g.dh;
            T* out = row + oh * wo;
            if (ih < 0 || ih >= h) {
              if constexpr (!kScatter)
                for (int64_t ow = 0; ow < wo; ++ow) out[ow] = T(0);
              continue;
            }
            // Output columns ow in [lo, hi) read inside the row (iw = ow * sw + shift): the loops have no
            // per-element test, and with stride 1 they are contiguous copies / adds the compiler vectorizes.
            T* in_row = plane + ih * w;
            const int64_t shift = j * g.dw - g.pw;
            const int64_t lo = std::min(wo, shift >= 0 ? 0 : (-shift + g.sw - 1) / g.sw);
            const int64_t hi = std::max(lo, std::min(wo, w - shift <= 0 ? 0 : (w - shift + g.sw - 1) / g.sw));
            if constexpr (kScatter) {
              for (int64_t ow = lo; ow < hi; ++ow) in_row[ow * g.sw + shift] += out[ow];
            } else {
              for (int64_t ow = 0; ow < lo; ++ow) out[ow] = T(0);
              for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in_row[ow * g.sw + shift];
              for (int64_t ow = hi; ow < wo; ++ow) out[ow] = T(0);
            }
          }
        }
    }
  });
}

// The adjoint of im2col without recording: cols [N, C * kh * kw, ho * wo] summed into an image of `shape`
// [N, C, H, W]. A 16-bit image is summed in float (up to kh * kw columns meet at a pixel) and rounded once.
template <Dtype T>
Tensor<T> col2im_values(const Tensor<T>& cols, const Shape& shape, const Conv2dGeometry& g, int64_t ho, int64_t wo) {
#ifdef KILN_WITH_CUDA
  if (cols.is_cuda())
    return kiln::detail::cuda_conv_columns<true>(cols.contiguous(), shape, g.words(shape[2], shape[3], ho, wo));
#endif
  using C = compute_t<T>;
  const Tensor<C> cc = cols.template to<C>().contiguous();
  Tensor<C> image = zeros<C>(shape);
  im2col_loop<true>(image.data_ptr(), const_cast<C*>(cc.data_ptr()), shape[0], shape[1], shape[2], shape[3], ho, wo, g);
  return image.template to<T>();
}

}  // namespace detail
}  // namespace functional

namespace autograd_nodes {
// im2col's backward: col2im.
template <Dtype T>
struct Im2ColBackward : autograd::Node {
  Im2ColBackward(const autograd::ImplPtr& x, Conv2dGeometry g, int64_t ho, int64_t wo)
      : shape_(x->shape), g_(g), ho_(ho), wo_(wo) {
    next_edges.push_back(autograd::gradient_edge(x));
  }
  std::string name() const override { return "Im2ColBackward"; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    return {functional::detail::col2im_values(Tensor<T>(grads[0]), shape_, g_, ho_, wo_).impl_ptr()};
  }

 private:
  Shape shape_;
  Conv2dGeometry g_;
  int64_t ho_, wo_;
};
}  // namespace autograd_nodes

namespace functional {

// The columns of x [N, C, H, W]: [N, C * kh * kw, Hout * Wout], for the first `positions` rows and columns of
// the output (all of them by default; conv_transpose2d's output_padding can leave more than its input has).
template <Dtype T>
Tensor<T> im2col(const Tensor<T>& x, const Conv2dGeometry& g, std::array<int64_t, 2> positions = {0, 0}) {
  check<ShapeError>(x.dim() == 4, "im2col: expected a 4-d input [N, C, H, W], got ", x.shape());
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const std::array<int64_t, 2> all = g.output_hw(x.shape());
  const int64_t ho = positions[0] > 0 ? positions[0] : all[0], wo = positions[1] > 0 ? positions[1] : all[1];
  check<ShapeError>(ho <= all[0] && wo <= all[1], "im2col: ", ho, "x", wo, " output positions for input of shape ",
                    x.shape(), ", which has ", all[0], "x", all[1]);
  const Tensor<T> xc = x.detach().contiguous();
  const Shape shape{n, c * g.kh * g.kw, ho * wo};
  Tensor<T> cols = [&] {
#ifdef KILN_WITH_CUDA
    if (xc.is_cuda()) return kiln::detail::cuda_conv_columns<false>(xc, shape, g.words(h, w, ho, wo));
#endif
    Tensor<T> out(TensorImpl::allocate(shape, scalar_type_of<T>(), "conv2d"));
    detail::im2col_loop<false>(const_cast<T*>(xc.data_ptr()), out.data_ptr(), n, c, h, w, ho, wo, g);
    return out;
  }();
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && x.requires_grad())
      autograd::meta_of(cols.impl_ptr()).grad_fn = std::make_shared<autograd_nodes::Im2ColBackward<T>>(x.impl_ptr(), g, ho, wo);
  }
  return cols;
}

namespace detail {
// The convolution as im2col and one batched GEMM, for every geometry.
template <Dtype T>
Tensor<T> conv2d_im2col(const Tensor<T>& x, const Tensor<T>& weight, const Conv2dGeometry& g, int64_t groups) {
  const int64_t n = x.size(0), cout = weight.size(0);
  const Tensor<T> cols = im2col(x, g);  // [N, Cin * kh * kw, P]
  const auto [ho, wo] = g.output_hw(x.shape());
  const int64_t kg = weight.size(1) * g.kh * g.kw;
  // [groups, Cout / groups, Kg] @ [N, groups, Kg, P] -> [N, groups, Cout / groups, P]
  return matmul(weight.reshape({groups, cout / groups, kg}), cols.view({n, groups, kg, ho * wo})).view({n, cout, ho, wo});
}

// Winograd F(2x2, 3x3) for 3x3 stride-1 undilated single-group float convolutions whose GEMM work (Cin x Cout
// per tile) is large against its transforms (Cin + Cout per tile, the output side's the heavier). Measured
// forward + backward at 28x28 and 14x14, batch 32, one thread (im2col time / Winograd time): 3->6 0.9,
// 4->8 1.2, 4->16 0.93-1.0, 8->16 1.4, 8->32 1.05-1.2, 8->64 0.82-1.06, 1->64 0.23-0.5, 16->4 1.8-2.2,
// 64->128 1.6-1.7; every other pair with at least 8 input channels and at most 4x as many output: 1.2-2.2.
template <class T>
inline constexpr bool winograd_dtype = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <Dtype T>
bool winograd_applies(const Conv2dGeometry& g, int64_t groups, int64_t cin, int64_t cout) {
  const bool geometry = g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && groups == 1;
  const bool pays = cin >= 4 && cout <= (cin >= 8 ? 4 : 2) * cin;
  return winograd_dtype<T> && geometry && pays;
}
}  // namespace detail

// x [N, Cin, H, W], weight [Cout, Cin / groups, kh, kw], bias [Cout] (undefined: none).
template <Dtype T>
Tensor<T> conv2d(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias = {},
                 std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                 std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1) {
  if constexpr (std::is_same_v<T, float>) {
    if (autocast::applies_to(x))  // in the autocast type, as PyTorch: input, weight and bias (core/autocast.hpp)
      return autocast::with_dtype(x.device().type(), [&](auto h) {
        using H = decltype(h);
        const Tensor<H> b = bias.defined() ? autocast::cast<H>(bias) : Tensor<H>();
        return conv2d(autocast::cast<H>(x), autocast::cast<H>(weight), b, stride, padding, dilation, groups)
            .template to<float>();
      });
  }
  check<ShapeError>(x.dim() == 4 && weight.dim() == 4, "conv2d: expected a 4-d input and weight, got ", x.shape(),
                    " and ", weight.shape());
  const int64_t cin = x.size(1), cout = weight.size(0);
  check<ShapeError>(groups >= 1 && cin % groups == 0 && cout % groups == 0 && weight.size(1) * groups == cin,
                    "conv2d: weight of shape ", weight.shape(), " does not fit input of shape ", x.shape(),
                    " with ", groups, " groups");
  check<std::invalid_argument>(stride[0] > 0 && stride[1] > 0 && dilation[0] > 0 && dilation[1] > 0 &&
                                   padding[0] >= 0 && padding[1] >= 0,
                               "conv2d: stride and dilation must be positive and padding non-negative");
  const Conv2dGeometry g{weight.size(2), weight.size(3), stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
  [[maybe_unused]] const auto [ho, wo] = g.output_hw(x.shape());
  Tensor<T> out = [&] {
#ifdef KILN_WITH_CUDA
    const Shape y_shape{x.size(0), cout, ho, wo};
    if (kiln::detail::cudnn_conv2d_applies(x, weight, y_shape, g, groups))
      return kiln::detail::cudnn_conv2d(x, weight, g, groups, y_shape);
#endif
    if constexpr (detail::winograd_dtype<T>)
      if (!x.is_cuda() && detail::winograd_applies<T>(g, groups, cin, cout))
        return detail::winograd::conv2d(x, weight, g.ph, g.pw);
    return detail::conv2d_im2col(x, weight, g, groups);
  }();
  if (bias.defined()) {
    check<ShapeError>(bias.shape() == Shape{cout}, "conv2d: bias of shape ", bias.shape(), " for ", cout, " channels");
    out = Tensor<T>(out + bias.view({1, cout, 1, 1}));
  }
  return out;
}

}  // namespace functional

struct Conv2dOptions {
  Conv2dOptions(int64_t in, int64_t out, int64_t kernel) : in_channels(in), out_channels(out), kernel_size{kernel, kernel} {}
  int64_t in_channels, out_channels;
  std::array<int64_t, 2> kernel_size, stride_{1, 1}, padding_{0, 0}, dilation_{1, 1};
  int64_t groups_ = 1;
  bool bias_ = true;
  Conv2dOptions& stride(int64_t s) { stride_ = {s, s}; return *this; }
  Conv2dOptions& padding(int64_t p) { padding_ = {p, p}; return *this; }
  Conv2dOptions& dilation(int64_t d) { dilation_ = {d, d}; return *this; }
  Conv2dOptions& groups(int64_t g) { groups_ = g; return *this; }
  Conv2dOptions& bias(bool b) { bias_ = b; return *this; }
};

// Weight and bias uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)], fan_in = Cin / groups * kh * kw (PyTorch's default).
// A class template (instantiated as Conv2dImpl) so that its code, which compiles the convolution's kernels, is
// compiled only where a program uses the module, not in every translation unit that includes the header (2.7 s:
// docs/performance.md).
template <class = void>
class Conv2dImplT : public Module {
 public:
  explicit Conv2dImplT(const Conv2dOptions& o) : Module("Conv2d"), options(o) {
    check<std::invalid_argument>(o.in_channels % o.groups_ == 0 && o.out_channels % o.groups_ == 0,
                                 "Conv2d: channels ", o.in_channels, " -> ", o.out_channels, " do not split into ",
                                 o.groups_, " groups");
    const int64_t fan_in = o.in_channels / o.groups_ * o.kernel_size[0] * o.kernel_size[1];
    const double bound = 1 / std::sqrt(double(fan_in));
    weight = register_parameter("weight", uniform_(empty<float>({o.out_channels, o.in_channels / o.groups_,
                                                                 o.kernel_size[0], o.kernel_size[1]}), -bound, bound));
    if (o.bias_) bias = register_parameter("bias", uniform_(empty<float>({o.out_channels}), -bound, bound));
  }
  Conv2dImplT(int64_t in, int64_t out, int64_t kernel) : Conv2dImplT(Conv2dOptions(in, out, kernel)) {}
  Tensor<float> forward(const Tensor<float>& x) override;
  void pretty_print(std::ostream& out) const override {
    out << "Conv2d(" << options.in_channels << ", " << options.out_channels << ", kernel_size=(" << options.kernel_size[0]
        << ", " << options.kernel_size[1] << "), stride=(" << options.stride_[0] << ", " << options.stride_[1]
        << "), padding=(" << options.padding_[0] << ", " << options.padding_[1] << "))";
  }
  Conv2dOptions options;
  Tensor<float> weight, bias;
};
// Defined out of the class, so that a separately compiled program leaves it to its part (docs/design.md).
template <class V>
Tensor<float> Conv2dImplT<V>::forward(const Tensor<float>& x) {
  return functional::conv2d(x, weight, bias, options.stride_, options.padding_, options.dilation_, options.groups_);
}
using Conv2dImpl = Conv2dImplT<>;
KILN_MODULE(Conv2d);

// The float convolution and the module are compiled once in a separately compiled program's part (core/config.hpp).
KILN_INSTANTIATE(Tensor<float> functional::conv2d<float>(const Tensor<float>&, const Tensor<float>&, const Tensor<float>&,
                                                         std::array<int64_t, 2>, std::array<int64_t, 2>,
                                                         std::array<int64_t, 2>, int64_t));
KILN_INSTANTIATE(class Conv2dImplT<void>);

}  // namespace kiln::nn

#ifdef KILN_WITH_CUDA
#include "kiln/cuda/cudnn_conv.hpp"
#include "kiln/cuda/im2col.hpp"
#endif
