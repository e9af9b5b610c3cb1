/* Attention on the CPU: flex_attention against kiln's own materialized softmax(q k^T / sqrt(D)) v (the whole
L x L score matrix stored, the masked entries set to -inf) in the same binary and run; PyTorch's
F.scaled_dot_product_attention is timed right after by bench/torch_attention.py (pip's torch, same shapes
and threads). B = 4, H = 8, D = 64, L = 1024 and 4096, dense and causal, forward and forward + backward; and
with dropout 0.1 on the probabilities at L = 1024 (FlexDropout: fused; MaterializedDropout: on the stored ones).

Build:
  g++ -std=c++20 -O3 -march=native -DHWY_COMPILE_ONLY_STATIC=1 -fopenmp -DNDEBUG -Iinclude -I/usr/include/eigen3 \
      bench/bench_attention.cpp -o bench_attention -lbenchmark -lpthread -lhwy
Run (docs/performance.md has the figures):
  setsid bash -c 'echo -19 > /proc/$$/autogroup; exec nice -n -19 ./bench_attention --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true'
Arguments: L, causal (0/1), backward (0/1), threads. The counter GFLOP/s counts the useful work: 4 B H L^2 D
for the forward (half of it when causal), 2.5 times that more for the backward (FlashAttention's convention).
The materialized path computes the masked half too; its GFLOP/s uses the same useful count.
./bench_attention --workspace runs only the memory check: B = 1, H = 8, D = 64, L = 16384, causal, forward and
backward, printing the peak resident memory beyond the inputs, outputs and gradients (an L x L float score
matrix would be 1 GiB per head). */
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "kiln/attention.hpp"
#include "kiln/kiln.hpp"

namespace {

namespace at = kiln::attention;
constexpr int64_t kB = 4, kH = 8, kD = 64;

struct Inputs {
  kiln::Tensor<float> q, k, v, grad;
};
Inputs make_inputs(int64_t L, bool requires_grad) {
  kiln::Generator g(1);
  Inputs in{kiln::randn<float>({kB, kH, L, kD}, &g), kiln::randn<float>({kB, kH, L, kD}, &g),
            kiln::randn<float>({kB, kH, L, kD}, &g), kiln::randn<float>({kB, kH, L, kD}, &g)};
  if (requires_grad) {
    in.q.requires_grad_();
    in.k.requires_grad_();
    in.v.requires_grad_();
  }
  return in;
}

void count(benchmark::State& state, int64_t L, bool causal, bool backward) {
  const double forward = 4.0 * kB * kH * double(L) * double(L) * kD * (causal ? 0.5 : 1.0);
  state.counters["GFLOP/s"] = benchmark::Counter(forward * (backward ? 3.5 : 1.0) * 1e-9 * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

template <class Attention>
void run(benchmark::State& state, Attention attention) {
  const int64_t L = state.range(0);
  const bool causal = state.range(1) != 0, backward = state.range(2) != 0;
  kiln::set_num_threads(int(state.range(3)));
  Inputs in = make_inputs(L, backward);
  for (auto _ : state) {
    kiln::Tensor<float> out = attention(in, L, causal);
    if (backward) {
      out.backward(in.grad);
      in.q.zero_grad();
      in.k.zero_grad();
      in.v.zero_grad();
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
  count(state, L, causal, backward);
}

// The block mask is made once, outside the timing, as it is meant to be used (and as PyTorch's flex_attention).
void flex(benchmark::State& state, double dropout_p) {
  const auto mask = at::create_block_mask(at::causal(), 1, 1, state.range(0), state.range(0));
  const at::FlexOptions options{.dropout_p = dropout_p};
  run(state, [&](const Inputs& in, int64_t, bool causal) {
    if (causal) return at::flex_attention(in.q, in.k, in.v, at::NoScoreMod{}, mask, options);
    return at::flex_attention(in.q, in.k, in.v, at::NoScoreMod{}, options);
  });
}

void materialized(benchmark::State& state, double dropout_p) {
  run(state, [&](const Inputs& in, int64_t, bool causal) {
    return at::materialized_attention(in.q, in.k, in.v, kiln::Tensor<bool>(), dropout_p, causal).output;
  });
}

void Flex(benchmark::State& state) { flex(state, 0.0); }
void Materialized(benchmark::State& state) { materialized(state, 0.0); }
// Dropout 0.1 on the probabilities: fused into flex_attention's kernels, against dropout on the stored ones.
void FlexDropout(benchmark::State& state) { flex(state, 0.1); }
void MaterializedDropout(benchmark::State& state) { materialized(state, 0.1); }

void args(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> lengths) {
  for (int64_t L : lengths)
    for (int64_t causal : {0, 1})
      for (int64_t backward : {0, 1}) b->Args({L, causal, backward, 2});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(2);
}
void all_lengths(benchmark::internal::Benchmark* b) { args(b, {1024, 4096}); }
void short_length(benchmark::internal::Benchmark* b) { args(b, {1024}); }
BENCHMARK(Flex)->Apply(all_lengths);
BENCHMARK(Materialized)->Apply(all_lengths);
BENCHMARK(FlexDropout)->Apply(short_length);
BENCHMARK(MaterializedDropout)->Apply(short_length);

double peak_mib() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return double(r.ru_maxrss) / 1024.0;
}

// Peak resident memory beyond the tensors that must exist: q, k, v, output, lse, upstream gradient, dq, dk, dv.
int workspace() {
  constexpr int64_t L = 16384;
  kiln::Generator g(1);
  kiln::Tensor<float> q = kiln::randn<float>({1, kH, L, kD}, &g), k = kiln::randn<float>({1, kH, L, kD}, &g),
                      v = kiln::randn<float>({1, kH, L, kD}, &g), grad = kiln::randn<float>({1, kH, L, kD}, &g);
  q.requires_grad_();
  k.requires_grad_();
  v.requires_grad_();
  const double tensor_mib = double(kH * L * kD * 4) / (1 << 20);  // one [1, 8, 16384, 64] float tensor
  const auto mask = at::create_block_mask(at::causal(), 1, 1, L, L);
  const double before = peak_mib();
  kiln::Tensor<float> out = at::flex_attention(q, k, v, at::NoScoreMod{}, mask);
  const double after_forward = peak_mib();
  out.backward(grad);
  const double after_backward = peak_mib();
  // The forward adds out (one tensor) and lse (L x H floats); the backward dq, dk, dv (three tensors).
  const double lse_mib = double(kH * L * 4) / (1 << 20);
  std::printf("L = %lld, B = 1, H = %lld, D = %lld, causal: one tensor %.1f MiB; peak RSS %.1f MiB before\n",
              (long long)L, (long long)kH, (long long)kD, tensor_mib, before);
  std::printf("forward workspace: %.1f MiB (peak growth %.1f minus output and lse %.1f)\n",
              after_forward - before - tensor_mib - lse_mib, after_forward - before, tensor_mib + lse_mib);
  std::printf("backward workspace: %.1f MiB (peak growth %.1f minus dq, dk, dv %.1f)\n",
              after_backward - after_forward - 3 * tensor_mib, after_backward - after_forward, 3 * tensor_mib);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--workspace") == 0) return workspace();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
