// LR schedulers against torch.optim.lr_scheduler's closed forms, and gradient clipping.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "kiln/kiln.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_optim_schedulers {

using namespace kiln;

namespace {
constexpr double pi = std::numbers::pi;

// The lrs an optimizer with groups at lr 0.1 and 0.4 sees over `steps` steps of a scheduler.
template <class Make>
std::vector<std::array<double, 2>> lrs(Make make, int steps) {
  Tensor<float> a = ones<float>({2}).requires_grad_(), b = ones<float>({2}).requires_grad_();
  optim::SGD<float> opt({{{a}, optim::SGDOptions(0.1)}, {{b}, optim::SGDOptions(0.4)}}, optim::SGDOptions(0.1));
  auto sched = make(opt);
  std::vector<std::array<double, 2>> out;
  for (int e = 0; e < steps; ++e) {
    out.push_back({opt.param_groups()[0].options.lr(), opt.param_groups()[1].options.lr()});
    CHECK(sched.get_last_lr()[0] == out.back()[0]);
    sched.step();
  }
  return out;
}

template <class Formula>
void check_lrs(const char* what, const std::vector<std::array<double, 2>>& got, Formula f) {
  INFO(what);
  for (size_t e = 0; e < got.size(); ++e) {
    CHECK(got[e][0] == doctest::Approx(f(0.1, int64_t(e))).epsilon(1e-12));
    CHECK(got[e][1] == doctest::Approx(f(0.4, int64_t(e))).epsilon(1e-12));
  }
}
}  // namespace

TEST_CASE("schedulers follow torch.optim.lr_scheduler's closed forms for every parameter group") {
  using namespace optim;
  check_lrs("StepLR", lrs([](auto& o) { return StepLR(o, 3, 0.5); }, 10),
            [](double b, int64_t e) { return b * std::pow(0.5, double(e / 3)); });
  check_lrs("MultiStepLR", lrs([](auto& o) { return MultiStepLR(o, {5, 2}, 0.1); }, 8),
            [](double b, int64_t e) { return b * std::pow(0.1, double((e >= 2) + (e >= 5))); });
  check_lrs("ExponentialLR", lrs([](auto& o) { return ExponentialLR(o, 0.9); }, 8),
            [](double b, int64_t e) { return b * std::pow(0.9, double(e)); });
  check_lrs("CosineAnnealingLR", lrs([](auto& o) { return CosineAnnealingLR(o, 10, 0.001); }, 11),
            [](double b, int64_t e) { return 0.001 + (b - 0.001) * (1 + std::cos(pi * double(e) / 10)) / 2; });
  check_lrs("LinearLR warmup", lrs([](auto& o) { return LinearLR(o, 0.25, 1.0, 4); }, 8),
            [](double b, int64_t e) { return b * (0.25 + 0.75 * double(std::min<int64_t>(e, 4)) / 4); });
  // OneCycleLR(max_lr 1.0, 10 steps): PyTorch's values at each step (cos annealing, pct 0.3, div 25, final 1e4).
  const auto one = lrs([](auto& o) { return OneCycleLR(o, 1.0, 10); }, 10);
  const double init = 1.0 / 25, fin = init / 1e4, up = 0.3 * 10 - 1;
  for (int64_t e = 0; e < 10; ++e) {
    const double pct = double(e) <= up ? double(e) / up : (double(e) - up) / (9 - up);
    const double from = double(e) <= up ? init : 1.0, to = double(e) <= up ? 1.0 : fin;
    CHECK(one[size_t(e)][0] == doctest::Approx(to + (from - to) * (1 + std::cos(pi * pct)) / 2).epsilon(1e-12));
  }
  CHECK(one[0][0] == doctest::Approx(0.04));
  CHECK(one[2][0] == doctest::Approx(1.0));
  // SequentialLR: a linear warmup for 3 steps, then cosine annealing restarted at its own step 0.
  check_lrs("SequentialLR",
            lrs([](auto& o) {
                  auto warm = std::make_shared<LinearLR>(o, 0.5, 1.0, 3);
                  auto cos = std::make_shared<CosineAnnealingLR>(o, 5);
                  return SequentialLR(o, {warm, cos}, {3});
                }, 9),
            [](double b, int64_t e) {
              if (e < 3) return b * (0.5 + 0.5 * double(e) / 3);
              return b * (1 + std::cos(pi * double(e - 3) / 5)) / 2;
            });
}

TEST_CASE("clip_grad_norm_ and clip_grad_value_ act on the gradients as torch.nn.utils") {
  Tensor<double> a = zeros<double>({2}).requires_grad_(), b = zeros<double>({3}).requires_grad_();
  Tensor<double> loss = sum(a * 3.0) + sum(b * 4.0);
  loss.backward();
  // Gradients 3, 3, 4, 4, 4: norm sqrt(18 + 48).
  const double total = optim::clip_grad_norm_<double>({a, b}, 1.0);
  CHECK(total == doctest::Approx(std::sqrt(66.0)).epsilon(1e-14));
  CHECK(a.grad()[0].item() == doctest::Approx(3 / (std::sqrt(66.0) + 1e-6)).epsilon(1e-14));
  CHECK(norm(cat({a.grad(), b.grad()})).item() == doctest::Approx(1.0).epsilon(1e-6));
  // Below the limit nothing changes; the inf-norm is the largest magnitude.
  CHECK(optim::clip_grad_norm_<double>({a, b}, 10.0) == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(optim::clip_grad_norm_<double>({a, b}, 10.0, std::numeric_limits<double>::infinity()) ==
        doctest::Approx(4 / (std::sqrt(66.0) + 1e-6)));
  optim::clip_grad_value_<double>({a, b}, 0.4);  // a's gradients (0.37) stay, b's (0.49) are clamped
  CHECK(a.grad()[1].item() == doctest::Approx(3 / (std::sqrt(66.0) + 1e-6)));
  CHECK(b.grad()[0].item() == doctest::Approx(0.4));
}

// PyTorch's OneCycleLR cycles the momentum by default (cycle_momentum=True): Adam's beta1 or SGD's momentum runs from
// max_momentum down to base_momentum while the lr rises, then back. Expected values: PyTorch 2.15, max_lr 1, 10 steps.
TEST_CASE("OneCycleLR cycles Adam's beta1 and SGD's momentum against the lr, as PyTorch") {
  const std::vector<double> torch_beta1 = {0.95, 0.9, 0.85, 0.854951556604879, 0.868825509907063, 0.888873953302184,
                                           0.911126046697816, 0.931174490092937, 0.945048443395121, 0.95};
  Tensor<float> w = ones<float>({2}).requires_grad_();
  optim::Adam<float> adam(std::vector<Tensor<float>>{w}, optim::AdamOptions(0.1));
  optim::OneCycleLR sched(adam, 1.0, 10);
  for (size_t e = 0; e < torch_beta1.size(); ++e) {
    INFO("step ", e);
    CHECK(adam.param_groups()[0].options.beta1() == doctest::Approx(torch_beta1[e]).epsilon(1e-12));
    CHECK(adam.param_groups()[0].options.beta2() == 0.999);
    if (e + 1 < torch_beta1.size()) sched.step();
  }
  // SGD without momentum gets one, as in PyTorch (base 0.8, max 0.9 here).
  const std::vector<double> torch_momentum = {0.9, 0.85, 0.8, 0.804951556604879, 0.818825509907063, 0.838873953302184,
                                              0.861126046697816, 0.881174490092937, 0.895048443395121, 0.9};
  optim::SGD<float> sgd(std::vector<Tensor<float>>{w}, optim::SGDOptions(0.1));
  optim::OneCycleLR sgd_sched(sgd, 1.0, 10, 0.3, 25, 1e4, /*cycle_momentum=*/true, 0.8, 0.9);
  for (size_t e = 0; e < torch_momentum.size(); ++e) {
    CHECK(sgd.param_groups()[0].options.momentum() == doctest::Approx(torch_momentum[e]).epsilon(1e-12));
    if (e + 1 < torch_momentum.size()) sgd_sched.step();
  }
  // Loading a state_dict sets the momentum of the step it names; without cycling the momentum stays as it was.
  optim::Adam<float> again(std::vector<Tensor<float>>{w}, optim::AdamOptions(0.1));
  optim::OneCycleLR loaded(again, 1.0, 10);
  loaded.load_state_dict({{"last_epoch", full<int64_t>({}, 4)}});
  CHECK(again.param_groups()[0].options.beta1() == doctest::Approx(torch_beta1[4]).epsilon(1e-12));
  optim::Adam<float> plain(std::vector<Tensor<float>>{w}, optim::AdamOptions(0.1));
  optim::OneCycleLR no_cycle(plain, 1.0, 10, 0.3, 25, 1e4, /*cycle_momentum=*/false);
  no_cycle.step();
  CHECK(plain.param_groups()[0].options.beta1() == 0.9);
}

TEST_CASE("scheduler state_dict: a scheduler built again and loaded continues at the saved step") {
  Tensor<float> w = ones<float>({2}).requires_grad_();
  optim::SGD<float> opt(std::vector<Tensor<float>>{w}, optim::SGDOptions(0.1));
  optim::OneCycleLR sched(opt, 1.0, 20);
  for (int i = 0; i < 7; ++i) sched.step();
  const auto saved = sched.state_dict();
  CHECK(saved.at("last_epoch").as<int64_t>().item() == 7);
  sched.step();
  const double next_lr = sched.get_last_lr()[0];

  Tensor<float> w2 = ones<float>({2}).requires_grad_();
  optim::SGD<float> opt2(std::vector<Tensor<float>>{w2}, optim::SGDOptions(0.1));
  optim::OneCycleLR again(opt2, 1.0, 20);
  again.load_state_dict(saved);
  again.step();
  CHECK(again.last_epoch() == 8);
  CHECK(again.get_last_lr()[0] == next_lr);
  CHECK(opt2.param_groups()[0].options.lr() == next_lr);
  CHECK_THROWS_WITH_AS(again.load_state_dict({{"last_epoch", full<double>({}, 1.0)}}),
                       "LRScheduler load_state_dict: \"last_epoch\" must be one int64, got float64 of shape []", DTypeError);
  CHECK_THROWS_AS(again.load_state_dict({}), std::invalid_argument);
}

}  // namespace test_optim_schedulers
