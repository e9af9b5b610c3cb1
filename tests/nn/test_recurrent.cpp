// nn::RNN, nn::LSTM and nn::GRU against PyTorch: tests/fixtures/nn/recurrent_torch.safetensors (written by
// scripts/recurrent_reference.py with torch 2.15.0) holds, per case, the module's state_dict, inputs, outputs and the
// gradients of a weighted sum of the outputs. Loading the state_dict strictly checks parameter names and shapes;
// forward and backward must give PyTorch's values. Also: parameter order, dropout between layers, printing, errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "kiln/io/safetensors.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/nn/recurrent.hpp"

// The directory holding the fixtures: the build defines it; running from the repository root works without.
#ifndef KILN_TEST_DATA_DIR
#define KILN_TEST_DATA_DIR "tests/fixtures"
#endif

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_recurrent {

using namespace kiln;
using File = std::map<std::string, AnyTensor>;

namespace {

const File& fixture() {
  static const File file =
      io::load_safetensors(std::filesystem::path(KILN_TEST_DATA_DIR) / "nn" / "recurrent_torch.safetensors");
  return file;
}

// got equals want within tol * (1 + |want|) element by element.
void expect_close(const Tensor<float>& got, const Tensor<float>& want, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const std::vector<float> g = got.contiguous().to_vector(), w = want.contiguous().to_vector();
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(double(g[i]) - w[i]) <= tol * (1 + std::abs(double(w[i])))) && ++bad <= 3) {
      INFO("element ", i, ": ", g[i], ", PyTorch gives ", w[i]);
      CHECK(false);
    }
  CHECK(bad == 0);
}

// The entries of case `name` whose keys start with `prefix`, without it.
std::map<std::string, Tensor<float>> entries(const std::string& name, const std::string& prefix) {
  std::map<std::string, Tensor<float>> out;
  const std::string start = name + "." + prefix;
  for (const auto& [key, value] : fixture())
    if (key.starts_with(start) && key.find('.', start.size()) == std::string::npos)
      out[key.substr(start.size())] = value.as<float>();
  return out;
}
Tensor<float> entry(const std::string& name, const std::string& key) { return fixture().at(name + "." + key).as<float>(); }
bool has(const std::string& name, const std::string& key) { return fixture().contains(name + "." + key); }

// Runs case `name` of the fixture through module (built with the case's options), checking outputs and gradients.
template <class Module>
void check_case(const std::string& name, Module module) {
  INFO(name);
  module->load_state_dict(entries(name, "state."));
  const Tensor<float> x = entry(name, "input").clone().requires_grad_();
  Tensor<float> h0, c0;
  if (has(name, "h0")) h0 = entry(name, "h0").clone().requires_grad_();
  if (has(name, "c0")) c0 = entry(name, "c0").clone().requires_grad_();

  Tensor<float> output, h_n, c_n;
  if constexpr (std::is_same_v<Module, nn::LSTM>) {
    auto [out, state] = h0.defined() ? module(x, std::tuple{h0, c0}) : module(x);
    output = out;
    std::tie(h_n, c_n) = state;
  } else {
    std::tie(output, h_n) = module(x, h0);
  }
  constexpr double kForward = 2e-6, kGradient = 2e-5;
  expect_close(output, entry(name, "output"), kForward, "output");
  expect_close(h_n, entry(name, "h_n"), kForward, "h_n");
  Tensor<float> loss = sum(output * entry(name, "w_output")) + sum(h_n * entry(name, "w_h_n"));
  if (c_n.defined()) {
    expect_close(c_n, entry(name, "c_n"), kForward, "c_n");
    loss = loss + sum(c_n * entry(name, "w_c_n"));
  }
  loss.backward();
  expect_close(x.grad(), entry(name, "grad.input"), kGradient, "gradient of the input");
  if (h0.defined()) expect_close(h0.grad(), entry(name, "grad.h0"), kGradient, "gradient of h_0");
  if (c0.defined()) expect_close(c0.grad(), entry(name, "grad.c0"), kGradient, "gradient of c_0");
  const auto grads = entries(name, "grad.state.");
  const auto params = module->named_parameters();
  REQUIRE(params.size() == grads.size());
  for (const auto& [param, value] : params) expect_close(value.grad(), grads.at(param), kGradient, "gradient of " + param);
}

}  // namespace

TEST_CASE("RNN, LSTM and GRU equal PyTorch's outputs and gradients (layers, directions, batch_first, unbatched)") {
  check_case("rnn_tanh", nn::RNN(5, 4));
  check_case("rnn_relu_bidirectional_nobias",
             nn::RNN(nn::RNNOptions(5, 4).nonlinearity(nn::kReLU).bias(false).bidirectional(true)));
  check_case("lstm_two_layers_bidirectional", nn::LSTM(nn::LSTMOptions(5, 4).num_layers(2).bidirectional(true)));
  check_case("lstm_batch_first", nn::LSTM(nn::LSTMOptions(5, 3).batch_first(true)));
  check_case("lstm_unbatched", nn::LSTM(nn::LSTMOptions(5, 4).num_layers(2)));
  check_case("gru_two_layers_batch_first", nn::GRU(nn::GRUOptions(5, 4).num_layers(2).batch_first(true)));
  check_case("gru_bidirectional", nn::GRU(nn::GRUOptions(5, 4).bidirectional(true)));
}

TEST_CASE("recurrent modules: PyTorch's parameter names, order, shapes and initialization bound") {
  nn::LSTM lstm(nn::LSTMOptions(5, 4).num_layers(2).bidirectional(true));
  std::vector<std::string> names;
  for (const auto& [name, t] : lstm->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                          "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                                          "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1",
                                          "bias_hh_l1", "weight_ih_l1_reverse", "weight_hh_l1_reverse",
                                          "bias_ih_l1_reverse", "bias_hh_l1_reverse"});
  const auto state = lstm->state_dict();
  CHECK(state.at("weight_ih_l0").shape() == Shape{16, 5});
  CHECK(state.at("weight_ih_l1").shape() == Shape{16, 8});  // the layer below's two directions
  CHECK(state.at("weight_hh_l1_reverse").shape() == Shape{16, 4});
  for (const auto& [name, t] : state) CHECK(max(abs(t)).item() <= 0.5f);  // 1 / sqrt(4)
  CHECK(nn::GRU(3, 6)->state_dict().at("bias_hh_l0").shape() == Shape{18});
  CHECK(nn::RNN(nn::RNNOptions(3, 6).bias(false))->named_parameters().size() == 2);
}

TEST_CASE("recurrent modules: dropout between layers in training only; printing") {
  Generator g(3);
  const Tensor<float> x = randn<float>({5, 2, 3}, &g);
  nn::GRU plain(nn::GRUOptions(3, 4).num_layers(2));
  nn::GRU dropped(nn::GRUOptions(3, 4).num_layers(2).dropout(0.5));
  dropped->load_state_dict(plain->state_dict());
  const Tensor<float> reference = std::get<0>(plain(x));
  dropped->eval();
  CHECK(std::get<0>(dropped(x)).to_vector() == reference.to_vector());
  dropped->train();
  CHECK(std::get<0>(dropped(x)).to_vector() != reference.to_vector());
  // One layer: nothing between layers to drop.
  nn::LSTM one(nn::LSTMOptions(3, 4).dropout(0.5)), one_plain(3, 4);
  one->load_state_dict(one_plain->state_dict());
  CHECK(std::get<0>(one(x)).to_vector() == std::get<0>(one_plain(x)).to_vector());

  std::ostringstream s;
  s << *nn::LSTM(nn::LSTMOptions(3, 4).num_layers(2).batch_first(true).dropout(0.25).bidirectional(true)) << "|"
    << *nn::RNN(nn::RNNOptions(3, 4).nonlinearity(nn::kReLU).bias(false)) << "|" << *nn::GRU(3, 4);
  CHECK(s.str() == "LSTM(3, 4, num_layers=2, batch_first=true, dropout=0.25, bidirectional=true)|"
                   "RNN(3, 4, nonlinearity=relu, bias=false)|GRU(3, 4)");
}

TEST_CASE("recurrent modules: bad inputs and options are refused with the shapes") {
  nn::LSTM lstm(nn::LSTMOptions(3, 4).num_layers(2));
  CHECK_THROWS_WITH_AS(lstm(zeros<float>({5, 2, 6})), "LSTM: input of shape [5, 2, 6] must be [L, N, 3] or unbatched [L, 3]",
                       ShapeError);
  CHECK_THROWS_WITH_AS(lstm(zeros<float>({0, 2, 3})), "LSTM: the input of shape [0, 2, 3] has no time steps", ShapeError);
  CHECK_THROWS_WITH_AS(lstm(zeros<float>({5, 2, 3}), std::tuple{zeros<float>({2, 3, 4}), zeros<float>({2, 2, 4})}),
                       "LSTM: h_0 of shape [2, 3, 4] must be [2, 2, 4] for this input", ShapeError);
  CHECK_THROWS_WITH_AS(lstm(zeros<float>({5, 2, 3}), std::tuple{zeros<float>({2, 2, 4}), zeros<float>({1, 2, 4})}),
                       "LSTM: c_0 of shape [1, 2, 4] must be [2, 2, 4] for this input", ShapeError);
  CHECK_THROWS_WITH_AS(nn::GRU(nn::GRUOptions(3, 4).nonlinearity(nn::kReLU)), "GRU: nonlinearity is an option of RNN only",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(nn::RNN(3, 0), doctest::Contains("RNN: input_size, hidden_size and num_layers must be positive"),
                       std::invalid_argument);
  CHECK_THROWS_AS(nn::LSTM(nn::LSTMOptions(3, 4).dropout(1.5)), std::invalid_argument);
}

}  // namespace test_nn_recurrent
