// conv_transpose2d, conv1d, conv_transpose1d and their modules (nn/conv_variants.hpp) against PyTorch:
// tests/fixtures/nn/conv_torch.safetensors (written by scripts/conv_reference.py with torch 2.15.0) holds each
// case's input, weight, bias, output and the gradients of a weighted sum, computed in float64 and in float32. kiln in
// double must give the float64 values to rounding, in float the float32 ones. Also: col2im is im2col's adjoint,
// the modules' shapes, initialization bounds and printing, and the errors.
#include <doctest/doctest.h>

#include <functional>
#include <sstream>
#include <string>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

#include "torch_fixture.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_conv_variants {

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

Tensor<double> entry(const std::string& key) { return test::torch_entry("conv_torch.safetensors", key); }

template <class T>
using Conv = std::function<Tensor<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&)>;

template <class T>
void check_case(const std::string& name, const Conv<T>& f) {
  const std::string suffix = std::is_same_v<T, double> ? "" : "32";
  const double tol = std::is_same_v<T, double> ? 1e-12 : 1e-5;
  const Tensor<T> x = entry(name + ".x").to<T>().requires_grad_();
  const Tensor<T> weight = entry(name + ".weight").to<T>().requires_grad_();
  const Tensor<T> bias = entry(name + ".bias").to<T>().requires_grad_();
  const Tensor<T> y = f(x, weight, bias);
  test::expect_close_to_torch(y, entry(name + ".output" + suffix), tol, name + ": the output");
  sum(y * entry(name + ".w").to<T>()).backward();
  test::expect_close_to_torch(x.grad(), entry(name + ".grad" + suffix + ".x"), tol, name + ": the input's gradient");
  test::expect_close_to_torch(weight.grad(), entry(name + ".grad" + suffix + ".weight"), tol,
                              name + ": the weight's gradient");
  test::expect_close_to_torch(bias.grad(), entry(name + ".grad" + suffix + ".bias"), tol,
                              name + ": the bias's gradient");
}

template <class T>
void check_all() {
  using X = const Tensor<T>&;
  check_case<T>("transpose2d_stride2",
                [](X x, X w, X b) { return F::conv_transpose2d(x, w, b, {2, 2}, {1, 1}, {1, 1}); });
  check_case<T>("transpose2d_groups_dilation",
                [](X x, X w, X b) { return F::conv_transpose2d(x, w, b, {1, 2}, {0, 2}, {0, 0}, 2, {2, 2}); });
  check_case<T>("transpose2d_plain", [](X x, X w, X b) { return F::conv_transpose2d(x, w, b); });
  check_case<T>("conv1d", [](X x, X w, X b) { return F::conv1d(x, w, b, 2, 1, 2, 2); });
  check_case<T>("conv1d_plain", [](X x, X w, X b) { return F::conv1d(x, w, b); });
  check_case<T>("transpose1d", [](X x, X w, X b) { return F::conv_transpose1d(x, w, b, 3, 1, 2); });
  // output_padding at least the stride (allowed below the dilation): more output than the input's positions cover
  check_case<T>("transpose2d_outpad_dilation",
                [](X x, X w, X b) { return F::conv_transpose2d(x, w, b, {1, 1}, {0, 0}, {1, 1}, 1, {2, 2}); });
  check_case<T>("transpose1d_outpad_dilation", [](X x, X w, X b) { return F::conv_transpose1d(x, w, b, 1, 0, 1, 1, 2); });
}

template <class M>
std::string printed(const M& module) {
  std::ostringstream out;
  module->pretty_print(out);
  return out.str();
}

}  // namespace

TEST_CASE("conv_transpose2d, conv1d, conv_transpose1d in float64 equal PyTorch's outputs and gradients") {
  check_all<double>();
}

TEST_CASE("conv_transpose2d, conv1d, conv_transpose1d in float equal PyTorch's float32") { check_all<float>(); }

TEST_CASE("col2im is the adjoint of im2col: <im2col(x), c> = <x, col2im(c)>, and its gradient is im2col") {
  const nn::Conv2dGeometry g{3, 2, 2, 1, 1, 0, 1, 2};
  const Tensor<double> x = randn<double>({2, 3, 7, 6});
  const Tensor<double> cols = F::im2col(x, g);
  const Tensor<double> c = randn<double>(cols.shape()).requires_grad_();
  const auto positions = g.output_hw(x.shape());
  const Tensor<double> image = F::col2im(c, x.shape(), g, positions);
  CHECK(image.shape() == x.shape());
  CHECK(sum(cols * c).item() == doctest::Approx(sum(x * image).item()).epsilon(1e-12));
  sum(image * x).backward();
  CHECK(max(abs(c.grad() - cols)).item() < 1e-12);
  CHECK_THROWS_WITH_AS(F::col2im(c, Shape{2, 4, 7, 6}, g, positions), doctest::Contains("col2im: columns of shape"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::col2im(c, Shape{2, 3, 7}, g, positions), doctest::Contains("col2im: expected an image shape"),
                       ShapeError);
}

TEST_CASE("ConvTranspose2d, Conv1d, ConvTranspose1d modules: weight shapes, PyTorch's bounds, forward, printing") {
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(8, 4, 4).stride(2).padding(1).groups(2));
  CHECK(up->weight.shape() == Shape{8, 2, 4, 4});
  CHECK(up->bias.shape() == Shape{4});
  const double bound = 1 / std::sqrt(2.0 * 16);  // fan_in = Cout / groups * kh * kw
  CHECK(max(abs(up->weight)).item() <= bound);
  CHECK(max(abs(up->weight)).item() > 0.9 * bound);
  CHECK(up(randn<float>({3, 8, 5, 7})).shape() == Shape{3, 4, 10, 14});  // (5 - 1) * 2 - 2 + 3 + 1
  CHECK(printed(up) == "ConvTranspose2d(8, 4, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1), "
                       "output_padding=(0, 0))");

  nn::Conv1d conv(nn::Conv1dOptions(4, 6, 3).padding(1).bias(false));
  CHECK(conv->weight.shape() == Shape{6, 4, 3});
  CHECK_FALSE(conv->bias.defined());
  CHECK(conv(randn<float>({2, 4, 9})).shape() == Shape{2, 6, 9});
  CHECK(printed(conv) == "Conv1d(4, 6, kernel_size=(3,), stride=(1,), padding=(1,))");
  CHECK(conv->named_parameters().size() == 1);

  nn::ConvTranspose1d up1(4, 2, 5);
  CHECK(up1->weight.shape() == Shape{4, 2, 5});
  CHECK(up1(randn<float>({1, 4, 6})).shape() == Shape{1, 2, 10});
}

TEST_CASE("the transposed and 1-d convolutions refuse bad shapes and arguments, naming them") {
  const Tensor<float> x = randn<float>({1, 4, 5, 5});
  CHECK_THROWS_WITH_AS(F::conv_transpose2d(x, randn<float>({3, 2, 3, 3})),
                       doctest::Contains("conv_transpose2d: weight of shape [3, 2, 3, 3] does not fit input of "
                                         "shape [1, 4, 5, 5] with 1 groups"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::conv_transpose2d(x, randn<float>({4, 2, 3, 3}), {}, {2, 2}, {0, 0}, {2, 0}),
                       doctest::Contains("output_padding 2 must be smaller than the stride 2 or the dilation 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::conv_transpose2d(x, randn<float>({4, 2, 3, 3}), randn<float>({3})),
                       doctest::Contains("bias of shape [3] for 2 channels"), ShapeError);
  CHECK_THROWS_WITH_AS(F::conv1d(x, randn<float>({2, 4, 3})), doctest::Contains("conv1d: expected a 3-d input"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(nn::Conv1d(nn::Conv1dOptions(4, 6, 3).groups(4)),
                       doctest::Contains("Conv1d: channels 4 -> 6 do not split into 4 groups"),
                       std::invalid_argument);
}

}  // namespace test_nn_conv_variants
