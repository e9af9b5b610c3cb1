// Layers forward + backward against libtorch's C++ API (Debian's libtorch-dev; meson finds it) on the same
// shapes, values and threads: the two convolutions and the first Linear of examples/fashion_mnist, the
// whole training step of its CNN (forward, cross-entropy, backward, Adam) at batch 64, and an LSTM and a GRU
// (L = 64 steps, batch 32, 128 inputs, 256 hidden; bench/torch_recurrent.py times PyTorch's on the same shapes).
// docs/performance.md has the command and the figures.
#include <benchmark/benchmark.h>

#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

#ifdef KILN_BENCH_LIBTORCH
#include <torch/torch.h>
#endif

namespace {

namespace F = kiln::nn::functional;

// conv2d shapes: {batch, in channels, size, out channels}, kernel 3, padding 1.
struct ConvShape {
  int64_t n, cin, hw, cout;
};
constexpr ConvShape kConvShapes[] = {{64, 1, 28, 64}, {64, 64, 14, 128}};

void Conv2d_Kiln(benchmark::State& state) {
  const ConvShape s = kConvShapes[state.range(0)];
  kiln::set_num_threads(int(state.range(1)));
  kiln::manual_seed(1);
  kiln::nn::Conv2d conv(kiln::nn::Conv2dOptions(s.cin, s.cout, 3).padding(1));
  kiln::Tensor<float> x = kiln::randn<float>({s.n, s.cin, s.hw, s.hw}).requires_grad_();
  const kiln::Tensor<float> g = kiln::randn<float>({s.n, s.cout, s.hw, s.hw});
  for (auto _ : state) {
    conv->zero_grad();
    x.zero_grad();
    conv(x).backward(g);
    benchmark::DoNotOptimize(conv->weight.grad().data_ptr());
  }
}

void Linear_Kiln(benchmark::State& state) {
  kiln::set_num_threads(int(state.range(0)));
  kiln::manual_seed(1);
  kiln::nn::Linear fc(6272, 512);
  kiln::Tensor<float> x = kiln::randn<float>({64, 6272}).requires_grad_();
  const kiln::Tensor<float> g = kiln::randn<float>({64, 512});
  for (auto _ : state) {
    fc->zero_grad();
    x.zero_grad();
    fc(x).backward(g);
    benchmark::DoNotOptimize(fc->weight.grad().data_ptr());
  }
}

void CnnStep_Kiln(benchmark::State& state) {
  using namespace kiln;
  set_num_threads(int(state.range(0)));
  manual_seed(1);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 64, 3).padding(1)), nn::BatchNorm2d(64), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(64, 128, 3).padding(1)), nn::BatchNorm2d(128),
                     nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(6272, 512), nn::ReLU(),
                     nn::Linear(512, 10));
  optim::Adam opt(net->parameters(), optim::AdamOptions(1e-3));
  const Tensor<float> x = randn<float>({64, 1, 28, 28});
  const Tensor<int64_t> y = randint<int64_t>(0, 10, {64});
  for (auto _ : state) {
    opt.zero_grad();
    F::cross_entropy(net(x), y).backward();
    opt.step();
  }
}

// The recurrent layers' shape: {steps, batch, inputs, hidden}.
constexpr int64_t kSteps = 64, kBatch = 32, kInputs = 128, kHidden = 256;

// Forward + backward of an LSTM (range 0 = 0) or a GRU (1) on `range 1` threads; the gradient reaches every weight.
void Recurrent_Kiln(benchmark::State& state) {
  using namespace kiln;
  set_num_threads(int(state.range(1)));
  manual_seed(1);
  const Tensor<float> x = randn<float>({kSteps, kBatch, kInputs}).requires_grad_();
  auto run = [&](auto module) {
    for (auto _ : state) {
      module->zero_grad();
      sum(std::get<0>(module(x))).backward();
      benchmark::DoNotOptimize(module->parameters()[0].grad().data_ptr());
    }
  };
  if (state.range(0) == 0) run(nn::LSTM(kInputs, kHidden));
  else run(nn::GRU(kInputs, kHidden));
}

#ifdef KILN_BENCH_LIBTORCH
void Recurrent_LibTorch(benchmark::State& state) {
  torch::set_num_threads(int(state.range(1)));
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({kSteps, kBatch, kInputs}).requires_grad_();
  auto run = [&](auto module) {
    for (auto _ : state) {
      module->zero_grad();
      std::get<0>(module->forward(x)).sum().backward();
      benchmark::DoNotOptimize(module->parameters()[0].grad().data_ptr());
    }
  };
  if (state.range(0) == 0) run(torch::nn::LSTM(kInputs, kHidden));
  else run(torch::nn::GRU(kInputs, kHidden));
}
BENCHMARK(Recurrent_LibTorch)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);

void Conv2d_LibTorch(benchmark::State& state) {
  const ConvShape s = kConvShapes[state.range(0)];
  torch::set_num_threads(int(state.range(1)));
  torch::manual_seed(1);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(s.cin, s.cout, 3).padding(1));
  const torch::Tensor x = torch::randn({s.n, s.cin, s.hw, s.hw}).requires_grad_();
  const torch::Tensor g = torch::randn({s.n, s.cout, s.hw, s.hw});
  for (auto _ : state) {
    conv->zero_grad();
    x.mutable_grad() = torch::Tensor();
    conv(x).backward(g);
    benchmark::DoNotOptimize(conv->weight.grad().data_ptr());
  }
}

void Linear_LibTorch(benchmark::State& state) {
  torch::set_num_threads(int(state.range(0)));
  torch::manual_seed(1);
  torch::nn::Linear fc(6272, 512);
  const torch::Tensor x = torch::randn({64, 6272}).requires_grad_();
  const torch::Tensor g = torch::randn({64, 512});
  for (auto _ : state) {
    fc->zero_grad();
    x.mutable_grad() = torch::Tensor();
    fc(x).backward(g);
    benchmark::DoNotOptimize(fc->weight.grad().data_ptr());
  }
}

void CnnStep_LibTorch(benchmark::State& state) {
  namespace tnn = torch::nn;
  torch::set_num_threads(int(state.range(0)));
  torch::manual_seed(1);
  tnn::Sequential net(tnn::Conv2d(tnn::Conv2dOptions(1, 64, 3).padding(1)), tnn::BatchNorm2d(64), tnn::ReLU(),
                      tnn::MaxPool2d(2), tnn::Conv2d(tnn::Conv2dOptions(64, 128, 3).padding(1)),
                      tnn::BatchNorm2d(128), tnn::ReLU(), tnn::MaxPool2d(2), tnn::Flatten(), tnn::Linear(6272, 512),
                      tnn::ReLU(), tnn::Linear(512, 10));
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  const torch::Tensor x = torch::randn({64, 1, 28, 28});
  const torch::Tensor y = torch::randint(0, 10, {64});
  for (auto _ : state) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    opt.step();
  }
}

BENCHMARK(Conv2d_LibTorch)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(Linear_LibTorch)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(CnnStep_LibTorch)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

}  // namespace

BENCHMARK(Conv2d_Kiln)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(Linear_Kiln)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(CnnStep_Kiln)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(Recurrent_Kiln)->ArgsProduct({{0, 1}, {1, 2}})->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
