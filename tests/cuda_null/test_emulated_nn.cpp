// Pooling and normalization of CUDA tensors (cuda/pool.hpp; nn/normalization.hpp's device path): the same layers
// run on the CPU and on the device, values, gradients and batch norm's running statistics compared; then the
// Fashion-MNIST CNN's layers after its convolutions, the recurrent modules, the activations, padding, resizing and
// nn::init. On the emulated device in CI, on a GPU by tests/gpu/run.sh.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"

#include "compare.hpp"
#include "cudnn_record.hpp"

namespace test_cuda_emulated_nn {

using namespace kiln;
using kiln::test::expect_close;

namespace {

auto no_device() { return doctest::skip(!cuda::is_available()); }

const Device kCuda0(kCUDA, 0);

// f(x) on the CPU and on cuda:0, x requiring grad: the outputs agree, and so do the gradients of x for the loss
// sum(f(x) * r), r random (so every output's gradient differs and a misrouted one shows).
void expect_same(const Tensor<float>& x, const std::function<Tensor<float>(const Tensor<float>&)>& f, double tol,
                 const std::string& what) {
  const Tensor<float> xc = x.clone().requires_grad_(), xd = x.clone().to(kCuda0).requires_grad_();
  const Tensor<float> yc = f(xc), yd = f(xd);
  REQUIRE(yd.is_cuda());
  REQUIRE(yd.shape() == yc.shape());
  expect_close(yd.detach().cpu(), yc.detach(), tol, what + ": the output");
  Generator g(99);
  const Tensor<float> r = randn<float>(yc.shape(), &g);
  sum(yc * r).backward();
  sum(yd * r.to(kCuda0)).backward();
  REQUIRE(xd.grad().is_cuda());
  expect_close(xd.grad().cpu(), xc.grad(), tol, what + ": the input's gradient");
}

// A module built twice with the same state, one copy on the device.
template <class M>
void copy_state(M& from, M& to) {
  NoGradGuard no_grad;
  std::map<std::string, Tensor<float>> state;
  for (const auto& [name, t] : from->state_dict()) state.emplace(name, t.clone());
  to->load_state_dict(state);
  to->to(kCuda0);
}

// Every parameter's gradient and every buffer of the device's copy against the host's.
template <class M>
void expect_same_state(M& device, M& host, double tol, const std::string& what) {
  const auto dp = device->named_parameters(), hp = host->named_parameters();
  REQUIRE(dp.size() == hp.size());
  for (size_t i = 0; i < dp.size(); ++i) {
    REQUIRE(dp[i].second.grad().defined());
    CHECK(dp[i].second.grad().is_cuda());
    expect_close(dp[i].second.grad().cpu(), hp[i].second.grad(), tol, what + ": the gradient of " + dp[i].first);
  }
  const auto db = device->named_buffers(), hb = host->named_buffers();
  REQUIRE(db.size() == hb.size());
  for (size_t i = 0; i < db.size(); ++i) {
    CHECK(db[i].second.is_cuda());
    expect_close(db[i].second.cpu(), hb[i].second, tol, what + ": " + db[i].first);
  }
}

}  // namespace

TEST_CASE("max_pool2d on the device: windows, strides, padding, dilation, the argmax's gradient" * no_device()) {
  Generator g(21);
  struct Case {
    Shape x;
    std::array<int64_t, 2> kernel, stride, padding, dilation;
  };
  for (const Case& c : {Case{{2, 3, 8, 6}, {2, 2}, {2, 2}, {0, 0}, {1, 1}},  // the CPU's 2x2 fast path
                        Case{{2, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}},  // overlapping windows, padding
                        Case{{1, 3, 9, 8}, {3, 2}, {1, 2}, {1, 1}, {2, 1}},  // dilation, a rectangular window
                        Case{{2, 1, 5, 5}, {3, 3}, {1, 1}, {0, 0}, {1, 1}}}) {
    const Tensor<float> x = randn<float>(c.x, &g);
    expect_same(x, [&](const Tensor<float>& t) { return nn::functional::max_pool2d(t, c.kernel, c.stride, c.padding, c.dilation); },
                1e-6, detail::cat("max_pool2d of ", c.x, ", kernel ", c.kernel[0], "x", c.kernel[1]));
  }
  // Ties (integer values, many repeats): the first tap in row-major order wins, as on the CPU, and overlapping
  // windows may pick the same element, whose gradient sums theirs.
  const Tensor<float> ties = floor(randn<float>({2, 2, 7, 7}, &g) * 0.7f);
  for (const int64_t k : {2, 3})
    expect_same(ties, [&](const Tensor<float>& t) { return nn::functional::max_pool2d(t, {k, k}, {1, 1}, {1, 1}); },
                0, detail::cat("max_pool2d of ties, kernel ", k));
}

TEST_CASE("max_pool2d on the device: NaN wins its window and keeps it, -inf is a value" * no_device()) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor<float> x = tensor<float>({1, nan, 3, 2, -inf, -inf, -inf, -inf, 5, 4, nan, 9, 0, 0, 0, 0}).reshape({1, 1, 4, 4});
  for (const int64_t k : {2, 3}) {
    const Tensor<float> xc = x.clone().requires_grad_(), xd = x.clone().to(kCuda0).requires_grad_();
    const Tensor<float> yc = nn::functional::max_pool2d(xc, {k, k}, {1, 1}), yd = nn::functional::max_pool2d(xd, {k, k}, {1, 1});
    const std::vector<float> want = yc.detach().to_vector(), got = yd.detach().cpu().to_vector();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("kernel ", k, ", output ", i, ": ", got[i], ", the CPU gives ", want[i]);
      CHECK((std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]));
    }
    // Which element each window picked: the gradient of the sum counts the windows that chose each.
    sum(yc).backward();
    sum(yd).backward();
    expect_close(xd.grad().cpu(), xc.grad(), 0, detail::cat("the argmax counts, kernel ", k));
  }
}

TEST_CASE("avg_pool2d and adaptive_avg_pool2d on the device: divisors with and without the padding" * no_device()) {
  Generator g(22);
  const Tensor<float> x = randn<float>({2, 3, 7, 9}, &g);
  expect_same(x, [](const Tensor<float>& t) { return nn::functional::avg_pool2d(t, {2, 2}); }, 1e-6, "avg_pool2d 2x2");
  for (const bool count_pad : {true, false})
    expect_same(x, [&](const Tensor<float>& t) { return nn::functional::avg_pool2d(t, {3, 2}, {2, 1}, {1, 1}, count_pad); },
                1e-6, detail::cat("avg_pool2d 3x2, padding 1, count_include_pad ", count_pad));
  for (const std::array<int64_t, 2> size : {std::array<int64_t, 2>{3, 4}, {1, 1}, {7, 9}, {5, 2}})
    expect_same(x, [&](const Tensor<float>& t) { return nn::functional::adaptive_avg_pool2d(t, size); }, 1e-6,
                detail::cat("adaptive_avg_pool2d to ", size[0], "x", size[1]));
  nn::AvgPool2d pool(3, 2, 1);
  expect_same(x, [&](const Tensor<float>& t) { return pool(t); }, 1e-6, "AvgPool2d(3, 2, 1)");
}

TEST_CASE("BatchNorm2d on the device, through cuDNN and as reductions and expressions: training (batch statistics, "
          "running statistics) and evaluation" * no_device()) {
  const bool recorded = test::emulated_cudnn();
  for (const bool with_cudnn : {true, false}) {
    test::CudnnScope scope(with_cudnn);
    const std::string path = with_cudnn ? " (cuDNN)" : " (reductions and expressions)";
    Generator g(23);
    nn::BatchNorm2d host(3), device(3);
    {
      NoGradGuard no_grad;
      host->weight.copy_(randn<float>({3}, &g));
      host->bias.copy_(randn<float>({3}, &g));
    }
    copy_state(host, device);
    const auto step = [&](const Tensor<float>& x, const std::string& what) {
      for (auto* m : {&host, &device}) (*m)->zero_grad();
      const long calls = recorded ? test::cudnn_calls() : 0;
      expect_same(x, [&](const Tensor<float>& t) { return t.is_cuda() ? device(t) : host(t); }, 1e-5, what + path);
      expect_same_state(device, host, 1e-5, what + path);
      // Training: the forward and the backward through cuDNN; evaluation is one expression either way.
      if (recorded) CHECK_MESSAGE(test::cudnn_calls() - calls == (with_cudnn && device->is_training() ? 2 : 0), (what + path));
    };
    // Two training steps (the running statistics move twice, num_batches_tracked counts them), then evaluation.
    step(randn<float>({4, 3, 5, 6}, &g) * 2.0f + 1.0f, "training, step 1");
    step(randn<float>({4, 3, 5, 6}, &g) - 0.5f, "training, step 2");
    CHECK(device->num_batches_tracked.item() == 2.0f);
    host->eval();
    device->eval();
    step(randn<float>({2, 3, 4, 4}, &g), "evaluation");
    CHECK_THROWS_WITH_AS(host(randn<float>({2, 3, 4, 4}, &g).to(kCuda0)),
                         "batch_norm: running_mean is on cpu, the input of shape [2, 3, 4, 4] on cuda:0; move them to "
                         "one device first (Module::to)",
                         std::invalid_argument);
  }
}

TEST_CASE("batch_norm of double CUDA tensors through cuDNN: the output, the running statistics, every gradient" *
          no_device()) {
  Generator g(26);
  const Tensor<double> x = randn<double>({6, 3, 4, 2}, &g) * 3.0 + 1.0, r = randn<double>({6, 3, 4, 2}, &g);
  const Tensor<double> w = randn<double>({3}, &g), b = randn<double>({3}, &g);
  std::vector<Tensor<double>> grads[2], stats[2], outputs;
  for (const Device d : {Device(kCPU), kCuda0}) {
    const Tensor<double> xi = x.clone().to(d).requires_grad_(), wi = w.clone().to(d).requires_grad_(),
                         bi = b.clone().to(d).requires_grad_();
    Tensor<double> mean = zeros<double>({3}, d), var = ones<double>({3}, d);
    const Tensor<double> y = nn::functional::batch_norm(xi, mean, var, wi, bi, true, 0.3, 1e-3);
    sum(y * r.to(d)).backward();
    const int i = d.is_cuda();
    outputs.push_back(y.detach().cpu());
    grads[i] = {xi.grad().cpu(), wi.grad().cpu(), bi.grad().cpu()};
    stats[i] = {mean.cpu(), var.cpu()};
  }
  expect_close(outputs[1], outputs[0], 1e-12, "batch_norm's output");
  for (int k = 0; k < 3; ++k) expect_close(grads[1][k], grads[0][k], 1e-12, detail::cat("batch_norm's gradient ", k));
  for (int k = 0; k < 2; ++k) expect_close(stats[1][k], stats[0][k], 1e-12, detail::cat("batch_norm's running statistic ", k));
}

TEST_CASE("batch_norm, layer_norm and group_norm on the device, functional" * no_device()) {
  Generator g(24);
  const Tensor<float> x = randn<float>({5, 4, 3}, &g), w = randn<float>({4}, &g), b = randn<float>({4}, &g);
  // Training without running statistics, [N, C, L] and [N, C]; the weight and bias's gradients too.
  for (const Shape& shape : {Shape{5, 4, 3}, Shape{6, 4}}) {
    const Tensor<float> input = randn<float>(shape, &g);
    const Tensor<float> wc = w.clone().requires_grad_(), wd = w.clone().to(kCuda0).requires_grad_();
    const Tensor<float> bc = b.clone().requires_grad_(), bd = b.clone().to(kCuda0).requires_grad_();
    expect_same(input, [&](const Tensor<float>& t) {
      return t.is_cuda() ? nn::functional::batch_norm(t, {}, {}, wd, bd, true) : nn::functional::batch_norm(t, {}, {}, wc, bc, true);
    }, 1e-5, detail::cat("batch_norm of ", shape));
    expect_close(wd.grad().cpu(), wc.grad(), 1e-5, "batch_norm: the weight's gradient");
    expect_close(bd.grad().cpu(), bc.grad(), 1e-5, "batch_norm: the bias's gradient");
  }
  const Tensor<float> wrong = randn<float>({3}, &g).to(kCuda0);
  CHECK_THROWS_WITH_AS(nn::functional::batch_norm(x.to(kCuda0), {}, {}, wrong, {}, true),
                       "batch_norm: weight and bias need 4 values, got shape [3]", ShapeError);

  expect_same(x, [&](const Tensor<float>& t) {
    return nn::functional::layer_norm(t, {4, 3}, w.reshape({4, 1}).expand({4, 3}).contiguous().to(t.device()));
  }, 1e-5, "layer_norm");
  const Tensor<float> x8 = randn<float>({3, 8, 5}, &g);
  nn::GroupNorm host(4, 8), device(4, 8);
  copy_state(host, device);
  expect_same(x8, [&](const Tensor<float>& t) { return t.is_cuda() ? device(t) : host(t); }, 1e-5, "GroupNorm(4, 8)");
  expect_same_state(device, host, 1e-5, "GroupNorm(4, 8)");
}

TEST_CASE("the Fashion-MNIST CNN's layers after a convolution train on the device as on the CPU" * no_device()) {
  // BatchNorm2d, ReLU, MaxPool2d(2), Flatten, Linear, cross_entropy (examples/fashion_mnist/model.hpp, the
  // convolutions aside): the loss, every parameter's gradient, the running statistics, over three SGD steps.
  Generator g(25);
  const auto make = [] { return nn::Sequential(nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(36, 10)); };
  nn::Sequential host = make(), device = make();
  copy_state(host, device);
  const Tensor<float> x = randn<float>({8, 4, 7, 6}, &g);
  const Tensor<int64_t> labels = argmax(randn<float>({8, 10}, &g), 1);
  for (int step = 0; step < 3; ++step) {
    const std::string what = detail::cat("step ", step);
    host->zero_grad();
    device->zero_grad();
    const Tensor<float> lc = nn::functional::cross_entropy(host(x), labels);
    const Tensor<float> ld = nn::functional::cross_entropy(device(x.to(kCuda0)), labels.to(kCuda0));
    REQUIRE(ld.is_cuda());
    expect_close(ld.detach().cpu(), lc.detach(), 1e-5, what + ": the loss");
    lc.backward();
    ld.backward();
    expect_same_state(device, host, 1e-5, what);
    NoGradGuard no_grad;
    for (auto* m : {&host, &device})
      for (Tensor<float>& p : (*m)->parameters()) p -= p.grad() * 0.1f;
  }
  host->eval();
  device->eval();
  expect_close(device(x.to(kCuda0)).detach().cpu(), host(x).detach(), 1e-5, "evaluation after training");
}

TEST_CASE("LSTM, GRU and RNN on the device: outputs, final states and every gradient as on the CPU" * no_device()) {
  Generator g(12);
  const Tensor<float> x = randn<float>({4, 3, 5}, &g);
  auto check = [&](auto host, auto device, const std::string& what) {
    copy_state(host, device);
    // The output and the last layer's final hidden state, so that both reach the loss.
    expect_same(x, [&](const Tensor<float>& in) {
      auto [out, state] = (in.is_cuda() ? device : host)(in);
      Tensor<float> h_n;
      if constexpr (std::is_same_v<decltype(host), nn::LSTM>) h_n = std::get<0>(state);
      else h_n = state;
      return Tensor<float>(cat({out.flatten(), h_n.flatten()}, 0));
    }, 1e-5, what);
    expect_same_state(device, host, 1e-5, what);
  };
  const auto lstm = nn::LSTMOptions(5, 4).num_layers(2).bidirectional(true);
  check(nn::LSTM(lstm), nn::LSTM(lstm), "LSTM, 2 layers, bidirectional");
  const auto gru = nn::GRUOptions(5, 3).batch_first(true);
  check(nn::GRU(gru), nn::GRU(gru), "GRU, batch_first");
  const auto rnn = nn::RNNOptions(5, 4).nonlinearity(nn::kReLU);
  check(nn::RNN(rnn), nn::RNN(rnn), "RNN, relu");
}

TEST_CASE("activations, pad, interpolate, normalize, the transposed and 1-d convolutions, one_hot and nn::init on "
          "the device as on the CPU" * no_device()) {
  Generator g(17);
  const Tensor<float> x = randn<float>({2, 3, 5, 6}, &g) * 4.0f;
  namespace F = nn::functional;
  const std::map<std::string, std::function<Tensor<float>(const Tensor<float>&)>> cases = {
      {"leaky_relu", [](const Tensor<float>& t) { return F::leaky_relu(t, 0.2); }},
      {"elu", [](const Tensor<float>& t) { return F::elu(t); }},
      {"hardswish", [](const Tensor<float>& t) { return F::hardswish(t); }},
      {"softplus", [](const Tensor<float>& t) { return F::softplus(t, 2.0, 3.0); }},
      {"prelu", [](const Tensor<float>& t) { return F::prelu(t, full<float>({3}, 0.3f).to(t.device())); }},
      {"pad reflect", [](const Tensor<float>& t) { return F::pad(t, {2, 1, 1, 3}, "reflect"); }},
      {"pad constant", [](const Tensor<float>& t) { return F::pad(t, {2, -1, 1, 0}, "constant", 0.5); }},
      {"bilinear", [](const Tensor<float>& t) {
         return F::interpolate(t, F::InterpolateOptions().scale_factor({1.5}).mode("bilinear"));
       }},
      {"nearest", [](const Tensor<float>& t) { return F::interpolate(t, F::InterpolateOptions().size({9, 4})); }},
      {"normalize", [](const Tensor<float>& t) { return F::normalize(t); }},
      {"conv_transpose2d", [](const Tensor<float>& t) {
         Generator w(3);
         return F::conv_transpose2d(t, randn<float>({3, 2, 3, 3}, &w).to(t.device()), {}, {2, 2}, {1, 1}, {1, 1});
       }},
      {"conv1d", [](const Tensor<float>& t) {
         Generator w(4);
         return F::conv1d(t.flatten(2), randn<float>({4, 3, 5}, &w).to(t.device()), {}, 2, 1);
       }},
  };
  for (const auto& [name, f] : cases) expect_same(x, f, 1e-5, name);

  const Tensor<int64_t> labels = tensor<int64_t>({3, 0, 2});
  const Tensor<int64_t> hot = nn::functional::one_hot(labels.to(kCuda0), 5);
  CHECK(hot.is_cuda());
  CHECK(hot.cpu().to_vector() == nn::functional::one_hot(labels, 5).to_vector());

  const Tensor<float> w = empty<float>({4, 6}).to(kCuda0);
  nn::init::orthogonal_(w);
  CHECK(w.is_cuda());
  const Tensor<float> gram = matmul(w.cpu(), w.cpu().t());
  for (int i = 0; i < 4; ++i) CHECK(gram.to_vector()[size_t(i * 5)] == doctest::Approx(1).epsilon(1e-5));
  manual_seed(5);
  nn::init::kaiming_uniform_(w, 0, nn::init::kFanIn, nn::init::kReLU);
  manual_seed(5);
  CHECK(w.cpu().to_vector() ==
        nn::init::kaiming_uniform_(empty<float>({4, 6}), 0, nn::init::kFanIn, nn::init::kReLU).to_vector());
}

}  // namespace test_cuda_emulated_nn
