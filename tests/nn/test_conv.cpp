// conv2d against a direct float64 convolution written out per element (stride, padding, dilation,
// groups, bias), its gradients by gradcheck, and the Conv2d module.
#include <doctest/doctest.h>

#include "kiln/autograd/gradcheck.hpp"
#include "kiln/nn.hpp"
#include "kiln/tensor/random.hpp"
#include "../autograd/gradcheck_inputs.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_conv {

using namespace kiln;
using kiln::testing::Inputs;
using kiln::testing::sample;
namespace F = kiln::nn::functional;

namespace {

struct Case {
  int64_t n, cin, h, w, cout, k, stride, pad, dil, groups;
};

double direct(const Tensor<double>& x, const Tensor<double>& wt, const Tensor<double>& b, const Case& c, int64_t n,
              int64_t o, int64_t oh, int64_t ow) {
  const int64_t cin_g = c.cin / c.groups, cout_g = c.cout / c.groups, grp = o / cout_g;
  double s = b[o].item();
  for (int64_t ci = 0; ci < cin_g; ++ci)
    for (int64_t i = 0; i < c.k; ++i)
      for (int64_t j = 0; j < c.k; ++j) {
        const int64_t ih = oh * c.stride - c.pad + i * c.dil, iw = ow * c.stride - c.pad + j * c.dil;
        if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
        s += x[n][grp * cin_g + ci][ih][iw].item() * wt[o][ci][i][j].item();
      }
  return s;
}

// y has the output shape of case c, and every element equals the direct convolution to 1e-12.
void check_direct(const Tensor<double>& y, const Tensor<double>& x, const Tensor<double>& wt, const Tensor<double>& b,
                  const Case& c) {
  const int64_t ho = (c.h + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
  const int64_t wo = (c.w + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
  REQUIRE(y.shape() == Shape{c.n, c.cout, ho, wo});
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t o = 0; o < c.cout; ++o)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow)
          CHECK(y[n][o][oh][ow].item() == doctest::Approx(direct(x, wt, b, c, n, o, oh, ow)).epsilon(1e-12));
}
}  // namespace

TEST_CASE("conv2d equals a direct convolution, and its gradients pass gradcheck") {
  for (const Case& c : {Case{2, 3, 7, 6, 4, 3, 1, 1, 1, 1}, Case{1, 4, 9, 9, 6, 3, 2, 0, 1, 2},
                       Case{2, 2, 8, 7, 2, 2, 1, 2, 2, 1}, Case{1, 4, 5, 5, 4, 1, 1, 0, 1, 4}}) {
    const Tensor<double> x = sample({c.n, c.cin, c.h, c.w}, 1), wt = sample({c.cout, c.cin / c.groups, c.k, c.k}, 2),
                         b = sample({c.cout}, 3);
    const Tensor<double> y = F::conv2d(x, wt, b, {c.stride, c.stride}, {c.pad, c.pad}, {c.dil, c.dil}, c.groups);
    check_direct(y, x, wt, b, c);
    const auto r = autograd::gradcheck(
        [c](const Inputs& in) {
          return F::conv2d(in[0], in[1], in[2], {c.stride, c.stride}, {c.pad, c.pad}, {c.dil, c.dil}, c.groups);
        },
        {x, wt, b});
    INFO("stride ", c.stride, " pad ", c.pad, " dilation ", c.dil, " groups ", c.groups, ": ", r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("conv2d by Winograd F(2x2, 3x3): equals a direct convolution, gradients by gradcheck, float accuracy") {
  // Odd and even sizes (a last row or column of tiles half outside the output), paddings 0 to 2, an output
  // of one pixel, and channel counts below the dispatch threshold (called directly) and above it.
  for (const Case& c : {Case{2, 8, 6, 6, 8, 3, 1, 1, 1, 1}, Case{1, 8, 7, 5, 9, 3, 1, 0, 1, 1},
                       Case{2, 9, 5, 8, 8, 3, 1, 2, 1, 1}, Case{1, 3, 3, 3, 2, 3, 1, 0, 1, 1},
                       Case{1, 2, 4, 9, 3, 3, 1, 1, 1, 1}}) {
    const Tensor<double> x = sample({c.n, c.cin, c.h, c.w}, 4), wt = sample({c.cout, c.cin, 3, 3}, 5),
                         b = sample({c.cout}, 6);
    auto winograd = [c](const Tensor<double>& in, const Tensor<double>& w) {
      return F::detail::winograd::conv2d(in, w, c.pad, c.pad);
    };
    const Tensor<double> y = winograd(x, wt) + b.view({1, c.cout, 1, 1});
    check_direct(y, x, wt, b, c);
    const auto r = autograd::gradcheck([&](const Inputs& in) { return winograd(in[0], in[1]); }, {x, wt});
    INFO("Winograd, ", c.cin, " -> ", c.cout, " channels, ", c.h, "x", c.w, ", pad ", c.pad, ": ", r.message);
    CHECK(r.ok);
    // conv2d takes this path for the cases with 8 or more input channels (below: where it pays).
    const Tensor<double> xr = x.clone().requires_grad_();
    CHECK((F::conv2d(xr, wt, {}, {1, 1}, {c.pad, c.pad}).grad_fn()->name() == "ConvolutionBackward") == (c.cin >= 8));
  }
  const nn::Conv2dGeometry g3{3, 3, 1, 1, 1, 1, 1, 1}, strided{3, 3, 2, 2, 1, 1, 1, 1};
  CHECK(F::detail::winograd_applies<float>(g3, 1, 4, 8));
  CHECK(F::detail::winograd_applies<float>(g3, 1, 64, 128));
  CHECK(F::detail::winograd_applies<float>(g3, 1, 16, 4));
  CHECK_FALSE(F::detail::winograd_applies<float>(g3, 1, 3, 64));  // a network's first layer
  CHECK_FALSE(F::detail::winograd_applies<float>(g3, 1, 8, 64));
  CHECK_FALSE(F::detail::winograd_applies<float>(g3, 2, 64, 64));
  CHECK_FALSE(F::detail::winograd_applies<float>(strided, 1, 64, 64));
  CHECK_FALSE(F::detail::winograd_applies<int32_t>(g3, 1, 64, 64));
  // float: within a few ulps of the float64 result at the scale of the sums (the transforms add up to
  // 4 + 4 terms on each side, so the error bound is a small multiple of im2col's).
  const Tensor<float> x = randn<float>({4, 16, 14, 14}), w = randn<float>({32, 16, 3, 3});
  const Tensor<double> exact = F::conv2d(x.to<double>(), w.to<double>(), {}, {1, 1}, {1, 1});
  const double scale = std::sqrt(16.0 * 9.0);  // standard deviation of each output
  CHECK(double(amax(abs(F::conv2d(x, w, {}, {1, 1}, {1, 1}).to<double>() - exact)).item()) < 2e-6 * scale);
}

TEST_CASE("Conv2d module: shapes, initialization bound, errors") {
  nn::Conv2d conv(nn::Conv2dOptions(1, 8, 3).padding(1));
  CHECK(conv->weight.shape() == Shape{8, 1, 3, 3});
  CHECK(double(amax(abs(conv->weight)).item()) <= 1 / 3.0);
  const Tensor<float> y = conv(randn<float>({2, 1, 28, 28}));
  CHECK(y.shape() == Shape{2, 8, 28, 28});
  sum(y).backward();
  CHECK(conv->bias.grad()[0].item() == doctest::Approx(2 * 28 * 28));
  CHECK_THROWS_AS(conv(randn<float>({2, 3, 28, 28})), ShapeError);
  CHECK_THROWS_AS(conv(randn<float>({2, 1, 28})), ShapeError);
  // A kernel larger than the padded input, with a stride: no output position (not one, by rounding toward 0).
  CHECK_THROWS_AS(F::conv2d(randn<float>({1, 1, 2, 2}), randn<float>({1, 1, 3, 3}), {}, {2, 2}), ShapeError);
}

}  // namespace test_nn_conv
