/* sgemm through kiln::cpu::gemm against OpenBLAS's cblas_sgemm and plain Eigen (its product on the same
row-major maps with its own OpenMP threading, what kiln's threading replaces), in the same binary and run.

Build (OpenBLAS's OpenMP variant, libopenblas-openmp-dev, so that both libraries share one OpenMP runtime):
  g++ -std=c++20 -O3 -march=x86-64-v4 -mpclmul -maes -fopenmp -DHWY_COMPILE_ONLY_STATIC=1 -DNDEBUG \
      -Iinclude -I/usr/include/eigen3 $(pkg-config --cflags openblas) bench/bench_gemm.cpp \
      -o bench_gemm -lbenchmark -lpthread $(pkg-config --libs openblas)
Run (OpenBLAS 0.3.21 takes an AMD EPYC with AVX-512 for Prescott, SSE3, without the override):
  OPENBLAS_CORETYPE=SkylakeX ./bench_gemm --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
      --benchmark_enable_random_interleaving=true
Each benchmark reports GFLOP/s (2*M*N*K per iteration, wall clock) as a counter; compare kiln with OpenBLAS
and Eigen for the same shape and thread count (random interleaving spreads all three over the same minutes,
as the machine's speed drifts). The *_linear benchmarks are a linear layer's forward, y[batch, out] =
x[batch, in] W^T with W [out, in] row-major, at small batches: kiln's narrow kernel (kiln/cpu/gemm_narrow.hpp)
against Eigen's GEMM (its matrix-vector product at batch 1) and OpenBLAS. */
#include <kiln/cpu/gemm.hpp>

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

struct Operands {
  std::vector<float> a, b, c;
  Operands(int64_t M, int64_t N, int64_t K) : a(M * K), b(K * N), c(M * N) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> d(-1, 1);
    for (auto& x : a) x = d(rng);
    for (auto& x : b) x = d(rng);
    for (auto& x : c) x = d(rng);
  }
};

void set_threads(int t) {
  omp_set_num_threads(t);       // what Eigen (and so kiln) reads, through Eigen::nbThreads()
  openblas_set_num_threads(t);  // OpenBLAS keeps its own count
}

void report(benchmark::State& state, int64_t M, int64_t N, int64_t K) {
  state.counters["GFLOPS"] =
      benchmark::Counter(2e-9 * double(M) * double(N) * double(K), benchmark::Counter::kIsIterationInvariantRate);
}

// Runs product(operands, M, N, K) with args M, N, K, threads.
template <class Product>
void run(benchmark::State& state, Product&& product) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  set_threads(int(state.range(3)));
  Operands o(M, N, K);
  for (auto _ : state) {
    product(o, M, N, K);
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  report(state, M, N, K);
}

using RowMap = Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Args: M, N, K, threads. All operands row-major and contiguous, C = A * B (alpha 1, beta 0).
void BM_kiln_sgemm(benchmark::State& state) {
  run(state, [](Operands& o, int64_t M, int64_t N, int64_t K) {
    kiln::cpu::gemm<float>(M, N, K, o.a.data(), K, 1, o.b.data(), N, 1, o.c.data(), N, 1);
  });
}

void BM_eigen_sgemm(benchmark::State& state) {
  run(state, [](Operands& o, int64_t M, int64_t N, int64_t K) {
    RowMap(o.c.data(), M, N).noalias() = RowMap(o.a.data(), M, K) * RowMap(o.b.data(), K, N);
  });
}

void BM_openblas_sgemm(benchmark::State& state) {
  run(state, [](Operands& o, int64_t M, int64_t N, int64_t K) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), int(N), int(K), 1.0f, o.a.data(), int(K),
                o.b.data(), int(N), 0.0f, o.c.data(), int(N));
  });
}

// Args: batch, out, in, threads. y = x W^T: x [batch, in] and y row-major, W [out, in] row-major.
void BM_kiln_linear(benchmark::State& state) {
  run(state, [](Operands& o, int64_t M, int64_t N, int64_t K) {
    kiln::cpu::gemm<float>(M, N, K, o.a.data(), K, 1, o.b.data(), 1, K, o.c.data(), N, 1);
  });
}

void BM_eigen_linear(benchmark::State& state) {
  run(state, [](Operands& o, int64_t M, int64_t N, int64_t K) {
    RowMap(o.c.data(), M, N).noalias() = RowMap(o.a.data(), M, K) * RowMap(o.b.data(), N, K).transpose();
  });
}

void BM_openblas_linear(benchmark::State& state) {
  run(state, [](Operands& o, int64_t M, int64_t N, int64_t K) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.0f, o.a.data(), int(K),
                o.b.data(), int(K), 0.0f, o.c.data(), int(N));
  });
}

// The Fashion-MNIST CNN's 6272 -> 512 layer and a 1024 -> 1024 one, at the batches a server gathers.
void linear_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "out", "in", "threads"});
  for (int t : {1, 2})
    for (auto [out, in] : {std::pair<int64_t, int64_t>{512, 6272}, {1024, 1024}})
      for (int64_t batch : {1, 2, 4, 8, 12, 16, 64}) b->Args({batch, out, in, t});
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "threads"});
  for (int t : {1, 2}) {
    for (int64_t n : {512, 1024, 2048}) b->Args({n, n, n, t});
    b->Args({12544, 64, 800, t});  // conv2's im2col: [pixels, 800] x [800, 64 channels]
  }
}

BENCHMARK(BM_kiln_sgemm)->Apply(shapes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_eigen_sgemm)->Apply(shapes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_openblas_sgemm)->Apply(shapes)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_kiln_linear)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_eigen_linear)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_openblas_linear)->Apply(linear_shapes)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* core = openblas_get_corename();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("openblas_core", core ? core : "?");
  benchmark::AddCustomContext("openblas_parallel", std::to_string(openblas_get_parallel()));  // 2 = OpenMP
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", env ? env : "(unset: OpenBLAS may misdetect the CPU)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
