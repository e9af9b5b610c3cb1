// nn::init (nn/init.hpp) against the published formulas: calculate_gain's table, the fans of Linear and conv
// weights, the bounds and standard deviations of the Xavier (Glorot and Bengio, 2010) and Kaiming (He et al., 2015)
// fills measured on large samples, the truncated normal's mean and variance from its closed form, orthogonal_'s
// Q^T Q = gain^2 I, dirac_ as the identity convolution, and that filling a parameter records no history.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_init {

using namespace kiln;
namespace init = kiln::nn::init;

namespace {

struct Moments {
  double mean = 0, std = 0, min = INFINITY, max = -INFINITY;
};
Moments moments(const Tensor<float>& t) {
  Moments m;
  const std::vector<float> v = t.contiguous().to_vector();
  for (float x : v) {
    m.mean += x;
    m.min = std::min(m.min, double(x));
    m.max = std::max(m.max, double(x));
  }
  m.mean /= double(v.size());
  for (float x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / double(v.size()));
  return m;
}

// A sample of n values from a distribution of standard deviation sd: its mean is within 5 standard errors of
// `mean`, its standard deviation within 2%.
void expect_distribution(const Tensor<float>& t, double mean, double sd, const char* what) {
  INFO(what);
  const Moments m = moments(t);
  CHECK(std::abs(m.mean - mean) < 5 * sd / std::sqrt(double(t.numel())));
  CHECK(m.std == doctest::Approx(sd).epsilon(0.02));
}

}  // namespace

TEST_CASE("calculate_gain and the fans follow torch.nn.init's table") {
  CHECK(init::calculate_gain(init::kLinear) == 1);
  CHECK(init::calculate_gain(init::kConv2D) == 1);
  CHECK(init::calculate_gain(init::kSigmoid) == 1);
  CHECK(init::calculate_gain(init::kTanh) == doctest::Approx(5.0 / 3));
  CHECK(init::calculate_gain(init::kReLU) == doctest::Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::kLeakyReLU) == doctest::Approx(std::sqrt(2 / (1 + 0.01 * 0.01))));
  CHECK(init::calculate_gain(init::kLeakyReLU, std::sqrt(5.0)) == doctest::Approx(std::sqrt(1.0 / 3)));
  CHECK(init::calculate_gain(init::kSELU) == 0.75);

  CHECK(init::calculate_fan_in_and_fan_out(empty<float>({10, 784})) == std::pair<int64_t, int64_t>{784, 10});
  CHECK(init::calculate_fan_in_and_fan_out(empty<float>({64, 32, 3, 3})) == std::pair<int64_t, int64_t>{288, 576});
  CHECK_THROWS_WITH_AS(init::calculate_fan_in_and_fan_out(empty<float>({5})),
                       doctest::Contains("at least 2 dims, got shape [5]"), ShapeError);
  // A tensor with no elements is left as it is (PyTorch warns); a zero kernel size too.
  CHECK(init::xavier_uniform_(empty<float>({0, 3})).shape() == Shape{0, 3});
  CHECK(init::kaiming_normal_(empty<float>({4, 0}), 0, init::kFanOut).shape() == Shape{4, 0});
  CHECK(init::dirac_(empty<float>({2, 2, 0})).numel() == 0);
}

TEST_CASE("xavier and kaiming fills: bounds and standard deviations from their fans and gains") {
  manual_seed(3);
  const Tensor<float> w = empty<float>({400, 600});  // fan_in 600, fan_out 400
  const double glorot = std::sqrt(6.0 / 1000);
  init::xavier_uniform_(w, 2.0);
  Moments m = moments(w);
  CHECK(m.max <= 2 * glorot);
  CHECK(m.min >= -2 * glorot);
  CHECK(m.max > 2 * glorot * 0.999);
  expect_distribution(w, 0, 2 * glorot / std::sqrt(3.0), "xavier_uniform_, gain 2");
  init::xavier_normal_(w);
  expect_distribution(w, 0, std::sqrt(2.0 / 1000), "xavier_normal_");

  init::kaiming_uniform_(w, 0, init::kFanIn, init::kReLU);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 600);
  m = moments(w);
  CHECK(m.max <= bound);
  CHECK(m.min >= -bound);
  expect_distribution(w, 0, bound / std::sqrt(3.0), "kaiming_uniform_, relu, fan_in");
  // (PyTorch's Linear: a = sqrt(5) gives the bound 1 / sqrt(fan_in))
  init::kaiming_uniform_(w, std::sqrt(5.0));
  CHECK(moments(w).max <= 1 / std::sqrt(600.0) + 1e-7);
  CHECK(moments(w).max > 0.999 / std::sqrt(600.0));

  const Tensor<float> conv = empty<float>({64, 32, 5, 5});  // fan_out 64 * 25
  init::kaiming_normal_(conv, 0, init::kFanOut, init::kReLU);
  expect_distribution(conv, 0, std::sqrt(2.0 / (64 * 25)), "kaiming_normal_, relu, fan_out");
  init::kaiming_normal_(conv, 0.2, init::kFanIn);
  expect_distribution(conv, 0, std::sqrt(2 / 1.04) / std::sqrt(32.0 * 25), "kaiming_normal_, leaky_relu 0.2");

  init::uniform_(w, -3, 5);
  m = moments(w);
  CHECK(m.min >= -3);
  CHECK(m.max < 5);
  expect_distribution(w, 1, 8 / std::sqrt(12.0), "uniform_(-3, 5)");
  init::normal_(w, 2, 0.5);
  expect_distribution(w, 2, 0.5, "normal_(2, 0.5)");
}

TEST_CASE("trunc_normal_: within [a, b], the truncated normal's mean and variance, deterministic by seed") {
  const auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi); };
  const auto Phi = [](double x) { return (1 + std::erf(x / std::numbers::sqrt2)) / 2; };
  struct Case { double mean, std, a, b; };
  for (const Case c : {Case{0, 1, -2, 2}, Case{1, 2, -1, 6}, Case{0, 1, 3, 4}, Case{0.5, 0.1, 0, 0.45}}) {
    CAPTURE(c.mean);
    CAPTURE(c.a);
    manual_seed(7);
    const Tensor<float> t = init::trunc_normal_(empty<float>({200000}), c.mean, c.std, c.a, c.b);
    const Moments m = moments(t);
    CHECK(m.min >= c.a);
    CHECK(m.max <= c.b);
    const double alpha = (c.a - c.mean) / c.std, beta = (c.b - c.mean) / c.std, z = Phi(beta) - Phi(alpha);
    const double shift = (phi(alpha) - phi(beta)) / z;
    const double sd = c.std * std::sqrt(1 + (alpha * phi(alpha) - beta * phi(beta)) / z - shift * shift);
    expect_distribution(t, c.mean + c.std * shift, sd, "trunc_normal_");
    manual_seed(7);
    CHECK(init::trunc_normal_(empty<float>({200000}), c.mean, c.std, c.a, c.b).to_vector() == t.to_vector());
  }
  // Far in the tail, where drawing and rejecting would almost never accept: still within [a, b].
  const Moments tail = moments(init::trunc_normal_(empty<float>({1000}), 0, 1, 6, 6.5));
  CHECK(tail.min >= 6);
  CHECK(tail.max <= 6.5);
  CHECK_THROWS_WITH_AS(init::trunc_normal_(empty<float>({3}), 0, 1, 2, 2), doctest::Contains("a < b"),
                       std::invalid_argument);
}

TEST_CASE("orthogonal_: orthonormal rows of a wide and columns of a tall tensor, times gain") {
  for (const Shape& shape : {Shape{5, 8}, Shape{8, 5}, Shape{6, 2, 2, 2}, Shape{4, 4}}) {
    CAPTURE(shape);
    const Tensor<double> q = init::orthogonal_(empty<double>(shape), 2.0);
    const Tensor<double> flat = q.reshape({shape[0], -1});
    const bool wide = flat.size(0) < flat.size(1);
    const Tensor<double> gram = wide ? matmul(flat, flat.t()) : matmul(flat.t(), flat);
    const int64_t n = gram.size(0);
    const std::vector<double> g = gram.contiguous().to_vector();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) CHECK(g[size_t(i * n + j)] == doctest::Approx(i == j ? 4.0 : 0.0).scale(1));
  }
  CHECK_THROWS_AS(init::orthogonal_(empty<float>({4})), ShapeError);
}

TEST_CASE("dirac_ makes the identity convolution, per group; eye_, constant_, ones_, zeros_") {
  const Tensor<float> x = randn<float>({2, 4, 7, 6});
  const Tensor<float> w = init::dirac_(empty<float>({4, 4, 3, 3}));
  // (to rounding: a 3x3 convolution may run as Winograd's, which adds and subtracts transformed tiles)
  CHECK(max(abs(nn::functional::conv2d(x, w, {}, {1, 1}, {1, 1}) - x)).item() < 1e-5);
  // Two groups of 3 output channels over 2 input channels each: outputs 0, 1 and 3, 4 copy inputs 0, 1 and 2, 3.
  const Tensor<float> grouped = init::dirac_(empty<float>({6, 2, 1, 1}), 2);
  const Tensor<float> y = nn::functional::conv2d(x, grouped, {}, {1, 1}, {0, 0}, {1, 1}, 2);
  for (auto [out, in] : {std::pair{0, 0}, {1, 1}, {3, 2}, {4, 3}})
    CHECK(y.select(1, out).contiguous().to_vector() == x.select(1, in).contiguous().to_vector());
  CHECK(sum(abs(y.select(1, 2))).item() == 0);
  CHECK(sum(abs(y.select(1, 5))).item() == 0);
  CHECK_THROWS_WITH_AS(init::dirac_(empty<float>({5, 2, 3}), 2), doctest::Contains("do not divide into 2 groups"),
                       std::invalid_argument);
  CHECK_THROWS_AS(init::dirac_(empty<float>({4, 4})), ShapeError);

  CHECK(init::eye_(empty<float>({2, 3})).to_vector() == std::vector<float>{1, 0, 0, 0, 1, 0});
  CHECK_THROWS_AS(init::eye_(empty<float>({2, 3, 1})), ShapeError);
  CHECK(init::constant_(empty<float>({3}), 0.5).to_vector() == std::vector<float>{0.5f, 0.5f, 0.5f});
  CHECK(init::ones_(empty<float>({2})).to_vector() == std::vector<float>{1, 1});
  CHECK(init::zeros_(full<float>({2}, 3.0f)).to_vector() == std::vector<float>{0, 0});
}

TEST_CASE("nn::init fills a module's parameters in place, records no history, and keeps them leaves") {
  nn::Linear fc(6, 4);
  for (auto& [name, p] : fc->named_parameters()) {
    if (p.dim() >= 2) init::orthogonal_(p);
    else init::zeros_(p);
  }
  CHECK(fc->weight.is_leaf());
  CHECK(fc->weight.requires_grad());
  CHECK(fc->weight.grad_fn() == nullptr);
  CHECK(fc->bias.to_vector() == std::vector<float>(4, 0.0f));
  const Tensor<float> gram = matmul(fc->weight, fc->weight.t());
  for (int i = 0; i < 4; ++i) CHECK(gram.to_vector()[size_t(i * 5)] == doctest::Approx(1).epsilon(1e-6));
  sum(fc(randn<float>({3, 6}))).backward();
  CHECK(fc->weight.grad().defined());
}

}  // namespace test_nn_init
