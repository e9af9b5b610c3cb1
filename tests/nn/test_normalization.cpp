// layer_norm, group_norm, batch_norm against float64 formulas written out per element, their gradients
// by gradcheck, and the modules' buffers and train/eval behaviour (torch.nn's semantics).
#include <doctest/doctest.h>

#include <cmath>

#include "kiln/autograd/gradcheck.hpp"
#include "kiln/nn.hpp"
#include "kiln/tensor/random.hpp"
#include "../autograd/gradcheck_inputs.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_normalization {

using namespace kiln;
using kiln::testing::Inputs;
using kiln::testing::sample;
namespace F = kiln::nn::functional;

namespace {

// Normalizes values[i] for i in idx (biased variance).
void check_normalized(const std::vector<double>& got, const std::vector<double>& in, const std::vector<int64_t>& idx,
                      double eps) {
  double mu = 0, var = 0;
  for (int64_t i : idx) mu += in[size_t(i)];
  mu /= double(idx.size());
  for (int64_t i : idx) var += (in[size_t(i)] - mu) * (in[size_t(i)] - mu);
  var /= double(idx.size());
  for (int64_t i : idx) CHECK(got[size_t(i)] == doctest::Approx((in[size_t(i)] - mu) / std::sqrt(var + eps)).epsilon(1e-12));
}
}  // namespace

TEST_CASE("layer_norm and group_norm: values and gradients") {
  const Tensor<double> x = sample({2, 3, 4}, 1);
  const std::vector<double> in = x.contiguous().to_vector();
  const std::vector<double> ln = F::layer_norm(x, {3, 4}).contiguous().to_vector();
  for (int64_t n = 0; n < 2; ++n) {
    std::vector<int64_t> idx;
    for (int64_t k = 0; k < 12; ++k) idx.push_back(n * 12 + k);
    check_normalized(ln, in, idx, 1e-5);
  }
  const std::vector<double> gn = F::group_norm(x, 3).contiguous().to_vector();  // one channel per group
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c) {
      std::vector<int64_t> idx;
      for (int64_t k = 0; k < 4; ++k) idx.push_back(n * 12 + c * 4 + k);
      check_normalized(gn, in, idx, 1e-5);
    }
  auto r = autograd::gradcheck([](const Inputs& v) { return F::layer_norm(v[0], {4}, v[1], v[2]); },
                               {x, sample({4}, 2), sample({4}, 3)});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([](const Inputs& v) { return F::group_norm(v[0], 1, v[1], v[2]); },
                          {x, sample({3}, 4), sample({3}, 5)});
  INFO(r.message);
  CHECK(r.ok);
  CHECK_THROWS_AS(F::group_norm(x, 2), ShapeError);
  CHECK_THROWS_AS(F::layer_norm(x, {3}), ShapeError);
}

TEST_CASE("batch_norm: batch statistics in training, running statistics updated as PyTorch, eval uses them") {
  const Tensor<double> x = sample({4, 2, 3}, 6);
  const std::vector<double> in = x.contiguous().to_vector();
  Tensor<double> rm = zeros<double>({2}), rv = ones<double>({2});
  const std::vector<double> y = F::batch_norm(x, rm, rv, {}, {}, true, 0.1).contiguous().to_vector();
  for (int64_t c = 0; c < 2; ++c) {
    std::vector<int64_t> idx;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t l = 0; l < 3; ++l) idx.push_back(n * 6 + c * 3 + l);
    check_normalized(y, in, idx, 1e-5);
    double mu = 0, ss = 0;
    for (int64_t i : idx) mu += in[size_t(i)];
    mu /= 12;
    for (int64_t i : idx) ss += (in[size_t(i)] - mu) * (in[size_t(i)] - mu);
    CHECK(rm[c].item() == doctest::Approx(0.1 * mu).epsilon(1e-12));
    CHECK(rv[c].item() == doctest::Approx(0.9 + 0.1 * ss / 11).epsilon(1e-12));  // unbiased
  }
  // Eval: (x - running_mean) / sqrt(running_var + eps).
  const Tensor<double> e = F::batch_norm(x, rm, rv);
  CHECK(e[1][1][2].item() == doctest::Approx((x[1][1][2].item() - rm[1].item()) / std::sqrt(rv[1].item() + 1e-5)));
  // Eval with an affine (one pass with a per-channel scale and shift): every element against the float64
  // formula, and the gradients of x, weight and bias by gradcheck.
  const Tensor<double> w = sample({2}, 12), b = sample({2}, 13);
  const std::vector<double> ev = F::batch_norm(x, rm, rv, w, b).contiguous().to_vector();
  for (int64_t i = 0; i < 24; ++i) {
    const int64_t c = (i / 3) % 2;
    const double ref = (in[size_t(i)] - rm[c].item()) / std::sqrt(rv[c].item() + 1e-5) * w[c].item() + b[c].item();
    CHECK(ev[size_t(i)] == doctest::Approx(ref).epsilon(1e-12));
  }
  const auto re = autograd::gradcheck([&](const Inputs& v) { return F::batch_norm(v[0], rm, rv, v[1], v[2]); },
                                      {x, w, b});
  INFO(re.message);
  CHECK(re.ok);
  const auto r = autograd::gradcheck(
      [](const Inputs& v) { return F::batch_norm(v[0], Tensor<double>(), Tensor<double>(), v[1], v[2], true); },
      {x, sample({2}, 7), sample({2}, 8)});
  INFO(r.message);
  CHECK(r.ok);
  // 4-d input (planes of several values), with a weight only and with no affine at all.
  const auto r4 = autograd::gradcheck(
      [](const Inputs& v) { return F::batch_norm(v[0], Tensor<double>(), Tensor<double>(), v[1], Tensor<double>(), true); },
      {sample({3, 2, 2, 3}, 9), sample({2}, 10)});
  INFO(r4.message);
  CHECK(r4.ok);
  const auto bare = autograd::gradcheck(
      [](const Inputs& v) { return F::batch_norm(v[0], Tensor<double>(), Tensor<double>(), {}, {}, true); },
      {sample({5, 3, 2}, 11)});
  INFO(bare.message);
  CHECK(bare.ok);
  CHECK(F::batch_norm(sample({4, 2, 3}, 6), Tensor<double>(), Tensor<double>(), {}, {}, true).grad_fn() == nullptr);
  CHECK(F::batch_norm(sample({4, 2, 3}, 6).requires_grad_(), Tensor<double>(), Tensor<double>(), {}, {}, true)
            .grad_fn()->name() == "NativeBatchNormBackward");
}

TEST_CASE("BatchNorm2d module: buffers, train/eval, num_batches_tracked; LayerNorm and GroupNorm modules") {
  nn::BatchNorm2d bn(3);
  std::vector<std::string> buffers;
  for (auto& [name, t] : bn->named_buffers()) buffers.push_back(name);
  CHECK(buffers == std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"});
  const Tensor<float> x = randn<float>({4, 3, 5, 5});
  const Tensor<float> y = bn(x);
  CHECK(std::abs(double(mean(y).item())) < 1e-5);
  CHECK(bn->num_batches_tracked.item() == 1.0f);
  CHECK(bn->running_mean.requires_grad() == false);
  sum(y * y).backward();
  CHECK(bn->weight.grad().defined());
  bn->eval();
  const Tensor<float> z = bn(x);
  CHECK(bn->num_batches_tracked.item() == 1.0f);
  CHECK(z[0][1][2][3].item() == doctest::Approx((x[0][1][2][3].item() - bn->running_mean[1].item()) /
                                                std::sqrt(bn->running_var[1].item() + 1e-5)).epsilon(1e-5));
  CHECK_THROWS_AS(bn(randn<float>({4, 3})), ShapeError);
  nn::LayerNorm ln(Shape{5});
  nn::GroupNorm gn(1, 3);
  CHECK(ln(randn<float>({2, 5})).shape() == Shape{2, 5});
  CHECK(gn(x).shape() == x.shape());
}

}  // namespace test_nn_normalization
