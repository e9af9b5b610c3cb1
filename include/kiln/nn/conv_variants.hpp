#pragma once
// The convolutions beside conv2d, as torch.nn's: conv_transpose2d and ConvTranspose2d (the adjoint of conv2d: a GEMM
// of the weight's transpose with the input, then col2im, the scatter-add of im2col, whose backward is im2col), and
// conv1d, conv_transpose1d, Conv1d and ConvTranspose1d as their 2-d forms over a height of 1. Each runs on CPU and
// CUDA tensors (im2col and col2im have kernels on the device; the GEMM is cuBLAS's) and records its backward.
#include <array>
#include <cmath>

#include "kiln/nn/conv.hpp"

namespace kiln::nn {

namespace autograd_nodes {
// col2im's backward: im2col of the gradient.
template <Dtype T>
struct Col2ImBackward : autograd::Node {
  Col2ImBackward(const autograd::ImplPtr& cols, Conv2dGeometry g, std::array<int64_t, 2> positions)
      : g_(g), positions_(positions) {
    next_edges.push_back(autograd::gradient_edge(cols));
  }
  std::string name() const override { return "Col2ImBackward"; }
  autograd::GradList apply(autograd::GradList&& grads) override {
    if (!grads.at(0)) return {nullptr};
    NoGradGuard no_grad;
    return {functional::im2col(Tensor<T>(grads[0]), g_, positions_).impl_ptr()};
  }

 private:
  Conv2dGeometry g_;
  std::array<int64_t, 2> positions_;
};
}  // namespace autograd_nodes

namespace functional {

// The image [N, C, H, W] (`shape`) whose im2col at `positions` (rows x columns of output positions, at most all
// that the geometry gives) would be cols [N, C * kh * kw, rows * columns], summing what overlaps: the adjoint of
// im2col, differentiable in cols.
template <Dtype T>
Tensor<T> col2im(const Tensor<T>& cols, const Shape& shape, const Conv2dGeometry& g, std::array<int64_t, 2> positions) {
  check<ShapeError>(shape.size() == 4, "col2im: expected an image shape [N, C, H, W], got ", shape);
  const std::array<int64_t, 2> all = g.output_hw(shape);
  const auto [ho, wo] = positions;
  check<ShapeError>(ho > 0 && wo > 0 && ho <= all[0] && wo <= all[1] && cols.dim() == 3 && cols.size(0) == shape[0] &&
                        cols.size(1) == shape[1] * g.kh * g.kw && cols.size(2) == ho * wo,
                    "col2im: columns of shape ", cols.shape(), " at ", ho, "x", wo,
                    " positions do not fit an image of shape ", shape);
  Tensor<T> image = detail::col2im_values(cols.detach(), shape, g, ho, wo);
  if constexpr (is_floating_v<T>) {
    if (GradMode::is_enabled() && cols.requires_grad())
      autograd::meta_of(image.impl_ptr()).grad_fn =
          std::make_shared<autograd_nodes::Col2ImBackward<T>>(cols.impl_ptr(), g, positions);
  }
  return image;
}

// x [N, Cin, H, W], weight [Cin, Cout / groups, kh, kw], bias [Cout] (undefined: none); the output is
// [N, Cout, (H - 1) sh - 2 ph + dh (kh - 1) + oph + 1, the same for W] (torch.nn.functional.conv_transpose2d, its
// argument order). output_padding adds rows and columns at the end, each below the stride or the dilation.
template <Dtype T>
Tensor<T> conv_transpose2d(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias = {},
                           std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                           std::array<int64_t, 2> output_padding = {0, 0}, int64_t groups = 1,
                           std::array<int64_t, 2> dilation = {1, 1}) {
  check<ShapeError>(x.dim() == 4 && weight.dim() == 4, "conv_transpose2d: expected a 4-d input and weight, got ",
                    x.shape(), " and ", weight.shape());
  const int64_t n = x.size(0), cin = x.size(1), h = x.size(2), w = x.size(3);
  check<ShapeError>(groups >= 1 && cin % groups == 0 && weight.size(0) == cin, "conv_transpose2d: weight of shape ",
                    weight.shape(), " does not fit input of shape ", x.shape(), " with ", groups, " groups");
  for (int k = 0; k < 2; ++k) {
    check<std::invalid_argument>(stride[k] > 0 && dilation[k] > 0 && padding[k] >= 0 && output_padding[k] >= 0,
                                 "conv_transpose2d: stride and dilation must be positive, padding and "
                                 "output_padding non-negative");
    check<std::invalid_argument>(output_padding[k] < stride[k] || output_padding[k] < dilation[k],
                                 "conv_transpose2d: output_padding ", output_padding[k],
                                 " must be smaller than the stride ", stride[k], " or the dilation ", dilation[k]);
  }
  const int64_t kh = weight.size(2), kw = weight.size(3), cout = weight.size(1) * groups;
  const Conv2dGeometry g{kh, kw, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
  const Shape out_shape{n, cout,
                        (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1,
                        (w - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1};
  check<ShapeError>(out_shape[2] > 0 && out_shape[3] > 0, "conv_transpose2d: input of shape ", x.shape(),
                    " with this padding gives an empty output ", out_shape);
  // [groups, Cout/groups * kh * kw, Cin/groups] @ [N, groups, Cin/groups, H * W] -> the columns of the output
  const int64_t cg = cin / groups, kg = weight.size(1) * kh * kw;
  const Tensor<T> cols = matmul(weight.reshape({groups, cg, kg}).transpose(1, 2), x.reshape({n, groups, cg, h * w}))
                             .view({n, cout * kh * kw, h * w});
  Tensor<T> out = col2im(cols, out_shape, g, {h, w});
  if (bias.defined()) {
    check<ShapeError>(bias.shape() == Shape{cout}, "conv_transpose2d: bias of shape ", bias.shape(), " for ", cout,
                      " channels");
    out = Tensor<T>(out + bias.view({1, cout, 1, 1}));
  }
  return out;
}

namespace detail {
// A 1-d convolution's tensors as the 2-d ones of height 1.
template <Dtype T>
Tensor<T> as_2d(const Tensor<T>& t, const char* op, const char* what) {
  check<ShapeError>(t.dim() == 3, op, ": expected a 3-d ", what, ", got ", t.shape());
  return t.unsqueeze(2);
}
}  // namespace detail

// x [N, Cin, L], weight [Cout, Cin / groups, k], bias [Cout] (torch.nn.functional.conv1d).
template <Dtype T>
Tensor<T> conv1d(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias = {}, int64_t stride = 1,
                 int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1) {
  return conv2d(detail::as_2d(x, "conv1d", "input"), detail::as_2d(weight, "conv1d", "weight"), bias, {1, stride},
                {0, padding}, {1, dilation}, groups)
      .squeeze(2);
}

// x [N, Cin, L], weight [Cin, Cout / groups, k], bias [Cout] (torch.nn.functional.conv_transpose1d).
template <Dtype T>
Tensor<T> conv_transpose1d(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias = {},
                           int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1,
                           int64_t dilation = 1) {
  return conv_transpose2d(detail::as_2d(x, "conv_transpose1d", "input"),
                          detail::as_2d(weight, "conv_transpose1d", "weight"), bias, {1, stride}, {0, padding},
                          {0, output_padding}, groups, {1, dilation})
      .squeeze(2);
}

}  // namespace functional

// The options of Conv1d, ConvTranspose1d (D = 1) and ConvTranspose2d (D = 2), as libtorch's.
template <size_t D>
struct ConvOptionsOf {
  using Size = std::array<int64_t, D>;
  ConvOptionsOf(int64_t in, int64_t out, int64_t kernel) : in_channels(in), out_channels(out) {
    kernel_size.fill(kernel);
  }
  ConvOptionsOf(int64_t in, int64_t out, Size kernel) : in_channels(in), out_channels(out), kernel_size(kernel) {}
  int64_t in_channels, out_channels;
  Size kernel_size, stride_ = filled(1), padding_ = filled(0), output_padding_ = filled(0), dilation_ = filled(1);
  int64_t groups_ = 1;
  bool bias_ = true;
  ConvOptionsOf& stride(int64_t s) { stride_ = filled(s); return *this; }
  ConvOptionsOf& padding(int64_t p) { padding_ = filled(p); return *this; }
  ConvOptionsOf& output_padding(int64_t p) { output_padding_ = filled(p); return *this; }
  ConvOptionsOf& dilation(int64_t d) { dilation_ = filled(d); return *this; }
  ConvOptionsOf& stride(Size s) { stride_ = s; return *this; }
  ConvOptionsOf& padding(Size p) { padding_ = p; return *this; }
  ConvOptionsOf& output_padding(Size p) { output_padding_ = p; return *this; }
  ConvOptionsOf& dilation(Size d) { dilation_ = d; return *this; }
  ConvOptionsOf& groups(int64_t g) { groups_ = g; return *this; }
  ConvOptionsOf& bias(bool b) { bias_ = b; return *this; }

 private:
  static Size filled(int64_t v) {
    Size s;
    s.fill(v);
    return s;
  }
};
using Conv1dOptions = ConvOptionsOf<1>;
using ConvTranspose1dOptions = ConvOptionsOf<1>;
using ConvTranspose2dOptions = ConvOptionsOf<2>;

namespace detail {
// Conv1d, ConvTranspose1d and ConvTranspose2d: the weight's shape, PyTorch's initialization (uniform in
// +-1/sqrt(fan_in), fan_in = size(1) * the kernel's elements of the weight: Cin / groups, or Cout / groups when
// transposed) and the printing; Kind supplies the name and the forward (a template, so that the convolution's
// kernels are compiled only where a program runs the module, as Conv2dImplT's, nn/conv.hpp).
template <class Kind, size_t D>
class ConvModule : public Module {
 public:
  explicit ConvModule(const ConvOptionsOf<D>& o) : Module(Kind::kName), options(o) {
    check<std::invalid_argument>(o.in_channels > 0 && o.out_channels > 0 && o.groups_ >= 1 &&
                                     o.in_channels % o.groups_ == 0 && o.out_channels % o.groups_ == 0,
                                 Kind::kName, ": channels ", o.in_channels, " -> ", o.out_channels,
                                 " do not split into ", o.groups_, " groups");
    Shape shape = Kind::kTransposed ? Shape{o.in_channels, o.out_channels / o.groups_}
                                    : Shape{o.out_channels, o.in_channels / o.groups_};
    int64_t fan_in = shape[1];
    for (const int64_t k : o.kernel_size) {
      shape.push_back(k);
      fan_in *= k;
    }
    const double bound = 1 / std::sqrt(double(fan_in));
    weight = register_parameter("weight", uniform_(empty<float>(shape), -bound, bound));
    if (o.bias_) bias = register_parameter("bias", uniform_(empty<float>({o.out_channels}), -bound, bound));
  }
  ConvModule(int64_t in, int64_t out, int64_t kernel) : ConvModule(ConvOptionsOf<D>(in, out, kernel)) {}
  Tensor<float> forward(const Tensor<float>& x) override { return Kind::forward(x, weight, bias, options); }
  void pretty_print(std::ostream& out) const override {
    const auto tuple = [&](const char* name, const auto& values) {
      out << ", " << name << "=(";
      for (size_t i = 0; i < D; ++i) out << (i ? ", " : "") << values[i] << (D == 1 ? "," : "");
      out << ')';
    };
    out << Kind::kName << '(' << options.in_channels << ", " << options.out_channels;
    tuple("kernel_size", options.kernel_size);
    tuple("stride", options.stride_);
    tuple("padding", options.padding_);
    if (Kind::kTransposed) tuple("output_padding", options.output_padding_);
    out << ')';
  }
  ConvOptionsOf<D> options;
  Tensor<float> weight, bias;
};

struct Conv1dKind {
  static constexpr const char* kName = "Conv1d";
  static constexpr bool kTransposed = false;
  template <Dtype T>
  static Tensor<T> forward(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& b,
                           const Conv1dOptions& o) {
    return functional::conv1d(x, w, b, o.stride_[0], o.padding_[0], o.dilation_[0], o.groups_);
  }
};
struct ConvTranspose1dKind {
  static constexpr const char* kName = "ConvTranspose1d";
  static constexpr bool kTransposed = true;
  template <Dtype T>
  static Tensor<T> forward(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& b,
                           const ConvTranspose1dOptions& o) {
    return functional::conv_transpose1d(x, w, b, o.stride_[0], o.padding_[0], o.output_padding_[0], o.groups_,
                                        o.dilation_[0]);
  }
};
struct ConvTranspose2dKind {
  static constexpr const char* kName = "ConvTranspose2d";
  static constexpr bool kTransposed = true;
  template <Dtype T>
  static Tensor<T> forward(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& b,
                           const ConvTranspose2dOptions& o) {
    return functional::conv_transpose2d(x, w, b, o.stride_, o.padding_, o.output_padding_, o.groups_, o.dilation_);
  }
};
}  // namespace detail

#define KILN_CONV_MODULE(Name, D)                                      \
  KILN_INSTANTIATE(class detail::ConvModule<detail::Name##Kind, D>);   \
  class Name##Impl : public detail::ConvModule<detail::Name##Kind, D> { \
   public:                                                             \
    using detail::ConvModule<detail::Name##Kind, D>::ConvModule;       \
  };                                                                   \
  KILN_MODULE(Name)
KILN_CONV_MODULE(Conv1d, 1);
KILN_CONV_MODULE(ConvTranspose1d, 1);
KILN_CONV_MODULE(ConvTranspose2d, 2);
#undef KILN_CONV_MODULE

}  // namespace kiln::nn
