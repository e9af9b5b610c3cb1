// nn::Module, Linear, Sequential, activations: parameters and names, train/eval, zero_grad,
// state_dict round trip, printing, Linear against its formula, and a small end-to-end training run.
#include <doctest/doctest.h>

#include <sstream>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_nn_module {

using namespace kiln;
namespace F = kiln::nn::functional;

TEST_CASE("Linear: PyTorch's initialization bounds, forward as x W^T + b, gradients") {
  manual_seed(3);
  nn::Linear fc(16, 4);
  const double bound = 1 / std::sqrt(16.0);
  CHECK(fc->weight.shape() == Shape{4, 16});
  CHECK(fc->bias.shape() == Shape{4});
  CHECK(double(amax(abs(fc->weight)).item()) <= bound);
  CHECK(double(amax(abs(fc->weight)).item()) > 0.8 * bound);  // uniform over the whole range
  CHECK(fc->weight.requires_grad());
  const Tensor<float> x = randn<float>({3, 16});
  const Tensor<float> y = fc(x);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t o = 0; o < 4; ++o) {
      double ref = fc->bias[o].item();
      for (int64_t k = 0; k < 16; ++k) ref += double(x[i][k].item()) * fc->weight[o][k].item();
      CHECK(y[i][o].item() == doctest::Approx(ref).epsilon(1e-5));
    }
  sum(y).backward();
  for (int64_t k = 0; k < 16; ++k)
    CHECK(fc->weight.grad()[1][k].item() == doctest::Approx(x[0][k].item() + x[1][k].item() + x[2][k].item()).epsilon(1e-5));
  CHECK(fc->bias.grad()[2].item() == doctest::Approx(3.0));
  CHECK_THROWS_WITH_AS(fc(randn<float>({3, 5})), "Linear: input of shape [3, 5] does not end in in_features = 16", ShapeError);
  nn::Linear no_bias(nn::LinearOptions(4, 2).bias(false));
  CHECK(no_bias->parameters().size() == 1);
}

TEST_CASE("Sequential: named parameters, printing, train/eval, zero_grad, state_dict round trip") {
  nn::Sequential net(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
  std::vector<std::string> names;
  for (auto& [name, t] : net->named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(net->parameters().size() == 4);
  std::ostringstream printed;
  printed << *net;
  CHECK(printed.str() ==
        "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=true)\n  (1): ReLU()\n"
        "  (2): Linear(in_features=8, out_features=3, bias=true)\n)");
  net->eval();
  CHECK_FALSE(net->is_training());
  CHECK_FALSE((*net)[1]->is_training());
  net->train();
  CHECK((*net)[2]->is_training());
  sum(net(randn<float>({2, 4}))).backward();
  CHECK(net->parameters()[0].grad().defined());
  net->zero_grad();
  CHECK_FALSE(net->parameters()[0].grad().defined());

  // A second network takes the first's values.
  nn::Sequential other(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
  std::map<std::string, Tensor<float>> state;
  for (auto& [name, t] : net->state_dict()) state.emplace(name, t.clone());
  other->load_state_dict(state);
  const Tensor<float> x = randn<float>({5, 4});
  CHECK(max(abs(net(x) - other(x))).item() == 0.0f);
  state.erase("2.bias");
  CHECK_THROWS_WITH_AS(other->load_state_dict(state), "load_state_dict: missing key \"2.bias\"", std::invalid_argument);
  state["2.bias"] = zeros<float>({4});
  CHECK_THROWS_AS(other->load_state_dict(state), ShapeError);
}

TEST_CASE("end to end: an MLP learns two interleaved spirals with Adam and cross_entropy") {
  manual_seed(7);
  const int64_t n = 400;
  Tensor<float> x = empty<float>({n, 2});
  Tensor<int64_t> labels = empty<int64_t>({n});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t cls = i % 2;
    const double r = double(i / 2) / double(n / 2) * 4 + 0.3, a = r * 1.6 + cls * 3.14159265;
    x.data_ptr()[2 * i] = float(r * std::cos(a) / 4);
    x.data_ptr()[2 * i + 1] = float(r * std::sin(a) / 4);
    labels.data_ptr()[i] = cls;
  }
  nn::Sequential net(nn::Linear(2, 64), nn::Tanh(), nn::Linear(64, 64), nn::Tanh(), nn::Linear(64, 2));
  optim::Adam opt(net->parameters(), optim::AdamOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 600; ++step) {
    opt.zero_grad();
    const Tensor<float> loss = F::cross_entropy(net(x), labels);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item();
    last = loss.item();
  }
  const Tensor<int64_t> predicted = argmax(net(x), 1);
  const double accuracy = double(sum(predicted == labels).item()) / double(n);
  MESSAGE("spirals: loss ", first, " -> ", last, ", accuracy ", accuracy);
  CHECK(first > 0.6);
  CHECK(last < 0.1);
  CHECK(accuracy > 0.97);
}

TEST_CASE("Dropout: zeroes about p of the elements and rescales the rest in training, identity in eval") {
  manual_seed(11);
  nn::Dropout drop(0.25);
  const Tensor<float> x = ones<float>({100000});
  const Tensor<float> y = drop(x);
  const double zeros_ = double(sum(y == 0.0f).item()) / 100000;
  CHECK(zeros_ == doctest::Approx(0.25).epsilon(0.03));
  CHECK(double(amax(y).item()) == doctest::Approx(1 / 0.75));
  CHECK(double(mean(y).item()) == doctest::Approx(1.0).epsilon(0.01));
  drop->eval();
  CHECK(amax(abs(drop(x) - x)).item() == 0.0f);
  // The gradient flows through the kept elements only, with the same scale.
  drop->train();
  Tensor<float> w = ones<float>({1000}).requires_grad_();
  const Tensor<float> out = drop(w);
  sum(out).backward();
  CHECK(amax(abs(w.grad() - out)).item() == 0.0f);  // d out / d w = mask / (1 - p) = out / w
}

TEST_CASE("Embedding: rows by index, any index shape, gradients accumulate for repeated indices") {
  nn::Embedding emb(10, 3);
  Tensor<int64_t> idx = empty<int64_t>({2, 2});
  int64_t values[] = {4, 1, 4, 9};
  for (int k = 0; k < 4; ++k) idx.data_ptr()[k] = values[k];
  const Tensor<float> e = emb(idx);
  CHECK(e.shape() == Shape{2, 2, 3});
  CHECK(e[1][1][2].item() == emb->weight[9][2].item());
  sum(e).backward();
  CHECK(emb->weight.grad()[4][0].item() == 2.0f);
  CHECK(emb->weight.grad()[0][0].item() == 0.0f);
}

TEST_CASE("embedding: an index outside [0, num_embeddings) throws, a negative one too (as torch)") {
  // torch.nn.functional.embedding(torch.tensor([-1]), torch.arange(6.).view(3, 2)) raises IndexError ("index out
  // of range in self"); it does not return the last row.
  const Tensor<float> weight = arange<float>(0, 6).view({3, 2});
  CHECK_THROWS_WITH_AS(F::embedding(tensor<int64_t>({-1}), weight),
                       "embedding: index -1 is out of range for dim 0 of size 3", std::out_of_range);
  CHECK_THROWS_WITH_AS(F::embedding(tensor<int64_t>({0, 3}), weight),
                       "embedding: index 3 is out of range for dim 0 of size 3", std::out_of_range);
  nn::Embedding emb(3, 2);
  CHECK_THROWS_AS(emb(full<int64_t>({1, 1}, -3)), std::out_of_range);
  // A 0-dim index gives one row: torch's result has shape [2].
  const Tensor<float> row = F::embedding(full<int64_t>({}, 2), weight);
  CHECK(row.shape() == Shape{2});
  CHECK(row.to_vector() == std::vector<float>{4, 5});
}

TEST_CASE("a batched eval forward under InferenceMode allocates no storage after warm-up, and equals the no-grad one") {
  manual_seed(5);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)), nn::BatchNorm2d(8), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)), nn::ReLU(),
                     nn::Flatten(), nn::Linear(16 * 14 * 14, 10));
  net->eval();
  const Tensor<float> x = randn<float>({16, 1, 28, 28});
  Tensor<float> reference;
  {
    NoGradGuard no_grad;
    reference = net(x);
  }
  InferenceMode guard;
  Tensor<float> y;
  // Warm-up in the steady state's shape: the previous result is alive while the next is computed.
  for (int warm = 0; warm < 2; ++warm) y = net(x);
  const MemoryStats before = memory_stats();
  for (int i = 0; i < 5; ++i) y = net(x);
  const MemoryStats after = memory_stats();
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.cache_hits - before.cache_hits == after.allocations - before.allocations);
  CHECK(after.allocations > before.allocations);
  CHECK(y.is_inference());
  CHECK(double(amax(abs(y - reference)).item()) == 0.0);
}

namespace {
// A module holding a ModuleList of blocks and a ModuleDict of heads, as a user's model would.
struct TwoHeads : nn::Module {
  nn::ModuleList blocks;
  nn::ModuleDict heads;
  TwoHeads() : nn::Module("TwoHeads") {
    for (int i = 0; i < 3; ++i) blocks->push_back(nn::Linear(4, 4));
    blocks->push_back(nn::ReLU());
    heads = nn::ModuleDict({{"cls", nn::Linear(4, 3).ptr()}, {"box", nn::Linear(4, 2).ptr()}});
    register_module("blocks", blocks.ptr());
    register_module("heads", heads.ptr());
  }
  std::pair<Tensor<float>, Tensor<float>> run(Tensor<float> h) {
    for (const auto& block : *blocks) h = block->forward(h);
    return {heads["cls"]->forward(h), heads["box"]->forward(h)};
  }
};
}  // namespace

TEST_CASE("ModuleList and ModuleDict register their modules: names, parameters, train/eval, printing, gradients") {
  TwoHeads model;
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                                          "blocks.2.weight", "blocks.2.bias", "heads.cls.weight", "heads.cls.bias",
                                          "heads.box.weight", "heads.box.bias"});
  CHECK(model.blocks->size() == 4);
  CHECK(model.blocks[3]->name() == "ReLU");
  CHECK(model.heads->keys() == std::vector<std::string>{"cls", "box"});
  CHECK(model.heads->contains("box"));
  CHECK_FALSE(model.heads->contains("seg"));
  model.eval();
  CHECK_FALSE(model.blocks[1]->is_training());
  CHECK_FALSE(model.heads["box"]->is_training());

  // The forward through the containers equals the layers called by hand, and gradients reach every parameter.
  const Tensor<float> x = randn<float>({5, 4});
  auto [cls, box] = model.run(x);
  Tensor<float> h = x;
  for (size_t i = 0; i < 3; ++i) h = model.blocks->at<nn::LinearImpl>(i).forward(h);
  h = relu(h);
  CHECK(cls.to_vector() == model.heads->ptr<nn::LinearImpl>("cls")->forward(h).to_vector());
  Tensor<float>(sum(cls) + sum(box)).backward();
  for (const Tensor<float>& p : model.parameters()) CHECK(p.grad().defined());

  std::ostringstream printed;
  printed << *model.heads;
  CHECK(printed.str() ==
        "ModuleDict(\n  (cls): Linear(in_features=4, out_features=3, bias=true)\n"
        "  (box): Linear(in_features=4, out_features=2, bias=true)\n)");
}

TEST_CASE("ModuleList and ModuleDict: extend, replace, pop, clear, update; errors name what is wrong") {
  nn::ModuleList list(nn::Linear(2, 2), nn::Tanh());
  list->extend(*list);
  CHECK(list->size() == 4);
  CHECK(list->named_children().back().first == "3");
  CHECK(list->ptr(2) == list->ptr(0));  // (shared, not copied)
  // replace_module changes what the list holds and what a Sequential runs
  nn::Sequential seq(nn::Linear(2, 2), nn::ReLU());
  seq->replace_module("1", nn::Tanh().ptr());
  CHECK(seq[1]->name() == "Tanh");
  const Tensor<float> in = randn<float>({3, 2});
  CHECK(seq(in).to_vector() == Tensor<float>(tanh(seq[0]->forward(in))).to_vector());
  CHECK_THROWS_WITH_AS(list[4], doctest::Contains("ModuleList: index 4 is out of range for 4 modules"),
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(list->ptr<nn::LinearImpl>(1),
                       doctest::Contains("ModuleList: module 1 is a Tanh, not the module type asked for"),
                       std::invalid_argument);

  nn::ModuleDict dict;
  CHECK(dict->is_empty());
  dict->insert("a", nn::Linear(2, 3));
  dict->insert("b", nn::ReLU());
  const nn::Linear replacement(2, 5);
  dict->insert("a", replacement);  // replaced in place: the order stays a, b
  CHECK(dict->keys() == std::vector<std::string>{"a", "b"});
  CHECK(dict->ptr<nn::LinearImpl>("a") == replacement.ptr());
  CHECK(dict->parameters().size() == 2);
  CHECK(dict->state_dict().at("a.weight").shape() == Shape{5, 2});
  nn::ModuleDict other({{"c", nn::Sigmoid().ptr()}, {"b", nn::Tanh().ptr()}});
  dict->update(*other);
  CHECK(dict->keys() == std::vector<std::string>{"a", "b", "c"});
  CHECK(dict["b"]->name() == "Tanh");
  CHECK(dict->pop("a") == replacement.ptr());
  CHECK(dict->keys() == std::vector<std::string>{"b", "c"});
  CHECK(dict->parameters().empty());
  CHECK_THROWS_WITH_AS(dict["a"], doctest::Contains("ModuleDict: no module \"a\" (it holds \"b\", \"c\")"),
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(dict->insert("x.y", nn::ReLU()), doctest::Contains("without '.', got \"x.y\""),
                       std::invalid_argument);
  dict->clear();
  CHECK(dict->size() == 0);
  CHECK_THROWS_WITH_AS(dict->pop("b"), doctest::Contains("no module \"b\" (it holds none)"), std::out_of_range);

  struct Twice : nn::Module {
    Twice() : nn::Module("Twice") {
      register_module("fc", std::make_shared<nn::LinearImpl>(2, 2));
      register_module("fc", std::make_shared<nn::LinearImpl>(2, 2));
    }
  };
  CHECK_THROWS_WITH_AS(Twice(), doctest::Contains("Twice: a submodule \"fc\" is already registered"),
                       std::invalid_argument);
}

}  // namespace test_nn_module
