// nn::Module::load_state_dict from a file PyTorch wrote: safetensors.torch.save_file(model.state_dict()) of a small
// CNN with a BatchNorm2d and a BatchNorm1d (tests/fixtures/nn/batchnorm_torch.safetensors, written by
// scripts/batchnorm_reference.py with torch 2.15.0), whose num_batches_tracked entries are int64 0-d tensors: they
// load into kiln's float buffers; entries that cannot load exactly are refused by name.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <limits>

#include "kiln/io/checkpoint.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

// The directory holding the fixtures: the build defines it; running from the repository root works without.
#ifndef KILN_TEST_DATA_DIR
#define KILN_TEST_DATA_DIR "tests/fixtures"
#endif

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_torch_state_dict {

using namespace kiln;

namespace {

std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(KILN_TEST_DATA_DIR) / "nn" / name;
}

// scripts/batchnorm_reference.py's model.
nn::Sequential make_net() {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 2, 3)), nn::BatchNorm2d(2), nn::ReLU(), nn::Flatten(),
                        nn::Linear(8, 3), nn::BatchNorm1d(3));
}

// Every entry of the module equals the file's (float entries bit for bit, integer ones as the same number).
void check_loaded(const nn::Sequential& net, const std::map<std::string, AnyTensor>& file) {
  const auto state = net->state_dict();
  REQUIRE(state.size() == file.size());
  for (auto& [name, t] : state) {
    INFO(name);
    const AnyTensor& entry = file.at(name);
    const Tensor<float> expected = entry.is<float>() ? entry.as<float>() : entry.as<int64_t>().to<float>();
    REQUIRE(t.shape() == expected.shape());
    CHECK(t.contiguous().to_vector() == expected.contiguous().to_vector());
  }
}

}  // namespace

TEST_CASE("load_state_dict: a state_dict PyTorch saved, int64 num_batches_tracked and all") {
  const std::map<std::string, AnyTensor> file = io::load_safetensors(fixture("batchnorm_torch.safetensors"));
  // As PyTorch writes them: int64 0-d counters beside float32 parameters and running statistics.
  for (const char* name : {"1.num_batches_tracked", "5.num_batches_tracked"}) {
    REQUIRE(file.at(name).dtype() == ScalarType::Int64);
    REQUIRE(file.at(name).dim() == 0);
    CHECK(file.at(name).as<int64_t>().item() == 5);
  }
  REQUIRE(file.at("1.running_mean").dtype() == ScalarType::Float);

  nn::Sequential net = make_net();
  net->load_state_dict(file);
  check_loaded(net, file);
  auto& bn2d = *std::dynamic_pointer_cast<nn::BatchNormImpl>((*net)[1]);
  auto& bn1d = *std::dynamic_pointer_cast<nn::BatchNormImpl>((*net)[5]);
  CHECK(bn2d.num_batches_tracked.item() == 5.0f);
  CHECK(bn1d.num_batches_tracked.item() == 5.0f);
  // The running statistics PyTorch accumulated over its 5 batches (printed by PyTorch, rounded).
  CHECK(bn2d.running_mean[0].item() == doctest::Approx(-0.129242).epsilon(1e-5));
  CHECK(bn2d.running_var[1].item() == doctest::Approx(1.026554).epsilon(1e-5));
  CHECK(bn1d.running_mean[2].item() == doctest::Approx(0.332676).epsilon(1e-5));
  CHECK(bn1d.running_var[0].item() == doctest::Approx(0.665069).epsilon(1e-5));

  // In eval() the loaded model gives PyTorch's output.
  const auto io = io::load_safetensors(fixture("batchnorm_torch_io.safetensors"));
  net->eval();
  const Tensor<float> y = net(io.at("x").as<float>()), expected = io.at("y").as<float>();
  REQUIRE(y.shape() == expected.shape());
  CHECK(max(abs(y - expected)).item() < 1e-5f);
  // Training goes on counting from PyTorch's count.
  net->train();
  net(io.at("x").as<float>());
  CHECK(bn1d.num_batches_tracked.item() == 6.0f);

  // Through a checkpoint: section(prefix) loads the same; section<float> still names the integer entry.
  io::Checkpoint ckpt;
  ckpt.put("model", file);
  nn::Sequential again = make_net();
  again->load_state_dict(ckpt.section("model"));
  check_loaded(again, file);
  CHECK_THROWS_WITH_AS(ckpt.section<float>("model"),
                       "Checkpoint: \"model.1.num_batches_tracked\" holds int64 values, expected float32", DTypeError);
}

TEST_CASE("load_state_dict: integers load into buffers when exact; other dtypes and shapes are refused by name") {
  const std::map<std::string, AnyTensor> file = io::load_safetensors(fixture("batchnorm_torch.safetensors"));
  auto with = [&](const std::string& name, const AnyTensor& value) {
    std::map<std::string, AnyTensor> state = file;
    state[name] = value;
    return state;
  };
  nn::Sequential net = make_net();
  auto& bn1d = *std::dynamic_pointer_cast<nn::BatchNormImpl>((*net)[5]);

  // Exact: large counts with at most 24 significant bits, negative ones, int32.
  net->load_state_dict(with("5.num_batches_tracked", full<int64_t>({}, int64_t(1) << 40)));
  CHECK(bn1d.num_batches_tracked.item() == 1099511627776.0f);
  net->load_state_dict(with("5.num_batches_tracked", full<int64_t>({}, (int64_t(1) << 24) - 1)));
  CHECK(bn1d.num_batches_tracked.item() == 16777215.0f);
  net->load_state_dict(with("5.num_batches_tracked", full<int32_t>({}, 12)));
  CHECK(bn1d.num_batches_tracked.item() == 12.0f);
  net->load_state_dict(with("5.running_mean", arange<int64_t>(-1, 2)));
  CHECK(bn1d.running_mean.to_vector() == std::vector<float>{-1, 0, 1});

  // Not exact: refused, naming the entry and the value.
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("5.num_batches_tracked", full<int64_t>({}, (int64_t(1) << 24) + 1))),
                       "load_state_dict: \"5.num_batches_tracked\" holds the int64 value 16777217, which float32 "
                       "cannot represent exactly",
                       DTypeError);
  CHECK_THROWS_WITH_AS(
      net->load_state_dict(with("1.num_batches_tracked", full<int64_t>({}, std::numeric_limits<int64_t>::max()))),
      "load_state_dict: \"1.num_batches_tracked\" holds the int64 value 9223372036854775807, which float32 cannot "
      "represent exactly",
      DTypeError);
  // Integers for a parameter, other dtypes anywhere: refused by name.
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("4.weight", zeros<int64_t>({3, 8}))),
                       "load_state_dict: \"4.weight\" holds int64 values, the module's parameter float32 (integer "
                       "values load into buffers only)",
                       DTypeError);
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("1.running_mean", zeros<double>({2}))),
                       "load_state_dict: \"1.running_mean\" holds float64 values, the module's buffer float32; "
                       "convert the entry first",
                       DTypeError);
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("0.bias", zeros<bool>({2}))),
                       "load_state_dict: \"0.bias\" holds bool values, the module's parameter float32; convert the "
                       "entry first",
                       DTypeError);
  // Shapes are checked first, whatever the dtype.
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("1.num_batches_tracked", full<int64_t>({1}, 5))),
                       "load_state_dict: \"1.num_batches_tracked\" has shape [1], the module's []", ShapeError);
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("5.running_var", ones<float>({2}))),
                       "load_state_dict: \"5.running_var\" has shape [2], the module's [3]", ShapeError);
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("0.weight", AnyTensor())),
                       "load_state_dict: \"0.weight\" is undefined", std::invalid_argument);
  // Keys as before: an unexpected one of any dtype, a missing one.
  CHECK_THROWS_WITH_AS(net->load_state_dict(with("6.num_batches_tracked", full<int64_t>({}, 5))),
                       "load_state_dict: 1 unexpected key(s)", std::invalid_argument);
  net->load_state_dict(with("6.num_batches_tracked", full<int64_t>({}, 5)), /*strict=*/false);
  std::map<std::string, AnyTensor> partial = file;
  partial.erase("5.running_var");
  CHECK_THROWS_WITH_AS(net->load_state_dict(partial), "load_state_dict: missing key \"5.running_var\"",
                       std::invalid_argument);

  // A braced list of float tensors still means the Tensor<float> overload.
  net->load_state_dict({{"5.num_batches_tracked", full<float>({}, 3.0f)}}, /*strict=*/false);
  CHECK(bn1d.num_batches_tracked.item() == 3.0f);
}

// The other direction: with KILN_INTEROP_DIR set, this writes a kiln-trained model's state_dict (num_batches_tracked
// as float32) and its eval() output for `python3 scripts/batchnorm_reference.py check DIR`, which loads it into
// PyTorch with load_state_dict(strict=True).
TEST_CASE("load_state_dict: a state_dict for PyTorch to load (KILN_INTEROP_DIR)") {
  const char* dir = std::getenv("KILN_INTEROP_DIR");
  if (!dir) return;
  std::filesystem::create_directories(dir);
  manual_seed(4);
  nn::Sequential net = make_net();
  {
    NoGradGuard no_grad;
    for (int i = 0; i < 3; ++i) net(Tensor<float>(randn<float>({8, 1, 4, 4}) * 2.0f + 0.5f));
  }
  net->eval();
  const Tensor<float> x = randn<float>({6, 1, 4, 4});
  const auto state = net->state_dict();
  io::save_safetensors(std::filesystem::path(dir) / "kiln_batchnorm.safetensors",
                       std::map<std::string, AnyTensor>(state.begin(), state.end()));
  io::save_safetensors(std::filesystem::path(dir) / "kiln_batchnorm_io.safetensors", {{"x", x}, {"y", net(x)}});
  MESSAGE("wrote kiln_batchnorm.safetensors and kiln_batchnorm_io.safetensors into ", std::string(dir));
}

}  // namespace test_nn_torch_state_dict
