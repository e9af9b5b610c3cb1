// io::Checkpoint: a training run (CNN with BatchNorm, Adam, OneCycle, shuffled DataLoader) saved after one
// epoch and resumed in fresh objects continues bitwise as the uninterrupted run; entries keep their dtypes.
#include <doctest/doctest.h>

#include <filesystem>

#include "kiln/data.hpp"
#include "kiln/io/checkpoint.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_io_checkpoint {

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

struct Run {
  nn::Sequential net;
  optim::Adam<float> opt;
  optim::OneCycleLR schedule;
  data::DataLoader<data::TensorDataset<float, int64_t>> loader;

  static constexpr int64_t kEpochs = 3;

  // Parameters drawn from `init_seed`: a resumed run starts from other values, which the checkpoint replaces.
  static nn::Sequential make_net(uint64_t init_seed) {
    manual_seed(init_seed);
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3).padding(1)), nn::BatchNorm2d(4), nn::ReLU(),
                          nn::MaxPool2d(2), nn::Flatten(), nn::Linear(64, 3));
  }
  static data::TensorDataset<float, int64_t> dataset() {
    Generator gen(11);
    const Tensor<float> x = randn<float>({96, 1, 8, 8}, &gen);
    // A learnable label: which third of the image is brightest.
    const Tensor<int64_t> y = argmax(sum(x.view({96, 1, 8, 8}).narrow(2, 0, 6).reshape({96, 3, 16}), {2}), 1);
    return data::TensorDataset<float, int64_t>(x, y);
  }

  explicit Run(uint64_t init_seed)
      : net(make_net(init_seed)),
        opt(net->parameters(), optim::AdamOptions(1e-2)),
        schedule(opt, 1e-2, kEpochs * 6),
        loader(dataset(), {.batch_size = 16, .shuffle = true, .seed = 5}) {}

  void epoch(int64_t e) {
    loader.set_epoch(e);
    for (auto& batch : loader) {
      opt.zero_grad();
      F::cross_entropy(net(batch.data), batch.target).backward();
      opt.step();
      schedule.step();
    }
  }

  io::Checkpoint checkpoint(int64_t epochs_done) const {
    io::Checkpoint c;
    c.put("model", net->state_dict()).put("optimizer", opt.state_dict()).put("scheduler", schedule.state_dict());
    c.put("generator", default_generator()).put("epoch", AnyTensor(full<int64_t>({}, epochs_done)));
    return c;
  }
  int64_t restore(const io::Checkpoint& c) {
    net->load_state_dict(c.section<float>("model"));
    opt.load_state_dict(c.section("optimizer"));
    schedule.load_state_dict(c.section("scheduler"));
    c.restore("generator", default_generator());
    return c.scalar<int64_t>("epoch");
  }
};

void check_bitwise_equal(const nn::Sequential& a, const nn::Sequential& b) {
  const auto sa = a->state_dict(), sb = b->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (auto& [name, t] : sa) {
    INFO(name);
    const Tensor<float> u = t.contiguous(), v = sb.at(name).contiguous();
    REQUIRE(u.shape() == v.shape());
    CHECK(std::memcmp(u.data_ptr(), v.data_ptr(), size_t(u.numel()) * sizeof(float)) == 0);
  }
}

}  // namespace

TEST_CASE("a run checkpointed after an epoch and resumed in fresh objects continues bitwise as the uninterrupted run") {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "kiln_test_checkpoint.safetensors";
  Run uninterrupted(1);
  for (int64_t e = 0; e < Run::kEpochs; ++e) uninterrupted.epoch(e);

  {
    Run first(1);
    first.epoch(0);
    first.checkpoint(1).save(path);
  }
  Run resumed(99);  // other initial values: everything must come from the checkpoint
  const int64_t start = resumed.restore(io::Checkpoint::load(path));
  CHECK(start == 1);
  for (int64_t e = start; e < Run::kEpochs; ++e) resumed.epoch(e);
  check_bitwise_equal(resumed.net, uninterrupted.net);
  CHECK(resumed.schedule.get_last_lr() == uninterrupted.schedule.get_last_lr());
  // It learned something, so the comparison is not between two untouched models.
  {
    NoGradGuard no_grad;
    uninterrupted.net->eval();
    const auto ds = Run::dataset();
    const auto all = ds.get_batch(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
    CHECK(F::cross_entropy(uninterrupted.net(all.data), all.target).item() < 1.0);
  }
  std::filesystem::remove(path);
}

TEST_CASE("Checkpoint: sections, scalars and generators keep their values and dtypes; wrong entries are named") {
  io::Checkpoint c;
  c.put("a", std::map<std::string, Tensor<float>>{{"w", ones<float>({2})}, {"b", zeros<float>({1})}});
  c.put("step", AnyTensor(full<int64_t>({}, 42)));
  Generator gen(123);
  (void)randn<float>({10}, &gen);
  c.put("gen", gen);
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "kiln_test_checkpoint2.safetensors";
  c.save(path);
  const io::Checkpoint back = io::Checkpoint::load(path);
  CHECK(back.section<float>("a").size() == 2);
  CHECK(back.section<float>("a").at("w")[1].item() == 1.0f);
  CHECK(back.scalar<int64_t>("step") == 42);
  Generator restored;
  back.restore("gen", restored);
  CHECK(restored.state().seed == gen.state().seed);
  CHECK(restored.state().counter == gen.state().counter);
  CHECK(randn<float>({4}, &restored)[3].item() == randn<float>({4}, &gen)[3].item());
  CHECK_THROWS_WITH_AS(back.section<double>("a"), "Checkpoint: \"a.b\" holds float32 values, expected float64", DTypeError);
  CHECK_THROWS_WITH_AS(back.scalar<int64_t>("missing"), "Checkpoint: no entry \"missing\"", std::invalid_argument);
  CHECK_THROWS_WITH_AS(back.scalar<double>("step"), "Checkpoint: \"step\" must hold one float64, got int64 of shape []",
                       DTypeError);
  std::filesystem::remove(path);
}

}  // namespace test_io_checkpoint
