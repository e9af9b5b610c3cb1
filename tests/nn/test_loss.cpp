// Losses against float64 formulas written out per element (torch.nn.functional's definitions), and
// gradcheck of each.
#include <doctest/doctest.h>

#include <cmath>

#include "kiln/autograd/gradcheck.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/tensor/random.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_loss {

using namespace kiln;
namespace F = kiln::nn::functional;
using nn::Reduction;

namespace {
Tensor<double> sample(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor<double>(randn<double>(shape, &gen));
}
Tensor<int64_t> classes(std::initializer_list<int64_t> v) {
  Tensor<int64_t> t = empty<int64_t>({int64_t(v.size())});
  int64_t k = 0;
  for (int64_t x : v) t.data_ptr()[k++] = x;
  return t;
}
// A tensor of the given shape holding values (row-major), as the torch tensors of the reference comments.
Tensor<double> values(const Shape& shape, const std::vector<double>& v) {
  Tensor<double> out = empty<double>(shape);
  for (size_t i = 0; i < v.size(); ++i) out.data_ptr()[i] = v[i];
  return out;
}
// Each element of t against want at relative 1e-13 (infinities must match exactly).
void check_values(const Tensor<double>& t, const std::vector<double>& want) {
  REQUIRE(t.numel() == int64_t(want.size()));
  const Tensor<double> c = t.contiguous();
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element ", i);
    if (std::isinf(want[i])) CHECK(c.data_ptr()[i] == want[i]);
    else CHECK(c.data_ptr()[i] == doctest::Approx(want[i]).epsilon(1e-13));
  }
}
using Inputs = std::vector<Tensor<double>>;
double log_sum_exp_row(const Tensor<double>& x, int64_t i) {
  double m = -INFINITY, s = 0;
  for (int64_t c = 0; c < x.size(1); ++c) m = std::max(m, x[i][c].item());
  for (int64_t c = 0; c < x.size(1); ++c) s += std::exp(x[i][c].item() - m);
  return m + std::log(s);
}
}  // namespace

TEST_CASE("elementwise losses: values and gradients") {
  const Tensor<double> x = sample({3, 4}, 1), y = sample({3, 4}, 2);
  double mse = 0, l1 = 0, sl1 = 0, bce = 0;
  const Tensor<double> prob = Tensor<double>(sigmoid(y));  // targets in (0, 1) for BCE
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      const double a = x[i][j].item(), b = y[i][j].item(), d = std::abs(a - b), p = prob[i][j].item();
      mse += d * d;
      l1 += d;
      sl1 += d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25;
      bce += -(p * std::log(1 / (1 + std::exp(-a))) + (1 - p) * std::log(1 - 1 / (1 + std::exp(-a))));
    }
  CHECK(F::mse_loss(x, y).item() == doctest::Approx(mse / 12).epsilon(1e-13));
  CHECK(F::l1_loss(x, y, Reduction::Sum).item() == doctest::Approx(l1).epsilon(1e-13));
  CHECK(F::smooth_l1_loss(x, y, Reduction::Mean, 0.5).item() == doctest::Approx(sl1 / 12).epsilon(1e-13));
  CHECK(F::binary_cross_entropy_with_logits(x, prob).item() == doctest::Approx(bce / 12).epsilon(1e-12));
  CHECK(F::mse_loss(x, y, Reduction::None).shape() == Shape{3, 4});
  // Stable for large logits (no inf): log(1 + e^-100) ~ 0.
  const Tensor<double> big = full<double>({2}, 100.0), ones_ = ones<double>({2});
  CHECK(F::binary_cross_entropy_with_logits(big, ones_).item() == doctest::Approx(0.0));
  CHECK_THROWS_AS(F::mse_loss(x, sample({4, 3}, 3)), ShapeError);
  for (const auto& [name, f] : std::vector<std::pair<const char*, std::function<Tensor<double>(const Inputs&)>>>{
           {"mse", [](const Inputs& in) { return F::mse_loss(in[0], in[1]); }},
           {"l1", [](const Inputs& in) { return F::l1_loss(in[0], in[1], Reduction::None); }},
           {"smooth_l1", [](const Inputs& in) { return F::smooth_l1_loss(in[0], in[1], Reduction::Sum, 0.7); }},
           {"bce", [](const Inputs& in) { return F::binary_cross_entropy_with_logits(in[0], Tensor<double>(sigmoid(in[1]))); }},
           {"bce pos_weight", [](const Inputs& in) {
              return F::binary_cross_entropy_with_logits(in[0], Tensor<double>(sigmoid(in[1])), Reduction::Mean,
                                                         Tensor<double>(full<double>({4}, 2.0)));
            }}}) {
    const auto r = autograd::gradcheck(f, {x, y});
    INFO(name, ": ", r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("cross_entropy and nll_loss: class indices, weights, ignore_index, label smoothing, probabilities") {
  const Tensor<double> x = sample({4, 5}, 4);
  const Tensor<int64_t> t = classes({2, 0, 4, 2});
  // Plain: mean over samples of logsumexp - x[target].
  double plain = 0;
  for (int64_t i = 0; i < 4; ++i) plain += log_sum_exp_row(x, i) - x[i][t[i].item()].item();
  CHECK(F::cross_entropy(x, t).item() == doctest::Approx(plain / 4).epsilon(1e-13));
  // Weights and an ignored sample: the mean divides by the counted samples' weights.
  const Tensor<double> w = Tensor<double>(abs(sample({5}, 5)) + 0.5);
  const Tensor<int64_t> t2 = classes({2, -100, 4, 1});
  double num = 0, den = 0;
  for (int64_t i : {0, 2, 3}) {
    const int64_t c = t2[i].item();
    num += w[c].item() * (log_sum_exp_row(x, i) - x[i][c].item());
    den += w[c].item();
  }
  CHECK(F::cross_entropy(x, t2, w).item() == doctest::Approx(num / den).epsilon(1e-13));
  // Label smoothing eps: (1 - eps) nll + eps / C * sum_c -logp_c (no weights).
  const double eps = 0.1;
  double smooth = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const double lse = log_sum_exp_row(x, i);
    double all = 0;
    for (int64_t c = 0; c < 5; ++c) all += lse - x[i][c].item();
    smooth += (1 - eps) * (lse - x[i][t[i].item()].item()) + eps / 5 * all;
  }
  CHECK(F::cross_entropy(x, t, std::nullopt, -100, Reduction::Mean, eps).item() == doctest::Approx(smooth / 4).epsilon(1e-13));
  // Probabilities: the same as one-hot indices.
  Tensor<double> onehot = zeros<double>({4, 5});
  for (int64_t i = 0; i < 4; ++i) onehot.data_ptr()[i * 5 + t[i].item()] = 1;
  CHECK(F::cross_entropy(x, onehot).item() == doctest::Approx(plain / 4).epsilon(1e-13));
  // nll_loss of log_softmax is cross_entropy; errors name the op.
  CHECK(F::nll_loss(Tensor<double>(log_softmax(x, 1)), t, std::nullopt, -100, Reduction::Sum).item() ==
        doctest::Approx(plain).epsilon(1e-13));
  CHECK_THROWS_WITH_AS(F::cross_entropy(x, classes({2, 0, 5, 1})), "nll_loss: target 5 is out of range for 5 classes",
                       std::out_of_range);
  CHECK_THROWS_AS(F::cross_entropy(x, classes({1, 2})), ShapeError);
  // Gradients, including a [N, C, L] input.
  auto r = autograd::gradcheck([&](const Inputs& in) { return F::cross_entropy(in[0], t2, in[1], -100, Reduction::Mean, 0.2); },
                               {x, w});
  INFO(r.message);
  CHECK(r.ok);
  const Tensor<double> x3 = sample({2, 3, 4}, 6);
  Tensor<int64_t> t3 = zeros<int64_t>({2, 4});
  for (int64_t i = 0; i < 8; ++i) t3.data_ptr()[i] = i % 3;
  r = autograd::gradcheck([&](const Inputs& in) { return F::cross_entropy(in[0], t3); }, {x3});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("cross_entropy and nll_loss: every target ignored gives a NaN mean and a zero gradient, as PyTorch") {
  // torch 2.15, float64: x = [[0.1, -0.5, 1.2], [0.3, 0.8, -1.0]], target = [-100, -100], weight None or
  // [0.5, 2.0, 1.0], label_smoothing 0 or 0.2, reduction 'mean': the loss is nan and x.grad is all 0 (nll_loss's
  // backward skips ignored targets); F.nll_loss(x, target) likewise. With target [2, -100], weight
  // [0.5, 2.0, 1.0], label_smoothing 0.2: loss 0.6929741646843592, x.grad row 0
  // [0.19362436566933447, -0.008776307219543651, -0.18484805844979088], row 1 zeros.
  const std::vector<double> xv{0.1, -0.5, 1.2, 0.3, 0.8, -1.0};
  const auto input = [&] {
    Tensor<double> x = empty<double>({2, 3});
    for (int64_t i = 0; i < 6; ++i) x.data_ptr()[i] = xv[size_t(i)];
    x.requires_grad_();
    return x;
  };
  Tensor<double> w = empty<double>({3});
  w.data_ptr()[0] = 0.5, w.data_ptr()[1] = 2.0, w.data_ptr()[2] = 1.0;
  const auto check_zero_grad = [](const Tensor<double>& x) {
    for (int64_t i = 0; i < 6; ++i) CHECK(x.grad().contiguous().data_ptr()[i] == 0.0);
  };
  for (const double eps : {0.0, 0.2})
    for (const bool weighted : {false, true}) {
      INFO("label_smoothing ", eps, ", weighted ", weighted);
      Tensor<double> x = input();
      const Tensor<double> loss = F::cross_entropy(x, classes({-100, -100}), weighted ? F::OptionalTensor<double>(w)
                                                                                       : std::nullopt,
                                                   -100, Reduction::Mean, eps);
      CHECK(std::isnan(loss.item()));
      loss.backward();
      check_zero_grad(x);
    }
  Tensor<double> x = input();
  const Tensor<double> nll = F::nll_loss(x, classes({-100, -100}));
  CHECK(std::isnan(nll.item()));
  nll.backward();
  check_zero_grad(x);
  Tensor<double> part = input();
  const Tensor<double> loss = F::cross_entropy(part, classes({2, -100}), w, -100, Reduction::Mean, 0.2);
  CHECK(loss.item() == doctest::Approx(0.6929741646843592).epsilon(1e-13));
  loss.backward();
  const double* g = part.grad().contiguous().data_ptr();
  CHECK(g[0] == doctest::Approx(0.19362436566933447).epsilon(1e-12));
  CHECK(g[1] == doctest::Approx(-0.008776307219543651).epsilon(1e-12));
  CHECK(g[2] == doctest::Approx(-0.18484805844979088).epsilon(1e-12));
  CHECK(g[3] == 0.0);
  CHECK(g[4] == 0.0);
  CHECK(g[5] == 0.0);
}

TEST_CASE("huber_loss: values, gradients and reductions, as PyTorch") {
  // torch 2.15, float64: F.huber_loss(x, t, reduction, delta=1.5), x = [1.0, 2.0, 0.5, -1.0, 3.5, -0.2],
  // t = [1.0, 0.5, 0.0, 0.8, 0.0, 0.3]: 'none' [0, 1.125, 0.125, 1.575, 4.125, 0.125], gradient of its sum
  // [0, 1.5, 0.5, -1.5, 1.5, -0.5]; 'mean' 1.1791666666666667; 'sum' 7.075; delta 0 refused.
  const std::vector<double> xv{1.0, 2.0, 0.5, -1.0, 3.5, -0.2}, tv{1.0, 0.5, 0.0, 0.8, 0.0, 0.3};
  Tensor<double> x = empty<double>({6}), t = empty<double>({6});
  for (int64_t i = 0; i < 6; ++i) x.data_ptr()[i] = xv[size_t(i)], t.data_ptr()[i] = tv[size_t(i)];
  x.requires_grad_();
  const Tensor<double> none = F::huber_loss(x, t, Reduction::None, 1.5);
  sum(none).backward();
  const std::vector<double> want{0.0, 1.125, 0.125, 1.5750000000000002, 4.125, 0.125}, grad{0.0, 1.5, 0.5, -1.5, 1.5, -0.5};
  CHECK(none.shape() == Shape{6});
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(none.contiguous().data_ptr()[i] == doctest::Approx(want[size_t(i)]).epsilon(1e-13));
    CHECK(x.grad().contiguous().data_ptr()[i] == doctest::Approx(grad[size_t(i)]).epsilon(1e-13));
  }
  CHECK(F::huber_loss(x, t, Reduction::Mean, 1.5).item() == doctest::Approx(1.1791666666666667).epsilon(1e-13));
  CHECK(F::huber_loss(x, t, Reduction::Sum, 1.5).item() == doctest::Approx(7.075).epsilon(1e-13));
  CHECK_THROWS_AS(F::huber_loss(x, t, Reduction::Mean, 0.0), std::invalid_argument);
  const auto r = autograd::gradcheck([&](const Inputs& in) { return F::huber_loss(in[0], in[1], Reduction::Mean, 0.8); },
                                     {sample({3, 4}, 7), sample({3, 4}, 8)});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("kl_div: values, gradients, zero targets and log_target, as PyTorch") {
  // torch 2.15, float64: F.kl_div(x, t, reduction), x = [-1.2, -0.3, -2.5, -0.7, -1.0, -0.1],
  // t = [0.2, 0.0, 0.5, 0.3, 0.0, 1.0]: 'none' [-0.0818875824868201, 0, 0.9034264097200273,
  // -0.15119184129778082, 0, 0.1], gradient of its sum -t; 'mean' 0.12839116432257106; 'sum' 0.7703469859354264.
  // log_target=True, t = [-1.0, -2.0, 0.3, -0.5, -3.0, 0.0], 'sum': 3.7448425631516544, gradient -exp(t).
  const auto vec = [](std::vector<double> v) { return values({int64_t(v.size())}, v); };
  Tensor<double> x = vec({-1.2, -0.3, -2.5, -0.7, -1.0, -0.1});
  const Tensor<double> t = vec({0.2, 0.0, 0.5, 0.3, 0.0, 1.0}), lt = vec({-1.0, -2.0, 0.3, -0.5, -3.0, 0.0});
  x.requires_grad_();
  const Tensor<double> none = F::kl_div(x, t, Reduction::None);
  sum(none).backward();
  const std::vector<double> want{-0.0818875824868201, 0.0, 0.9034264097200273, -0.15119184129778082, 0.0, 0.1};
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(none.contiguous().data_ptr()[i] == doctest::Approx(want[size_t(i)]).epsilon(1e-13));
    CHECK(x.grad().contiguous().data_ptr()[i] == doctest::Approx(-t.data_ptr()[i]).epsilon(1e-13));
  }
  CHECK(F::kl_div(x, t).item() == doctest::Approx(0.12839116432257106).epsilon(1e-13));
  CHECK(F::kl_div(x, t, Reduction::Sum).item() == doctest::Approx(0.7703469859354264).epsilon(1e-13));
  x.zero_grad();
  const Tensor<double> logt = F::kl_div(x, lt, Reduction::Sum, true);
  CHECK(logt.item() == doctest::Approx(3.7448425631516544).epsilon(1e-13));
  logt.backward();
  for (int64_t i = 0; i < 6; ++i)
    CHECK(x.grad().contiguous().data_ptr()[i] == doctest::Approx(-std::exp(lt.data_ptr()[i])).epsilon(1e-13));
}

TEST_CASE("binary_cross_entropy: clamped logs, PyTorch's gradient at 0 and 1, weight, refused values, as PyTorch") {
  // torch 2.15, float64 (scripts/loss_reference.py): x = [[0.2, 0.9, 0.5, 0.0], [1.0, 1e-50, 0.7, 0.35]],
  // y = [[0.0, 1.0, 0.3, 0.0], [0.0, 1.0, 0.25, 0.6]], w = [0.5, 2.0, 1.0, 1.5]. F.binary_cross_entropy(x, y,
  // reduction='none') and the gradients of its sum as below (the log terms clamped at -100: 100 where x = 1, y = 0
  // and where x = 1e-50, y = 1; the x gradient's denominator clamped at float32 1e-12, the y gradient -logit(x));
  // with weight=w: 'mean' 31.651362248558264 and its x gradient, 'sum' 253.21089798846612. Input or target outside
  // [0, 1] or NaN: "all elements of input (target) should be between 0 and 1".
  Tensor<double> x = values({2, 4}, {0.2, 0.9, 0.5, 0.0, 1.0, 1e-50, 0.7, 0.35});
  Tensor<double> y = values({2, 4}, {0.0, 1.0, 0.3, 0.0, 0.0, 1.0, 0.25, 0.6});
  const Tensor<double> w = values({4}, {0.5, 2.0, 1.0, 1.5});
  x.requires_grad_();
  y.requires_grad_();
  const Tensor<double> none = F::binary_cross_entropy(x, y, std::nullopt, Reduction::None);
  CHECK(none.shape() == Shape{2, 4});
  sum(none).backward();
  check_values(none, {0.22314355131420976, 0.10536051565782628, 0.6931471805599453, 0.0, 100.0, 100.0,
                      0.992148339229135, 0.8022064411361883});
  check_values(x.grad(), {1.2499999999999998, -1.1111111111111112, 0.8, 0.0, 1000000003995.8029, -1000000003995.8029,
                          2.1428571428571423, -1.098901098901099});
  check_values(y.grad(), {1.3862943611198906, -2.1972245773362196, -0.0, INFINITY, -INFINITY, 115.12925464970229,
                          -0.8472978603872034, 0.6190392084062235});
  x.zero_grad();
  const Tensor<double> mean = F::binary_cross_entropy(x, y.detach(), w);
  CHECK(mean.item() == doctest::Approx(31.651362248558264).epsilon(1e-13));
  mean.backward();
  check_values(x.grad(), {0.07812499999999999, -0.2777777777777778, 0.1, 0.0, 62500000249.73768, -250000000998.9507,
                          0.2678571428571428, -0.20604395604395606});
  CHECK(F::binary_cross_entropy(x, y, w, Reduction::Sum).item() == doctest::Approx(253.21089798846612).epsilon(1e-13));
  // Refused: values outside [0, 1] (NaN too) in the input or the target, a weight that does not broadcast to the input.
  const Tensor<double> half = full<double>({2}, 0.5);
  for (const double bad : {1.5, -0.1, double(NAN)}) {
    INFO("value ", bad);
    const Tensor<double> b = values({2}, {0.5, bad});
    CHECK_THROWS_AS(F::binary_cross_entropy(b, half), std::invalid_argument);
    CHECK_THROWS_AS(F::binary_cross_entropy(half, b), std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy(values({2}, {0.5, 1.5}), half),
                       "binary_cross_entropy: all elements of input should be in [0, 1], got 1.5 at flat index 1 of "
                       "shape [2]",
                       std::invalid_argument);
  CHECK_THROWS_AS(F::binary_cross_entropy(x, y, values({2}, {1.0, 2.0})), ShapeError);
  CHECK_THROWS_AS(F::binary_cross_entropy(x, y, full<double>({3, 2, 4}, 1.0)), ShapeError);
  CHECK_THROWS_AS(F::binary_cross_entropy(x, values({4}, {0.0, 1.0, 0.5, 0.5})), ShapeError);
  // Away from the clamps the gradients are the derivatives of the loss, for the input and the target.
  const auto r = autograd::gradcheck(
      [&](const Inputs& in) {
        return F::binary_cross_entropy(Tensor<double>(sigmoid(in[0])), Tensor<double>(sigmoid(in[1])), w);
      },
      {sample({3, 4}, 9), sample({3, 4}, 10)});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("binary_cross_entropy_with_logits: weight broadcast to the input, with and without pos_weight, as PyTorch") {
  // torch 2.15, float64 (scripts/loss_reference.py): x = [[0.3, -1.2, 2.5], [-0.4, 0.0, 4.0]],
  // y = [[1.0, 0.0, 0.6], [0.2, 0.5, 1.0]], weight w = [[0.5], [2.0]], pos_weight p = [1.0, 3.0, 0.5]:
  // F.binary_cross_entropy_with_logits(x, y, weight=w, reduction='none') as below; with pos_weight=p, 'mean'
  // 0.8188665696438613 and its gradient as below, 'sum' 4.913199417863168. weight [2] or [2, 2, 1] refused (it does
  // not broadcast to the input, or broadcasting would grow it).
  Tensor<double> x = values({2, 3}, {0.3, -1.2, 2.5, -0.4, 0.0, 4.0});
  const Tensor<double> y = values({2, 3}, {1.0, 0.0, 0.6, 0.2, 0.5, 1.0});
  const Tensor<double> w = values({2, 1}, {0.5, 2.0}), p = values({3}, {1.0, 3.0, 0.5});
  x.requires_grad_();
  check_values(F::binary_cross_entropy_with_logits(x, y, Reduction::None, std::nullopt, w),
               {0.27717762223426357, 0.1316412336690156, 0.5394448671462748, 1.1860305047999051, 1.3862943611198906,
                0.036299855835619475});
  const Tensor<double> mean = F::binary_cross_entropy_with_logits(x, y, Reduction::Mean, p, w);
  CHECK(mean.item() == doctest::Approx(0.8188665696438613).epsilon(1e-13));
  mean.backward();
  check_values(x.grad(), {-0.035463123599028416, 0.019289601375081865, 0.028908272832094142, 0.06710411329584932,
                          -0.16666666666666666, -0.0029977016603485915});
  CHECK(F::binary_cross_entropy_with_logits(x, y, Reduction::Sum, p, w).item() ==
        doctest::Approx(4.913199417863168).epsilon(1e-13));
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy_with_logits(x, y, Reduction::Mean, std::nullopt, values({2}, {1.0, 2.0})),
                       "binary_cross_entropy_with_logits: shapes [2] and [2, 3] cannot be broadcast", ShapeError);
  CHECK_THROWS_WITH_AS(F::binary_cross_entropy_with_logits(x, y, Reduction::Mean, p, full<double>({2, 2, 1}, 1.0)),
                       "binary_cross_entropy_with_logits: weight of shape [2, 2, 1] does not broadcast to the input's "
                       "shape [2, 3]",
                       ShapeError);
  const auto r = autograd::gradcheck(
      [&](const Inputs& in) {
        return F::binary_cross_entropy_with_logits(in[0], Tensor<double>(sigmoid(in[1])), Reduction::Sum, p, w);
      },
      {sample({2, 3}, 11), sample({2, 3}, 12)});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("kl_div: reduction BatchMean, as PyTorch's 'batchmean'; the other losses refuse it") {
  // torch 2.15, float64 (scripts/loss_reference.py): x = [[-1.2, -0.3], [-2.5, -0.7], [-1.0, -0.1]],
  // t = [[0.2, 0.0], [0.5, 0.3], [0.0, 1.0]]: F.kl_div(x, t, reduction='batchmean') 0.2567823286451421 (the sum / 3),
  // gradient -t / 3; log_target=True, t = [[-1.0, -2.0], [0.3, -0.5], [-3.0, 0.0]]: 1.2482808543838848; a 0-d input
  // -0.5 with target 0.4: -0.166516292749662 (the sum, not divided). F.mse_loss(reduction='batchmean'):
  // "batchmean is not a valid value for reduction".
  Tensor<double> x = values({3, 2}, {-1.2, -0.3, -2.5, -0.7, -1.0, -0.1});
  const Tensor<double> t = values({3, 2}, {0.2, 0.0, 0.5, 0.3, 0.0, 1.0});
  const Tensor<double> lt = values({3, 2}, {-1.0, -2.0, 0.3, -0.5, -3.0, 0.0});
  x.requires_grad_();
  const Tensor<double> batch = F::kl_div(x, t, Reduction::BatchMean);
  CHECK(batch.item() == doctest::Approx(0.2567823286451421).epsilon(1e-13));
  batch.backward();
  check_values(x.grad(), {-0.06666666666666667, -0.0, -0.16666666666666666, -0.09999999999999999, -0.0,
                          -0.3333333333333333});
  CHECK(F::kl_div(x, lt, Reduction::BatchMean, true).item() == doctest::Approx(1.2482808543838848).epsilon(1e-13));
  CHECK(F::kl_div(full<double>({}, -0.5), full<double>({}, 0.4), Reduction::BatchMean).item() ==
        doctest::Approx(-0.166516292749662).epsilon(1e-13));
  // Every other loss refuses it, naming itself (also those that hand their work to another loss).
  const Tensor<double> p = full<double>({3, 2}, 0.5);
  const Tensor<int64_t> c = classes({1, 0, 1});
  const std::vector<std::pair<const char*, std::function<Tensor<double>()>>> refusing{
      {"mse_loss", [&] { return F::mse_loss(x, t, Reduction::BatchMean); }},
      {"l1_loss", [&] { return F::l1_loss(x, t, Reduction::BatchMean); }},
      {"smooth_l1_loss", [&] { return F::smooth_l1_loss(x, t, Reduction::BatchMean, 0.0); }},
      {"huber_loss", [&] { return F::huber_loss(x, t, Reduction::BatchMean); }},
      {"binary_cross_entropy", [&] { return F::binary_cross_entropy(p, t, std::nullopt, Reduction::BatchMean); }},
      {"binary_cross_entropy_with_logits",
       [&] { return F::binary_cross_entropy_with_logits(x, t, Reduction::BatchMean); }},
      {"nll_loss", [&] { return F::nll_loss(x, c, std::nullopt, -100, Reduction::BatchMean); }},
      {"cross_entropy", [&] { return F::cross_entropy(x, c, std::nullopt, -100, Reduction::BatchMean, 0.1); }},
      {"cross_entropy", [&] { return F::cross_entropy(x, t, std::nullopt, Reduction::BatchMean); }}};
  for (const auto& [op, f] : refusing) {
    const std::string message = std::string(op) + ": reduction BatchMean (PyTorch's 'batchmean') is kl_div's only";
    CHECK_THROWS_WITH_AS(f(), message.c_str(), std::invalid_argument);
  }
  const auto r = autograd::gradcheck(
      [&](const Inputs& in) { return F::kl_div(in[0], in[1], Reduction::BatchMean, true); },
      {sample({3, 4}, 13), sample({3, 4}, 14)});
  INFO(r.message);
  CHECK(r.ok);
}

}  // namespace test_nn_loss
