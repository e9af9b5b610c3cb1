// The activation functions (expr/activations.hpp) and modules (nn/activation.hpp) against PyTorch:
// tests/fixtures/nn/activation_torch.safetensors (written by scripts/activation_reference.py with torch 2.15.0)
// holds float64 inputs with every function's kinks, the outputs and the gradients of a weighted sum. The
// expressions in double must give PyTorch's values and gradients to rounding, the kinks included; the modules in
// float the same within float's rounding. Also: printing, options, PReLU's parameter, errors.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

#include "torch_fixture.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_activation {

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

Tensor<double> entry(const std::string& key) { return test::torch_entry("activation_torch.safetensors", key); }

// Runs f on the fixture's input (as T) and checks case `name`'s output and the gradient of sum(f(x) * weight).
template <class T>
void check_case(const std::string& name, const std::function<Tensor<T>(const Tensor<T>&)>& f, double tol) {
  const Tensor<T> x = entry("input").to<T>().requires_grad_();
  const Tensor<T> y = f(x);
  test::expect_close_to_torch(y, entry(name + ".output"), tol, name + ": the output");
  sum(y * entry("weight").to<T>()).backward();
  test::expect_close_to_torch(x.grad(), entry(name + ".grad"), tol, name + ": the gradient");
}

// The fixture's cases as kiln expressions, for any floating dtype.
template <class T>
std::map<std::string, std::function<Tensor<T>(const Tensor<T>&)>> functions() {
  using X = const Tensor<T>&;
  return {
      {"relu", [](X x) { return relu(x); }},
      {"leaky_relu", [](X x) { return leaky_relu(x); }},
      {"leaky_relu_0.2", [](X x) { return F::leaky_relu(x, 0.2); }},
      {"elu", [](X x) { return elu(x); }},
      {"elu_0.5", [](X x) { return elu(x, 0.5); }},
      {"selu", [](X x) { return selu(x); }},
      {"celu_2", [](X x) { return celu(x, 2.0); }},
      {"gelu", [](X x) { return F::gelu(x); }},
      {"gelu_tanh", [](X x) { return F::gelu(x, "tanh"); }},
      {"silu", [](X x) { return silu(x); }},
      {"mish", [](X x) { return mish(x); }},
      {"sigmoid", [](X x) { return sigmoid(x); }},
      {"tanh", [](X x) { return tanh(x); }},
      {"hardtanh", [](X x) { return hardtanh(x); }},
      {"hardtanh_-2_3", [](X x) { return hardtanh(x, -2.0, 3.0); }},
      {"relu6", [](X x) { return relu6(x); }},
      {"hardsigmoid", [](X x) { return hardsigmoid(x); }},
      {"hardswish", [](X x) { return hardswish(x); }},
      {"softplus", [](X x) { return F::softplus(x); }},
      {"softplus_2_3", [](X x) { return F::softplus(x, 2.0, 3.0); }},
      {"softsign", [](X x) { return softsign(x); }},
      {"logsigmoid", [](X x) { return logsigmoid(x); }},
      {"tanhshrink", [](X x) { return tanhshrink(x); }},
      {"softshrink", [](X x) { return softshrink(x); }},
      {"softshrink_1", [](X x) { return softshrink(x, 1.0); }},
      {"hardshrink", [](X x) { return hardshrink(x); }},
      {"hardshrink_1", [](X x) { return hardshrink(x, 1.0); }},
      {"softmax_1", [](X x) { return softmax(x, 1); }},
      {"log_softmax_2", [](X x) { return log_softmax(x, 2); }},
  };
}

template <class M>
std::string printed(const M& module) {
  std::ostringstream out;
  module->pretty_print(out);
  return out.str();
}

}  // namespace

TEST_CASE("activation functions in float64 equal PyTorch's values and gradients, at their kinks too") {
  for (const auto& [name, f] : functions<double>()) {
    // (PyTorch's hardsigmoid backward multiplies by 1/6 rounded to float, also in float64: 3e-8 off)
    check_case<double>(name, f, name == "hardsigmoid" ? 1e-7 : 1e-13);
  }
  for (const std::string name : {"prelu_shared", "prelu_channels"}) {
    const Tensor<double> weight = entry(name + ".prelu_weight").requires_grad_();
    check_case<double>(name, [&](const Tensor<double>& x) { return F::prelu(x, weight); }, 1e-13);
    test::expect_close_to_torch(weight.grad(), entry(name + ".grad_weight"), 1e-12, name + ": the weight's gradient");
  }
}

TEST_CASE("activation functions on 16-bit floats follow float's values") {
  const Tensor<bfloat16> x = entry("input").to<bfloat16>();
  for (const auto& [name, f] : functions<bfloat16>()) {
    INFO(name);
    const Tensor<float> want = functions<float>().at(name)(x.to<float>());
    test::expect_close_to_torch(f(x), want.to<double>(), 1.0 / 128, name);
  }
}

TEST_CASE("activation modules (float) equal PyTorch within float rounding, options as libtorch's") {
  using F32 = const Tensor<float>&;
  const std::map<std::string, std::function<Tensor<float>(F32)>> cases = {
      {"relu", nn::ReLU()},
      {"leaky_relu", nn::LeakyReLU()},
      {"leaky_relu_0.2", nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2))},
      {"elu", nn::ELU()},
      {"elu_0.5", nn::ELU(nn::ELUOptions().alpha(0.5))},
      {"selu", nn::SELU()},
      {"celu_2", nn::CELU(nn::CELUOptions().alpha(2))},
      {"gelu", nn::GELU()},
      {"gelu_tanh", nn::GELU(nn::GELUOptions().approximate("tanh"))},
      {"silu", nn::SiLU()},
      {"mish", nn::Mish()},
      {"sigmoid", nn::Sigmoid()},
      {"tanh", nn::Tanh()},
      {"hardtanh", nn::Hardtanh()},
      {"hardtanh_-2_3", nn::Hardtanh(nn::HardtanhOptions().min_val(-2).max_val(3))},
      {"relu6", nn::ReLU6()},
      {"hardsigmoid", nn::Hardsigmoid()},
      {"hardswish", nn::Hardswish()},
      {"softplus", nn::Softplus()},
      {"softplus_2_3", nn::Softplus(nn::SoftplusOptions().beta(2).threshold(3))},
      {"softsign", nn::Softsign()},
      {"logsigmoid", nn::LogSigmoid()},
      {"tanhshrink", nn::Tanhshrink()},
      {"softshrink", nn::Softshrink()},
      {"softshrink_1", nn::Softshrink(nn::SoftshrinkOptions().lambda(1))},
      {"hardshrink", nn::Hardshrink()},
      {"hardshrink_1", nn::Hardshrink(nn::HardshrinkOptions().lambda(1))},
      {"softmax_1", nn::Softmax(1)},
      {"log_softmax_2", nn::LogSoftmax(2)},
  };
  CHECK(cases.size() == functions<float>().size());
  for (const auto& [name, module] : cases) check_case<float>(name, module, 2e-5);

  nn::PReLU shared;
  CHECK(shared->weight.shape() == Shape{1});
  CHECK(shared->weight.item() == 0.25f);
  check_case<float>("prelu_shared", shared, 2e-5);
  test::expect_close_to_torch(shared->weight.grad(), entry("prelu_shared.grad_weight"), 2e-5, "PReLU's weight gradient");

  nn::PReLU channels(nn::PReLUOptions().num_parameters(3).init(0.5));
  CHECK(channels->weight.to_vector() == std::vector<float>{0.5f, 0.5f, 0.5f});
  {
    NoGradGuard no_grad;
    channels->weight.copy_(entry("prelu_channels.prelu_weight").to<float>());
  }
  check_case<float>("prelu_channels", channels, 2e-5);
  test::expect_close_to_torch(channels->weight.grad(), entry("prelu_channels.grad_weight"), 2e-5, "PReLU's per-channel gradient");
  CHECK(channels->named_parameters().at(0).first == "weight");
}

TEST_CASE("activation modules print as PyTorch's, hold no parameters (PReLU one), and chain in Sequential") {
  CHECK(printed(nn::ReLU()) == "ReLU()");
  CHECK(printed(nn::Identity()) == "Identity()");
  CHECK(printed(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2))) == "LeakyReLU(negative_slope=0.2)");
  CHECK(printed(nn::ELU(nn::ELUOptions().alpha(0.5))) == "ELU(alpha=0.5)");
  CHECK(printed(nn::GELU()) == "GELU(approximate='none')");
  CHECK(printed(nn::Hardtanh()) == "Hardtanh(min_val=-1, max_val=1)");
  CHECK(printed(nn::Softplus(nn::SoftplusOptions().beta(2))) == "Softplus(beta=2, threshold=20)");
  CHECK(printed(nn::Softmax(-1)) == "Softmax(dim=-1)");
  CHECK(printed(nn::LogSoftmax(1)) == "LogSoftmax(dim=1)");
  CHECK(printed(nn::PReLU(nn::PReLUOptions().num_parameters(4))) == "PReLU(num_parameters=4)");
  CHECK(nn::Mish()->parameters().empty());
  CHECK(nn::LeakyReLU()->options.negative_slope() == 0.01);

  nn::Sequential net(nn::Linear(4, 3), nn::PReLU(nn::PReLUOptions().num_parameters(3)), nn::Linear(3, 2),
                     nn::LogSoftmax(1));
  const auto state = net->state_dict();
  CHECK(state.contains("1.weight"));
  const Tensor<float> out = net(randn<float>({5, 4}));
  CHECK(out.shape() == Shape{5, 2});
  const std::vector<float> rows = sum(exp(out), {1}).to_vector();
  for (float r : rows) CHECK(r == doctest::Approx(1).epsilon(1e-6));
}

TEST_CASE("activation errors name the function and what is wrong") {
  const Tensor<float> x = randn<float>({2, 4, 3});
  CHECK_THROWS_WITH_AS(F::gelu(x, "exact"), doctest::Contains("gelu: approximate must be"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::softplus(x, 0.0), doctest::Contains("softplus: beta must not be 0"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(F::prelu(x, full<float>({3}, 0.25f)),
                       doctest::Contains("prelu: 3 weights for input of shape [2, 4, 3], which has 4 channels"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::prelu(x, full<float>({2, 2}, 0.25f)), doctest::Contains("prelu: weight must be 1-d"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(F::prelu(randn<float>({5}), full<float>({3}, 0.25f)),
                       doctest::Contains("prelu: 3 weights for input of shape [5], which has 1 channels"), ShapeError);
  CHECK(F::prelu(full<float>({}, -2.0f), full<float>({1}, 0.25f)).shape() == Shape{});  // (0-d stays 0-d)
  CHECK_THROWS_WITH_AS(Tensor<float>(hardtanh(x, 2.0, 1.0)), doctest::Contains("hardtanh: min_val 2 is above max_val 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Tensor<float>(celu(x, 0.0)), doctest::Contains("celu: alpha must not be 0"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Tensor<float>(softshrink(x, -0.5)), doctest::Contains("softshrink: lambda must be at least 0"),
                       std::invalid_argument);
  // NaN passes through the shrinks, as PyTorch's
  const Tensor<float> nan = full<float>({2}, std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(Tensor<float>(softshrink(nan)).to_vector()[0]));
  CHECK(std::isnan(Tensor<float>(hardshrink(nan)).to_vector()[0]));
  CHECK_THROWS_WITH_AS(nn::PReLU(nn::PReLUOptions().num_parameters(0)),
                       doctest::Contains("PReLU: num_parameters must be positive"), std::invalid_argument);
}

}  // namespace test_nn_activation
