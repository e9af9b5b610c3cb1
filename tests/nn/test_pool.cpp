// max_pool2d, avg_pool2d, adaptive_avg_pool2d against float64 references written out per window
// (torch's definitions: padding, dilation, count_include_pad, adaptive windows), gradcheck, modules.
#include <doctest/doctest.h>

#include <cmath>

#include "kiln/autograd/gradcheck.hpp"
#include "kiln/nn.hpp"
#include "kiln/tensor/random.hpp"
#include "../autograd/gradcheck_inputs.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_pool {

using namespace kiln;
using kiln::testing::Inputs;
using kiln::testing::sample;
namespace F = kiln::nn::functional;

TEST_CASE("max_pool2d and avg_pool2d: values per window, padding, dilation, count_include_pad") {
  const Tensor<double> x = sample({2, 3, 7, 6}, 1);
  // max, kernel 3, stride 2, padding 1, dilation 1
  const Tensor<double> m = F::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  REQUIRE(m.shape() == Shape{2, 3, 4, 3});
  // avg, kernel 3, stride 2, padding 1, with and without the padding in the divisor
  const Tensor<double> a = F::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true);
  const Tensor<double> a2 = F::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t oh = 0; oh < 4; ++oh)
        for (int64_t ow = 0; ow < 3; ++ow) {
          double best = -INFINITY, s = 0;
          int64_t count = 0;
          for (int64_t i = 0; i < 3; ++i)
            for (int64_t j = 0; j < 3; ++j) {
              const int64_t r = oh * 2 - 1 + i, q = ow * 2 - 1 + j;
              if (r < 0 || r >= 7 || q < 0 || q >= 6) continue;
              best = std::max(best, x[n][c][r][q].item());
              s += x[n][c][r][q].item();
              ++count;
            }
          const int64_t r0 = oh * 2 - 1, c0 = ow * 2 - 1;
          const int64_t padded = (std::min<int64_t>(r0 + 3, 8) - r0) * (std::min<int64_t>(c0 + 3, 7) - c0);
          CHECK(m[n][c][oh][ow].item() == best);
          CHECK(a[n][c][oh][ow].item() == doctest::Approx(s / double(padded)).epsilon(1e-13));
          CHECK(a2[n][c][oh][ow].item() == doctest::Approx(s / double(count)).epsilon(1e-13));
        }
  // dilation 2, kernel 2, stride 1
  const Tensor<double> md = F::max_pool2d(x, {2, 2}, {1, 1}, {0, 0}, {2, 2});
  REQUIRE(md.shape() == Shape{2, 3, 5, 4});
  CHECK(md[1][2][3][1].item() == std::max({x[1][2][3][1].item(), x[1][2][3][3].item(), x[1][2][5][1].item(), x[1][2][5][3].item()}));
  CHECK_THROWS_AS(F::max_pool2d(x, {9, 9}), ShapeError);
  CHECK_THROWS_AS(F::avg_pool2d(Tensor<double>(sample({3, 7, 6}, 2)), {2, 2}), ShapeError);
}

TEST_CASE("adaptive_avg_pool2d: PyTorch's windows floor(i H / o) .. ceil((i + 1) H / o)") {
  const Tensor<double> x = sample({1, 2, 7, 5}, 3);
  const Tensor<double> y = F::adaptive_avg_pool2d(x, {3, 2});
  REQUIRE(y.shape() == Shape{1, 2, 3, 2});
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t r0 = i * 7 / 3, r1 = ((i + 1) * 7 + 2) / 3, c0 = j * 5 / 2, c1 = ((j + 1) * 5 + 1) / 2;
        double s = 0;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t q = c0; q < c1; ++q) s += x[0][c][r][q].item();
        CHECK(y[0][c][i][j].item() == doctest::Approx(s / double((r1 - r0) * (c1 - c0))).epsilon(1e-13));
      }
  CHECK(F::adaptive_avg_pool2d(x, {1, 1})[0][1][0][0].item() == doctest::Approx(mean(x.select(1, 1)).item()).epsilon(1e-13));
}

TEST_CASE("pooling gradients pass gradcheck; modules") {
  const Tensor<double> x = sample({2, 2, 6, 5}, 4);
  for (const auto& f : std::vector<std::function<Tensor<double>(const Inputs&)>>{
           [](const Inputs& in) { return F::max_pool2d(in[0], {2, 2}); },
           [](const Inputs& in) { return F::max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); },
           [](const Inputs& in) { return F::avg_pool2d(in[0], {3, 3}, {2, 1}, {1, 1}); },
           [](const Inputs& in) { return F::avg_pool2d(in[0], {2, 2}, {2, 2}, {1, 1}, false); },
           [](const Inputs& in) { return F::adaptive_avg_pool2d(in[0], {4, 3}); }}) {
    const auto r = autograd::gradcheck(f, {x});
    INFO(r.message);
    CHECK(r.ok);
  }
  nn::MaxPool2d mp(2);
  nn::AvgPool2d ap(2);
  nn::AdaptiveAvgPool2d gap(1, 1);
  const Tensor<float> in = randn<float>({4, 8, 28, 28});
  CHECK(mp(in).shape() == Shape{4, 8, 14, 14});
  CHECK(ap(in).shape() == Shape{4, 8, 14, 14});
  CHECK(gap(in).shape() == Shape{4, 8, 1, 1});
}

TEST_CASE("max_pool2d: a NaN wins its window and ties go to the first maximum, on the 2x2 fast path and the general one") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // One 2x4 plane: window 0 holds a NaN after a larger value, window 1 a tie between its 2nd and 4th taps.
  const Tensor<float> x = tensor<float>({1, 5, 7, 3, nan, 2, 1, 7}).reshape({1, 1, 2, 4});
  for (const bool fast : {true, false}) {
    INFO((fast ? "2x2 stride 2" : "general loop (stride {1, 2}: the same two windows of a 2-row plane)"));
    Tensor<float> xg = x.clone().requires_grad_();
    const Tensor<float> y = fast ? F::max_pool2d(xg, {2, 2}) : F::max_pool2d(xg, {2, 2}, {1, 2});
    CHECK(std::isnan(y.contiguous().data_ptr()[0]));
    CHECK(y.contiguous().data_ptr()[1] == 7.0f);
    sum(y).backward();
    const std::vector<float> g = xg.grad().contiguous().to_vector();
    CHECK(g == std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0});  // the NaN's place and the first 7
  }
}

TEST_CASE("max_pool2d on bfloat16: the float result rounded, and overlapping windows' gradients added in float") {
  const Tensor<float> x = randn<float>({2, 3, 6, 6});
  const Tensor<bfloat16> xb = x.to<bfloat16>();
  const Tensor<float> expected = F::max_pool2d(xb.to<float>(), {3, 3}, {1, 1});
  Tensor<bfloat16> leaf = xb.clone().requires_grad_();
  const Tensor<bfloat16> y = F::max_pool2d(leaf, {3, 3}, {1, 1});  // windows overlap: gradients add up
  CHECK(double(amax(abs(y.to<float>() - expected)).item()) == 0.0);
  sum(y).backward();
  Tensor<float> lf = xb.to<float>().requires_grad_();
  sum(F::max_pool2d(lf, {3, 3}, {1, 1})).backward();
  // Each gradient is a count of windows (at most 9): exact in bfloat16.
  CHECK(double(amax(abs(leaf.grad().to<float>() - lf.grad())).item()) == 0.0);
}

}  // namespace test_nn_pool
