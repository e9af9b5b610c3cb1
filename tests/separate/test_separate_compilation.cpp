// A program built with KILN_SEPARATE_COMPILATION (core/config.hpp): this file sees only the declarations of the
// training stack's float code, which its compiled part (examples/kiln_part.cpp, shared with the examples) defines.
// Each case runs the part's code and compares it with the same computation compiled here: the double instantiations
// of the same templates (kiln's part holds only float), or kiln's elementwise ops and matmul.
#include <doctest/doctest.h>

#ifndef KILN_SEPARATE_COMPILATION
#error "tests/separate is built with -DKILN_SEPARATE_COMPILATION"
#endif

#include <sstream>

#include "kiln/data.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

namespace test_separate_compilation {

using namespace kiln;
namespace F = kiln::nn::functional;

// |a - b| <= tol (1 + |b|) everywhere, a float result against its double reference.
void check_close(const Tensor<float>& a, const Tensor<double>& b, double tol = 1e-5) {
  REQUIRE(a.shape() == b.shape());
  const Tensor<double> ad = a.detach().to<double>();
  const double worst = double(amax(abs(ad - b.detach()) / (abs(b.detach()) + 1.0)).item());
  CHECK(worst <= tol);
}

Tensor<double> as_double(const Tensor<float>& t) { return t.detach().to<double>(); }

TEST_CASE("separate compilation: the tensor and autograd runtime in the part (storage, shapes, views, engine)") {
  // Storage through the part's caching allocator: a freed block of a size class comes back from the cache.
  empty_cache();
  const MemoryStats before = memory_stats();
  { const Tensor<float> t = empty<float>({1000}); }
  { const Tensor<float> t = empty<float>({1000}); }
  const MemoryStats after = memory_stats();
  CHECK(after.allocations - before.allocations == 2);
  CHECK(after.cache_hits - before.cache_hits == 1);
  // Shape errors are made by the part's broadcast_shapes and checked_numel, with the op and the shapes named.
  CHECK_THROWS_WITH_AS(Tensor<float>(ones<float>({2, 3}) + ones<float>({4})),
                       "add: shapes [2, 3] and [4] cannot be broadcast",
                       ShapeError);
  CHECK_THROWS_AS(empty<float>({-1}), ShapeError);
  // A broadcast leaf used twice, through views (a transpose and a slice): the fused node's repeated leaves, the
  // gradient summed to a broadcast leaf's shape, and the views' backward all run in the part. Against the same
  // computation in double, whose templates this file compiles but whose runtime is the part's as well, and
  // against the chain rule: y = sum(a^T * b + a^T * a^T), b of shape [1, 3] broadcast over 4 rows.
  Tensor<float> a = rand<float>({3, 4}) - 0.5f, b = rand<float>({1, 3});
  a.requires_grad_();
  b.requires_grad_();
  const Tensor<float> at = a.transpose(0, 1);
  sum(at * b + at * at).backward();
  const auto pa = a.detach().to<double>().to_vector(), pb = b.detach().to<double>().to_vector();
  const auto ga = a.grad().to<double>().to_vector(), gb = b.grad().to<double>().to_vector();
  for (int i = 0; i < 3; ++i) {
    double column = 0;  // d/db_i: the sum of a's row i
    for (int j = 0; j < 4; ++j) {
      CHECK(ga[size_t(i * 4 + j)] == doctest::Approx(pb[size_t(i)] + 2 * pa[size_t(i * 4 + j)]).epsilon(1e-6));
      column += pa[size_t(i * 4 + j)];
    }
    CHECK(gb[size_t(i)] == doctest::Approx(column).epsilon(1e-5));
  }
  Tensor<double> x = rand<double>({5, 2});
  x.requires_grad_();
  const Tensor<double> rows = x.slice(0, 1, 4);  // a view: its gradient lands in rows 1 to 3 of x
  sum(rows * rows).backward();
  const auto px = x.detach().to_vector(), gx = x.grad().to_vector();
  for (size_t k = 0; k < 10; ++k) CHECK(gx[k] == (k >= 2 && k < 8 ? 2 * px[k] : 0.0));
}

TEST_CASE("separate compilation: Linear, activations, Flatten, Dropout, Embedding and Sequential") {
  manual_seed(11);
  nn::Sequential net(nn::Linear(6, 5), nn::Tanh(), nn::Linear(5, 4), nn::GELU(), nn::Flatten(), nn::Dropout(0.0));
  const Tensor<float> x = randn<float>({3, 6});
  const Tensor<float> y = net(x);
  auto& fc1 = dynamic_cast<nn::LinearImpl&>(*(*net)[0]);
  auto& fc2 = dynamic_cast<nn::LinearImpl&>(*(*net)[2]);
  const Tensor<double> h = tanh(matmul(as_double(x), as_double(fc1.weight).t()) + as_double(fc1.bias));
  const Tensor<double> ref = gelu(matmul(h, as_double(fc2.weight).t()) + as_double(fc2.bias));
  check_close(y, ref);

  sum(y).backward();  // the part's engine
  CHECK(fc1.weight.grad().defined());
  CHECK(fc2.bias.grad().shape() == Shape{4});

  for (const Tensor<float>& v : {nn::ReLU()(x), nn::Sigmoid()(x), nn::SiLU()(x)}) CHECK(v.shape() == x.shape());
  check_close(nn::ReLU()(x), relu(as_double(x)));
  check_close(nn::SiLU()(x), silu(as_double(x)));

  nn::Dropout half(0.5);
  const Tensor<float> ones_in = ones<float>({1000});
  const Tensor<float> dropped = half(ones_in);
  const double kept = double(sum(dropped != 0.0f).to<float>().item());
  CHECK(kept > 400);
  CHECK(kept < 600);
  CHECK(double(amax(dropped).item()) == doctest::Approx(2.0));
  half->eval();
  CHECK(double(sum(half(ones_in)).item()) == 1000.0);

  nn::Embedding table(10, 3);
  const Tensor<int64_t> idx = tensor<int64_t>({{1, 7}, {7, 0}});
  const Tensor<float> rows = table(idx);
  CHECK(rows.shape() == Shape{2, 2, 3});
  check_close(rows[1][0], as_double(table->weight[7]));
}

TEST_CASE("separate compilation: Module's names, printing, state_dict round trip") {
  nn::Sequential net(nn::Linear(4, 8), nn::ReLU(), nn::BatchNorm1d(8), nn::Linear(8, 3));
  std::vector<std::string> names;
  for (auto& [name, t] : net->state_dict()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.num_batches_tracked", "2.running_mean",
                                          "2.running_var", "2.weight", "3.bias", "3.weight"});
  std::ostringstream printed;
  printed << *net;
  CHECK(printed.str() ==
        "Sequential(\n  (0): Linear(in_features=4, out_features=8, bias=true)\n  (1): ReLU()\n"
        "  (2): BatchNorm1d(8, eps=1e-05, momentum=0.1)\n  (3): Linear(in_features=8, out_features=3, bias=true)\n)");
  nn::Sequential copy(nn::Linear(4, 8), nn::ReLU(), nn::BatchNorm1d(8), nn::Linear(8, 3));
  copy->load_state_dict(net->state_dict());
  net->eval();
  copy->eval();
  const Tensor<float> x = randn<float>({5, 4});
  CHECK(double(amax(abs(net(x) - copy(x))).item()) == 0.0);
  CHECK_THROWS_AS(copy->load_state_dict({{"0.weight", zeros<float>({8, 4})}}), std::invalid_argument);
}

TEST_CASE("separate compilation: Conv2d, pooling and normalization against their double instantiations") {
  manual_seed(5);
  const Tensor<float> x = randn<float>({2, 8, 6, 6});
  nn::Conv2d conv(nn::Conv2dOptions(8, 8, 3).padding(1));  // 3x3, 8 -> 8 channels: the Winograd path
  check_close(conv(x), F::conv2d(as_double(x), as_double(conv->weight), as_double(conv->bias), {1, 1}, {1, 1}), 1e-4);
  check_close(nn::MaxPool2d(2)(x), F::max_pool2d(as_double(x), {2, 2}));
  check_close(nn::AvgPool2d(3, 1, 1)(x), F::avg_pool2d(as_double(x), {3, 3}, {1, 1}, {1, 1}));
  check_close(nn::AdaptiveAvgPool2d(2, 3)(x), F::adaptive_avg_pool2d(as_double(x), {2, 3}));

  nn::LayerNorm ln(Shape{6, 6});
  check_close(ln(x), F::layer_norm(as_double(x), Shape{6, 6}, as_double(ln->weight), as_double(ln->bias)), 1e-4);
  nn::GroupNorm gn(4, 8);
  check_close(gn(x), F::group_norm(as_double(x), 4, as_double(gn->weight), as_double(gn->bias)), 1e-4);
  nn::BatchNorm2d bn(8);
  Tensor<double> mean_d = zeros<double>({8}), var_d = ones<double>({8});
  check_close(bn(x), F::batch_norm(as_double(x), mean_d, var_d, as_double(bn->weight), as_double(bn->bias), true), 1e-4);
  check_close(bn->running_var, var_d);
  CHECK(double(bn->num_batches_tracked.item()) == 1.0);
}

TEST_CASE("separate compilation: the float losses against their double instantiations") {
  manual_seed(7);
  const Tensor<float> a = randn<float>({6, 5}), b = randn<float>({6, 5}), p = rand<float>({6, 5});
  const Tensor<int64_t> target = tensor<int64_t>({0, 4, 2, -100, 1, 3});
  const Tensor<float> w = rand<float>({5}) + 0.5f;
  check_close(F::mse_loss(a, b), F::mse_loss(as_double(a), as_double(b)));
  check_close(F::l1_loss(a, b, nn::Reduction::Sum), F::l1_loss(as_double(a), as_double(b), nn::Reduction::Sum));
  check_close(F::smooth_l1_loss(a, b, nn::Reduction::None, 0.5),
              F::smooth_l1_loss(as_double(a), as_double(b), nn::Reduction::None, 0.5));
  check_close(F::binary_cross_entropy_with_logits(a, p), F::binary_cross_entropy_with_logits(as_double(a), as_double(p)));
  check_close(F::nll_loss(a, target), F::nll_loss(as_double(a), target));
  check_close(F::cross_entropy(a, target, w, -100, nn::Reduction::Mean, 0.1),
              F::cross_entropy(as_double(a), target, as_double(w), -100, nn::Reduction::Mean, 0.1));
  check_close(F::cross_entropy(a, softmax(b, 1)), F::cross_entropy(as_double(a), softmax(as_double(b), 1)));
}

// Three steps of an optimizer on float parameters (the part's instantiation) and on the same values in double
// (compiled here), with the same gradients.
template <template <class> class Opt, class Options>
void check_optimizer(const Options& options) {
  manual_seed(2);
  Tensor<float> pf = randn<float>({4, 3});
  Tensor<double> pd = as_double(pf);
  pf.requires_grad_();
  pd.requires_grad_();
  Opt<float> of({pf}, options);
  Opt<double> od({pd}, options);
  for (int step = 0; step < 3; ++step) {
    const Tensor<float> g = randn<float>({4, 3});
    of.zero_grad();
    od.zero_grad();
    sum(pf * g).backward();
    sum(pd * as_double(g)).backward();
    of.step();
    od.step();
  }
  check_close(pf, pd);
  CHECK(of.state_dict().size() == od.state_dict().size());
}

TEST_CASE("separate compilation: Adam, AdamW, SGD and RMSprop against their double instantiations; clipping") {
  check_optimizer<optim::Adam>(optim::AdamOptions(0.1).weight_decay(0.01).amsgrad(true));
  check_optimizer<optim::AdamW>(optim::AdamWOptions(0.1));
  check_optimizer<optim::SGD>(optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  check_optimizer<optim::RMSprop>(optim::RMSpropOptions(0.01).centered(true).momentum(0.5));

  Tensor<float> pf = randn<float>({10});
  pf.requires_grad_();
  sum(pf * 3.0f).backward();
  Tensor<double> pd = as_double(pf);
  pd.requires_grad_();
  sum(pd * 3.0).backward();
  const double norm_f = optim::clip_grad_norm_(std::vector{pf}, 1.0);
  const double norm_d = optim::clip_grad_norm_(std::vector{pd}, 1.0);
  CHECK(norm_f == doctest::Approx(norm_d).epsilon(1e-6));
  check_close(pf.grad(), pd.grad());
  optim::clip_grad_value_(std::vector{pf}, 0.1);
  CHECK(double(amax(abs(pf.grad())).item()) <= 0.1 + 1e-7);
}

TEST_CASE("separate compilation: an MLP trained on a DataLoader over a TensorDataset learns") {
  manual_seed(0);
  const Tensor<float> x = randn<float>({256, 8});
  const Tensor<int64_t> y = argmax(x.slice(1, 0, 3), 1);  // learnable: the largest of the first three features
  data::DataLoader loader(data::TensorDataset(x, y), {.batch_size = 32, .shuffle = true});
  nn::Sequential net(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 3));
  optim::Adam opt(net->parameters(), optim::AdamOptions(1e-2));
  optim::StepLR schedule(opt, 10, 0.5);
  auto epoch_loss = [&] {
    double total = 0;
    for (const auto& batch : loader) {
      opt.zero_grad();
      const Tensor<float> loss = F::cross_entropy(net(batch.data), batch.target);
      loss.backward();
      opt.step();
      total += double(loss.item());
    }
    schedule.step();
    return total / double(loader.size());
  };
  const double first = epoch_loss();
  double last = first;
  for (int epoch = 0; epoch < 9; ++epoch) last = epoch_loss();
  CHECK(last < 0.5 * first);
}

}  // namespace test_separate_compilation
