// Fused elementwise expressions against the baselines of the foundation issue, in one binary:
// a hand-written OpenMP loop of the same expression (same threads), Eigen's array expression
// (single-threaded by design), and an unfused evaluation that materializes each intermediate.
// PyTorch eager is measured by bench/torch_elementwise.py in the same session. The random fills (uniform_,
// normal_, bernoulli_) run against a loop that only writes the same array.
// Run: build-bench/bench/bench_elementwise --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <omp.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <hwy/contrib/math/math-inl.h>

#include "kiln/kiln.hpp"

namespace {

constexpr int64_t kN = 16 << 20;
constexpr float kA = 1.5f, kB = -0.75f;

struct Inputs {
  kiln::Tensor<float> x = kiln::rand<float>({kN}), y = kiln::rand<float>({kN}), z = kiln::rand<float>({kN});
  kiln::Tensor<float> out = kiln::empty<float>({kN});
};
Inputs& inputs() {
  static Inputs in;
  return in;
}

void set_threads(benchmark::State& state) { kiln::set_num_threads(int(state.range(0))); }
void report(benchmark::State& state, int arrays) {
  state.SetBytesProcessed(int64_t(state.iterations()) * kN * 4 * arrays);
}

// ---- out = a*x + b*y + z ----------------------------------------------------------------------

void Axpby_KilnInPlace(benchmark::State& state) {
  set_threads(state);
  auto& in = inputs();
  for (auto _ : state) {
    in.out.copy_(kA * in.x + kB * in.y + in.z);
    benchmark::ClobberMemory();
  }
  report(state, 4);
}
void Axpby_KilnRebind(benchmark::State& state) {
  set_threads(state);
  auto& in = inputs();
  for (auto _ : state) {
    kiln::Tensor<float> out = kA * in.x + kB * in.y + in.z;
    benchmark::DoNotOptimize(out.data_ptr());
  }
  report(state, 4);
}
void Axpby_HandLoop(benchmark::State& state) {
  const int threads = int(state.range(0));
  auto& in = inputs();
  const float *x = in.x.data_ptr(), *y = in.y.data_ptr(), *z = in.z.data_ptr();
  float* out = in.out.data_ptr();
  for (auto _ : state) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (int64_t i = 0; i < kN; ++i) out[i] = kA * x[i] + kB * y[i] + z[i];
    benchmark::ClobberMemory();
  }
  report(state, 4);
}
void Axpby_Eigen(benchmark::State& state) {
  auto& in = inputs();
  Eigen::Map<const Eigen::ArrayXf> x(in.x.data_ptr(), kN), y(in.y.data_ptr(), kN), z(in.z.data_ptr(), kN);
  Eigen::Map<Eigen::ArrayXf> out(in.out.data_ptr(), kN);
  for (auto _ : state) {
    out = kA * x + kB * y + z;
    benchmark::ClobberMemory();
  }
  report(state, 4);
}
void Axpby_Unfused(benchmark::State& state) {
  set_threads(state);
  auto& in = inputs();
  for (auto _ : state) {
    kiln::Tensor<float> t1 = kA * in.x;
    kiln::Tensor<float> t2 = kB * in.y;
    kiln::Tensor<float> t3 = t1 + t2;
    in.out.copy_(t3 + in.z);
    benchmark::ClobberMemory();
  }
  report(state, 4);
}

// ---- out = tanh(x) * exp(-y*y) + z ------------------------------------------------------------

void TanhExp_KilnInPlace(benchmark::State& state) {
  set_threads(state);
  auto& in = inputs();
  for (auto _ : state) {
    in.out.copy_(kiln::tanh(in.x) * kiln::exp(-(in.y * in.y)) + in.z);
    benchmark::ClobberMemory();
  }
  report(state, 4);
}
void TanhExp_HandLoop(benchmark::State& state) {
  namespace hn = hwy::HWY_NAMESPACE;
  const int threads = int(state.range(0));
  auto& in = inputs();
  const float *x = in.x.data_ptr(), *y = in.y.data_ptr(), *z = in.z.data_ptr();
  float* out = in.out.data_ptr();
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < kN; i += lanes) {  // kN is a multiple of the lanes
      const auto vy = hn::LoadU(d, y + i);
      const auto r = hn::MulAdd(hn::Tanh(d, hn::LoadU(d, x + i)), hn::Exp(d, hn::Neg(hn::Mul(vy, vy))), hn::LoadU(d, z + i));
      hn::StoreU(r, d, out + i);
    }
    benchmark::ClobberMemory();
  }
  report(state, 4);
}
void TanhExp_Eigen(benchmark::State& state) {
  auto& in = inputs();
  Eigen::Map<const Eigen::ArrayXf> x(in.x.data_ptr(), kN), y(in.y.data_ptr(), kN), z(in.z.data_ptr(), kN);
  Eigen::Map<Eigen::ArrayXf> out(in.out.data_ptr(), kN);
  for (auto _ : state) {
    out = x.tanh() * (-(y * y)).exp() + z;
    benchmark::ClobberMemory();
  }
  report(state, 4);
}
void TanhExp_Unfused(benchmark::State& state) {
  set_threads(state);
  auto& in = inputs();
  for (auto _ : state) {
    kiln::Tensor<float> t1 = kiln::tanh(in.x);
    kiln::Tensor<float> t2 = in.y * in.y;
    kiln::Tensor<float> t3 = -t2;
    kiln::Tensor<float> t4 = kiln::exp(t3);
    kiln::Tensor<float> t5 = t1 * t4;
    in.out.copy_(t5 + in.z);
    benchmark::ClobberMemory();
  }
  report(state, 4);
}

// ---- random fills (Philox, core/generator.hpp) against a loop that only writes ------------------------

void Fill_HandLoop(benchmark::State& state) {
  const int threads = int(state.range(0));
  float* out = inputs().out.data_ptr();
  for (auto _ : state) {
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (int64_t i = 0; i < kN; ++i) out[i] = kA;
    benchmark::ClobberMemory();
  }
  report(state, 1);
}
template <class Fill>
void random_fill(benchmark::State& state, Fill fill) {
  set_threads(state);
  auto& in = inputs();
  for (auto _ : state) {
    fill(in.out);
    benchmark::ClobberMemory();
  }
  report(state, 1);
}
void Uniform_Kiln(benchmark::State& state) { random_fill(state, [](auto& t) { kiln::uniform_(t); }); }
void Normal_Kiln(benchmark::State& state) { random_fill(state, [](auto& t) { kiln::normal_(t); }); }
void Bernoulli_Kiln(benchmark::State& state) { random_fill(state, [](auto& t) { kiln::bernoulli_(t, 0.9); }); }

}  // namespace

#define KILN_THREADS(name) BENCHMARK(name)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()
KILN_THREADS(Axpby_KilnInPlace);
KILN_THREADS(Axpby_KilnRebind);
KILN_THREADS(Axpby_HandLoop);
KILN_THREADS(Axpby_Unfused);
BENCHMARK(Axpby_Eigen)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
KILN_THREADS(TanhExp_KilnInPlace);
KILN_THREADS(TanhExp_HandLoop);
KILN_THREADS(TanhExp_Unfused);
BENCHMARK(TanhExp_Eigen)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
KILN_THREADS(Fill_HandLoop);
KILN_THREADS(Uniform_Kiln);
KILN_THREADS(Normal_Kiln);
KILN_THREADS(Bernoulli_Kiln);

BENCHMARK_MAIN();
