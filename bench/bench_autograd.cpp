// Forward + backward of a 10-op elementwise chain, kiln's fused design against the eager design (kiln
// materializing every op: one node per op, every intermediate saved, as PyTorch records) and, when built
// with libtorch (Debian's libtorch-dev: meson finds it; or -DKILN_BENCH_LIBTORCH), libtorch's C++ API on the
// same chain and threads. docs/performance.md has the command and the figures.
//
// Two chains of 10 ops each, then y.backward(g) with g given:
//   Math:  y = sigmoid(exp(tanh(sin(x * w) + x) * 0.5 - w) * x + 1)
//          mul, sin, add, tanh, mul by 0.5, sub, exp, mul, add 1, sigmoid (five transcendental functions)
//   Arith: y = sigmoid(relu((x * w + 0.5) * x - w * 0.25) + square(x - w))
//          mul, add 0.5, mul, mul by 0.25, sub, relu, sub, square, add, sigmoid (one transcendental)
#include <benchmark/benchmark.h>

#include "kiln/kiln.hpp"

#ifdef KILN_BENCH_LIBTORCH
#include <torch/torch.h>
#endif

namespace {

struct Inputs {
  kiln::Tensor<float> x, w, g;
  explicit Inputs(int64_t n)
      : x(kiln::rand<float>({n})), w(kiln::rand<float>({n})), g(kiln::ones<float>({n})) {
    x.requires_grad_();
    w.requires_grad_();
  }
};

Inputs& inputs(int64_t n) {
  static Inputs small(1000), large(16 << 20);
  return n == 1000 ? small : large;
}

void report(benchmark::State& state, int64_t n) {
  // Forward reads x, w and writes y; backward reads x, w, g and writes two gradients.
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 4 * 8);
}

// Peak bytes of kiln storage in use during the run above what was in use before it (inputs only).
uint64_t start_peak(Inputs& in) {
  in.x.zero_grad();
  in.w.zero_grad();
  kiln::reset_peak_memory_stats();
  return kiln::memory_stats().bytes_in_use;
}
void peak_counter(benchmark::State& state, uint64_t before) {
  state.counters["peak_MB"] = double(kiln::memory_stats().peak_bytes_in_use - before) / (1 << 20);
}

// The chains as one expression each (any Operand types: kiln tensors and expressions).
// Fused: one expression, one node.
struct Math {
  static auto chain(const auto& x, const auto& w) {
    return kiln::sigmoid(kiln::exp(kiln::tanh(kiln::sin(x * w) + x) * 0.5f - w) * x + 1.0f);
  }
};
struct Arith {
  static auto chain(const auto& x, const auto& w) {
    return kiln::sigmoid(kiln::relu((x * w + 0.5f) * x - w * 0.25f) + kiln::square(x - w));
  }
};

template <class Chain>
void Chain_Kiln(benchmark::State& state) {
  const int64_t n = state.range(0);
  kiln::set_num_threads(int(state.range(1)));
  Inputs& in = inputs(n);
  const uint64_t before = start_peak(in);
  for (auto _ : state) {
    in.x.zero_grad();
    in.w.zero_grad();
    const kiln::Tensor<float> y = Chain::chain(in.x, in.w);
    y.backward(in.g);
    benchmark::DoNotOptimize(in.x.grad().data_ptr());
  }
  peak_counter(state, before);
  report(state, n);
}

// The eager design: every op materialized, so one node per op and every intermediate kept for backward.
struct EagerMath {
  static kiln::Tensor<float> chain(const kiln::Tensor<float>& x, const kiln::Tensor<float>& w) {
    using T = kiln::Tensor<float>;
    const T a = x * w, b = kiln::sin(a), c = b + x, d = kiln::tanh(c), e = d * 0.5f, f = e - w;
    const T h = kiln::exp(f), i = h * x, j = i + 1.0f;
    return kiln::sigmoid(j);
  }
};
struct EagerArith {
  static kiln::Tensor<float> chain(const kiln::Tensor<float>& x, const kiln::Tensor<float>& w) {
    using T = kiln::Tensor<float>;
    const T a = x * w, b = a + 0.5f, c = b * x, d = w * 0.25f, e = c - d, f = kiln::relu(e);
    const T h = x - w, i = kiln::square(h), j = f + i;
    return kiln::sigmoid(j);
  }
};

#ifdef KILN_BENCH_LIBTORCH
struct TorchMath {
  static torch::Tensor chain(const torch::Tensor& x, const torch::Tensor& w) {
    return torch::sigmoid(torch::exp(torch::tanh(torch::sin(x * w) + x) * 0.5 - w) * x + 1);
  }
};
struct TorchArith {
  static torch::Tensor chain(const torch::Tensor& x, const torch::Tensor& w) {
    return torch::sigmoid(torch::relu((x * w + 0.5) * x - w * 0.25) + torch::square(x - w));
  }
};

template <class Chain>
void Chain_LibTorch(benchmark::State& state) {
  const int64_t n = state.range(0);
  torch::set_num_threads(int(state.range(1)));
  Inputs& in = inputs(n);
  // The same values, as torch tensors that own a copy.
  auto x = torch::from_blob(in.x.data_ptr(), {n}).clone().requires_grad_();
  auto w = torch::from_blob(in.w.data_ptr(), {n}).clone().requires_grad_();
  auto g = torch::ones({n});
  for (auto _ : state) {
    x.mutable_grad() = torch::Tensor();
    w.mutable_grad() = torch::Tensor();
    auto y = Chain::chain(x, w);
    y.backward(g);
    benchmark::DoNotOptimize(x.grad().data_ptr());
  }
  report(state, n);
}
#define KILN_BENCH_CHAIN(fn, Chain) \
  BENCHMARK_TEMPLATE(fn, Chain)->ArgsProduct({{1000, 16 << 20}, {1, 2}})->UseRealTime()->Unit(benchmark::kMicrosecond)
KILN_BENCH_CHAIN(Chain_LibTorch, TorchMath);
KILN_BENCH_CHAIN(Chain_LibTorch, TorchArith);
#endif

}  // namespace

#ifndef KILN_BENCH_CHAIN
#define KILN_BENCH_CHAIN(fn, Chain) \
  BENCHMARK_TEMPLATE(fn, Chain)->ArgsProduct({{1000, 16 << 20}, {1, 2}})->UseRealTime()->Unit(benchmark::kMicrosecond)
#endif
KILN_BENCH_CHAIN(Chain_Kiln, Math);
KILN_BENCH_CHAIN(Chain_Kiln, EagerMath);
KILN_BENCH_CHAIN(Chain_Kiln, Arith);
KILN_BENCH_CHAIN(Chain_Kiln, EagerArith);

BENCHMARK_MAIN();
