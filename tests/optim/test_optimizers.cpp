// SGD, Adam, AdamW and RMSprop against PyTorch's published update rules, written out in double for each
// element (torch/optim/*.py, 1.13): 100 steps of a noisy quadratic, float64 to 1e-12 relative and float32
// within 1e-6 relative of the float64 run; parameter groups, zero_grad, one fused pass per parameter.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "kiln/kiln.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_optim_optimizers {

using namespace kiln;

namespace {

constexpr int64_t kN = 37;  // not a multiple of any vector width
constexpr int kSteps = 100;

double target(int64_t i) { return std::cos(0.7 * double(i)) * 2; }
double noise(int t, int64_t i) { return 0.1 * std::sin(0.37 * t + 1.3 * double(i)); }
double initial(int64_t i) { return std::sin(0.5 * double(i)) + 0.3; }

// The gradient of 0.5 (p - c)^2 + noise * p, from autograd.
template <class T>
void backward_loss(Tensor<T>& p, int t) {
  Tensor<T> c = empty<T>({kN}), s = empty<T>({kN});
  for (int64_t i = 0; i < kN; ++i) {
    c.data_ptr()[i] = T(target(i));
    s.data_ptr()[i] = T(noise(t, i));
  }
  sum((p - c) * (p - c) * T(0.5) + s * p).backward();
}

// Runs an optimizer made by make(params) for kSteps; returns the parameter's values.
template <class T, class Make>
std::vector<double> run(Make make) {
  Tensor<T> p = empty<T>({kN});
  for (int64_t i = 0; i < kN; ++i) p.data_ptr()[i] = T(initial(i));
  p.requires_grad_();
  auto opt = make(std::vector<Tensor<T>>{p});
  for (int t = 0; t < kSteps; ++t) {
    opt.zero_grad();
    backward_loss(p, t);
    opt.step();
  }
  std::vector<double> out;
  for (int64_t i = 0; i < kN; ++i) out.push_back(double(p.data_ptr()[i]));
  return out;
}

// The reference: step(p, g, t) updates one element's parameter and state, written from PyTorch's code.
template <class Step>
std::vector<double> reference(Step step) {
  std::vector<double> out;
  for (int64_t i = 0; i < kN; ++i) {
    double p = initial(i);
    auto state = step.init();
    for (int t = 0; t < kSteps; ++t) step(p, (p - target(i)) + noise(t, i), t + 1, state);
    out.push_back(p);
  }
  return out;
}

double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1e-3));
  return worst;
}

struct SgdRef {
  double lr, momentum, dampening, wd;
  bool nesterov;
  struct State { double b = 0; };
  State init() const { return {}; }
  void operator()(double& p, double g, int t, State& s) const {
    double d = g + wd * p;
    if (momentum != 0) {
      s.b = t == 1 ? d : momentum * s.b + (1 - dampening) * d;
      d = nesterov ? d + momentum * s.b : s.b;
    }
    p -= lr * d;
  }
};

struct AdamRef {
  double lr, b1, b2, eps, wd;
  bool amsgrad, decoupled;
  struct State { double m = 0, v = 0, vmax = 0; };
  State init() const { return {}; }
  void operator()(double& p, double g, int t, State& s) const {
    if (decoupled) p *= 1 - lr * wd;
    else g += wd * p;
    s.m = s.m * b1 + (1 - b1) * g;
    s.v = s.v * b2 + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    double v = s.v;
    if (amsgrad) v = s.vmax = std::max(s.vmax, s.v);
    p -= lr / bc1 * s.m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

struct RmsRef {
  double lr, alpha, eps, wd, momentum;
  bool centered;
  struct State { double v = 0, a = 0, b = 0; };
  State init() const { return {}; }
  void operator()(double& p, double g, int, State& s) const {
    g += wd * p;
    s.v = alpha * s.v + (1 - alpha) * g * g;
    double avg;
    if (centered) {
      s.a = alpha * s.a + (1 - alpha) * g;
      avg = std::sqrt(s.v - s.a * s.a) + eps;
    } else {
      avg = std::sqrt(s.v) + eps;
    }
    if (momentum > 0) {
      s.b = momentum * s.b + g / avg;
      p -= lr * s.b;
    } else {
      p -= lr * g / avg;
    }
  }
};

// Checks an optimizer in double against the reference and in float against the double run.
template <class MakeD, class MakeF, class Ref>
void check_optimizer(const char* what, MakeD make_double, MakeF make_float, const Ref& ref) {
  const std::vector<double> expected = reference(ref);
  const std::vector<double> got = run<double>(make_double);
  const std::vector<double> got_float = run<float>(make_float);
  INFO(what);
  CHECK(max_relative(got, expected) < 1e-12);
  CHECK(max_relative(got_float, got) < 1e-6);
  // It moved: the test would pass vacuously otherwise.
  CHECK(max_relative(expected, reference(SgdRef{0, 0, 0, 0, false})) > 0.1);
}

}  // namespace

TEST_CASE("SGD follows torch.optim.SGD: plain, momentum with dampening, Nesterov, weight decay") {
  using optim::SGD;
  using optim::SGDOptions;
  for (const SgdRef r : {SgdRef{0.1, 0, 0, 0, false}, SgdRef{0.05, 0.9, 0.1, 0, false},
                         SgdRef{0.05, 0.9, 0, 1e-2, true}, SgdRef{0.02, 0.5, 0, 0.1, false}}) {
    const auto options = SGDOptions(r.lr).momentum(r.momentum).dampening(r.dampening).weight_decay(r.wd).nesterov(r.nesterov);
    check_optimizer("SGD", [&](auto params) { return SGD(params, options); },
                    [&](auto params) { return SGD(params, options); }, r);
  }
}

TEST_CASE("Adam and AdamW follow torch.optim: bias correction, L2 or decoupled weight decay, amsgrad") {
  using namespace optim;
  for (bool amsgrad : {false, true}) {
    const AdamRef adam{0.05, 0.9, 0.999, 1e-8, 1e-2, amsgrad, false};
    const auto ao = AdamOptions(0.05).weight_decay(1e-2).amsgrad(amsgrad);
    check_optimizer("Adam", [&](auto params) { return Adam(params, ao); },
                    [&](auto params) { return Adam(params, ao); }, adam);
    const AdamRef adamw{0.05, 0.8, 0.99, 1e-8, 0.1, amsgrad, true};
    auto wo = AdamWOptions(0.05).betas(0.8, 0.99).weight_decay(0.1);
    wo.amsgrad(amsgrad);
    check_optimizer("AdamW", [&](auto params) { return AdamW(params, wo); },
                    [&](auto params) { return AdamW(params, wo); }, adamw);
  }
}

TEST_CASE("RMSprop follows torch.optim.RMSprop: plain, centered, momentum, weight decay") {
  using namespace optim;
  for (bool centered : {false, true})
    for (double momentum : {0.0, 0.9}) {
      const RmsRef r{0.01, 0.99, 1e-8, 1e-3, momentum, centered};
      const auto o = RMSpropOptions(0.01).weight_decay(1e-3).momentum(momentum).centered(centered);
      check_optimizer("RMSprop", [&](auto params) { return RMSprop(params, o); },
                      [&](auto params) { return RMSprop(params, o); }, r);
    }
}

TEST_CASE("parameter groups keep their own options; zero_grad; a step is one fused pass per parameter") {
  Tensor<float> a = ones<float>({4}).requires_grad_(), b = ones<float>({4}).requires_grad_();
  optim::SGD<float> opt({{{a}, optim::SGDOptions(0.1)}, {{b}, optim::SGDOptions(0.5)}}, optim::SGDOptions(0.1));
  sum(a + b).backward();
  opt.step();
  CHECK(a[0].item() == doctest::Approx(0.9));
  CHECK(b[0].item() == doctest::Approx(0.5));
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  // Adam updates m, v and p in one pass: the first step allocates the state (two buffers), later
  // steps allocate nothing.
  Tensor<float> w = ones<float>({1000}).requires_grad_();
  optim::Adam adam(std::vector<Tensor<float>>{w}, optim::AdamOptions(1e-2));
  sum(w * w).backward();
  adam.step();
  const MemoryStats before = memory_stats();
  adam.step();
  CHECK(memory_stats().allocations == before.allocations);
  CHECK(w[0].item() < 1.0f);
}

namespace {

// Runs half the steps, moves the state through state_dict() into a fresh optimizer on a copy of the
// parameter, and runs the other half there: the result must be bitwise the uninterrupted run's.
template <class Make>
void check_resume(const char* what, Make make) {
  INFO(what);
  Tensor<double> p = empty<double>({kN});
  for (int64_t i = 0; i < kN; ++i) p.data_ptr()[i] = initial(i);
  p.requires_grad_();
  auto first = make(std::vector<Tensor<double>>{p});
  for (int t = 0; t < kSteps / 2; ++t) {
    first.zero_grad();
    backward_loss(p, t);
    first.step();
  }
  std::map<std::string, AnyTensor> saved;
  for (auto& [name, t] : first.state_dict()) saved.emplace(name, t.clone());
  CHECK(saved.size() > 2);  // the lr entries and some per-parameter state
  Tensor<double> resumed = p.detach().clone().requires_grad_();
  auto second = make(std::vector<Tensor<double>>{resumed});
  second.load_state_dict(saved);
  for (int t = kSteps / 2; t < kSteps; ++t) {
    second.zero_grad();
    backward_loss(resumed, t);
    second.step();
  }
  const std::vector<double> expected = run<double>(make);
  for (int64_t i = 0; i < kN; ++i) CHECK(resumed.data_ptr()[i] == expected[i]);
}

}  // namespace

TEST_CASE("optimizer state_dict: PyTorch's names, resuming gives bitwise the uninterrupted run, bad states refused") {
  check_resume("SGD momentum", [](auto params) { return optim::SGD(params, optim::SGDOptions(0.05).momentum(0.9).nesterov(true)); });
  check_resume("Adam amsgrad", [](auto params) { return optim::Adam(params, optim::AdamOptions(0.05).amsgrad(true)); });
  check_resume("AdamW", [](auto params) { return optim::AdamW(params, optim::AdamWOptions(0.05)); });
  check_resume("RMSprop centered momentum",
               [](auto params) { return optim::RMSprop(params, optim::RMSpropOptions(0.01).centered(true).momentum(0.5)); });

  Tensor<float> w = ones<float>({3}).requires_grad_();
  optim::Adam adam(std::vector<Tensor<float>>{w}, optim::AdamOptions(0.1));
  auto names = [](const std::map<std::string, AnyTensor>& sd) {
    std::vector<std::string> out;
    for (auto& [name, t] : sd) out.push_back(name);
    return out;
  };
  CHECK(names(adam.state_dict()) == std::vector<std::string>{"param_groups.0.initial_lr", "param_groups.0.lr"});
  sum(w * w).backward();
  adam.step();
  const auto sd = adam.state_dict();
  CHECK(names(sd) == std::vector<std::string>{"param_groups.0.initial_lr", "param_groups.0.lr", "state.0.exp_avg",
                                              "state.0.exp_avg_sq", "state.0.step"});
  CHECK(sd.at("state.0.step").as<int64_t>().item() == 1);
  CHECK(sd.at("param_groups.0.lr").as<double>().item() == 0.1);

  auto with = [&](const std::string& key, AnyTensor value) {
    auto copy = sd;
    copy[key] = value;
    return copy;
  };
  CHECK_THROWS_WITH_AS(adam.load_state_dict(with("state.0.exp_avg", zeros<float>({4}))),
                       "optimizer load_state_dict: \"state.0.exp_avg\" has shape [4], the parameter [3]", ShapeError);
  CHECK_THROWS_WITH_AS(adam.load_state_dict(with("state.0.exp_avg", zeros<double>({3}))),
                       "optimizer load_state_dict: \"state.0.exp_avg\" holds float64 values", DTypeError);
  CHECK_THROWS_WITH_AS(adam.load_state_dict(with("state.1.step", full<int64_t>({}, 1))),
                       "optimizer load_state_dict: \"state.1.step\" names parameter 1 but the optimizer has 1",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(adam.load_state_dict(with("momentum", zeros<float>({3}))),
                       "optimizer load_state_dict: unexpected key \"momentum\"", std::invalid_argument);
  auto without_lr = sd;
  without_lr.erase("param_groups.0.lr");
  CHECK_THROWS_WITH_AS(adam.load_state_dict(without_lr), "optimizer load_state_dict: missing key \"param_groups.0.lr\"",
                       std::invalid_argument);
  auto partial = sd;
  partial.erase("state.0.exp_avg_sq");
  CHECK_THROWS_WITH_AS(adam.load_state_dict(partial), "optimizer load_state_dict: parameter 0 has 2 state entries, expected 3",
                       std::invalid_argument);
  // A refused state changed nothing.
  CHECK(adam.state_dict().at("state.0.exp_avg").as<float>()[0].item() == sd.at("state.0.exp_avg").as<float>()[0].item());
}

TEST_CASE("maximize: SGD, Adam, AdamW and RMSprop ascend, the gradient negated before weight decay, as PyTorch") {
  // torch 2.15, float64: p = [1.0, -2.0, 0.5]; 3 steps, step t (1..3) with the gradient of
  // sum(p * c_t + 0.1 p^2), c_t = [0.3 t - 0.2, 0.5, -0.1 t^2]; maximize=True and
  //   SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)
  //   Adam / AdamW(lr=0.1, betas=(0.8, 0.9), weight_decay=0.05, amsgrad=True)
  //   RMSprop(lr=0.01, alpha=0.9, weight_decay=0.05, momentum=0.5, centered=True)
  // p after the 3 steps as printed below.
  const auto three_steps = [](auto make) {
    Tensor<double> p = empty<double>({3});
    p.data_ptr()[0] = 1.0, p.data_ptr()[1] = -2.0, p.data_ptr()[2] = 0.5;
    p.requires_grad_();
    auto opt = make(std::vector<Tensor<double>>{p});
    for (int t = 1; t <= 3; ++t) {
      opt.zero_grad();
      Tensor<double> c = empty<double>({3});
      c.data_ptr()[0] = 0.3 * t - 0.2, c.data_ptr()[1] = 0.5, c.data_ptr()[2] = -0.1 * t * t;
      sum(p * c + p * p * 0.1).backward();
      opt.step();
    }
    return std::vector<double>{p.data_ptr()[0], p.data_ptr()[1], p.data_ptr()[2]};
  };
  using namespace kiln::optim;
  const std::vector<std::pair<const char*, std::pair<std::vector<double>, std::vector<double>>>> cases{
      {"SGD", {three_steps([](auto ps) {
                 return SGD<double>(ps, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.05).maximize(true));
               }),
               {1.4034035818750001, -1.8348167345, 0.24442759181249996}}},
      {"Adam", {three_steps([](auto ps) {
                  return Adam<double>(ps, AdamOptions(0.1).betas(0.8, 0.9).weight_decay(0.05).amsgrad(true).maximize(true));
                }),
                {1.291055121644723, -1.6994765268993914, 0.23471554698088276}}},
      {"AdamW", {three_steps([](auto ps) {
                   return AdamW<double>(ps, AdamOptions(0.1).betas(0.8, 0.9).weight_decay(0.05).amsgrad(true).maximize(true));
                 }),
                 {1.2764123067765334, -1.6712241709581517, 0.33388929040291654}}},
      {"RMSprop", {three_steps([](auto ps) {
                     return RMSprop<double>(
                         ps, RMSpropOptions(0.01).alpha(0.9).weight_decay(0.05).momentum(0.5).centered(true).maximize(true));
                   }),
                   {1.1361151646440242, -1.8798946667730188, 0.35897817719050723}}}};
  for (const auto& [name, got_want] : cases)
    for (size_t i = 0; i < 3; ++i) {
      INFO(name, " element ", i);
      CHECK(got_want.first[i] == doctest::Approx(got_want.second[i]).epsilon(1e-12));
    }
}

TEST_CASE("maximize: one shared gradient orientation, the gradient itself (no multiply, no copy) when off") {
  // SGD, Adam/AdamW and RMSprop take their update's gradient from optim::detail::oriented_grad: off, the parameter's
  // gradient tensor itself, so the fused update reads it as it is; on, its negation, the gradient left untouched.
  Tensor<double> g = empty<double>({3});
  g.data_ptr()[0] = 0.5, g.data_ptr()[1] = -2.0, g.data_ptr()[2] = 0.0;
  const Tensor<double> off = optim::detail::oriented_grad(g, false);
  CHECK(off.data_ptr() == g.data_ptr());
  const Tensor<double> on = optim::detail::oriented_grad(g, true);
  CHECK(on.data_ptr() != g.data_ptr());
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(on.data_ptr()[i] == -g.data_ptr()[i]);
    CHECK(std::signbit(on.data_ptr()[i]) != std::signbit(g.data_ptr()[i]));
  }
  CHECK(g.data_ptr()[1] == -2.0);
}

}  // namespace test_optim_optimizers
