// matmul, mm, bmm, mv and dot of CUDA tensors through cuBLAS (cuda/matmul.hpp, cuda/cublas.hpp), against the CPU's
// products. In CI on the emulated device with the emulated cuBLAS (emulated/cublas.cpp, loaded through
// KILN_CUBLAS_LIBRARY, which tests/meson.build sets beside the driver's and NVRTC's); on a GPU with the real cuBLAS
// (tests/gpu/run.sh).
#include <doctest/doctest.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/tensor/linalg.hpp"

#include "compare.hpp"
#include "device_kind.hpp"

extern char** environ;

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_emulated_matmul {

using namespace kiln;
using kiln::test::emulated_cublas;
using kiln::test::expect_close;
using kiln::test::Relative;

namespace {

// Each case is skipped (and reported so) where there is no CUDA device, emulated or real.
auto no_device() { return doctest::skip(!cuda::is_available()); }


// The emulated cuBLAS's record of its last GEMM call ("cublasSgemmStridedBatched(T, N, m=..., math=0)") and its
// count of calls; only where emulated_cublas().
std::string last_call() {
  using Fn = const char* (*)();
  return cuda::Cublas::get().symbol<Fn>("kiln_emulated_cublas_last_call")();
}
long gemm_calls() { return cuda::Cublas::get().symbol<long (*)()>("kiln_emulated_cublas_calls")(); }

// Allocations the device's caching allocator served (from the device or its cache).
int64_t allocations() {
  const auto s = cuda::DeviceContext::get(0).allocator().stats();
  return s.device_allocations + s.cache_hits;
}

template <class T>
constexpr double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : std::is_same_v<T, float> ? 1e-5 : 1e-2;
}

// got (a CUDA tensor) equals want (the CPU's product) within T's tolerance, with the same shape.
template <class T>
void expect_product(const Tensor<T>& got, const Tensor<T>& want, const std::string& what) {
  INFO(what);
  CHECK(got.is_cuda());
  CHECK(got.shape() == want.shape());
  expect_close(got.cpu(), want, tolerance<T>(), what);
}

template <class T>
void products_equal_the_cpus() {
  Generator g(11);
  const auto r = [&](Shape s) { return randn<float>(s, &g).template to<T>(); };
  const Tensor<T> a = r({37, 41}), b = r({41, 23}), v = r({41}), w = r({37});
  const Tensor<T> ca = a.cuda(), cb = b.cuda(), cv = v.cuda(), cw = w.cuda();
  expect_product(mm(ca, cb), mm(a, b), "mm");
  expect_product(matmul(ca, cb), matmul(a, b), "matmul 2-d");
  expect_product(matmul(cv, cb), matmul(v, b), "matmul 1-d x 2-d");
  expect_product(matmul(ca, cv), matmul(a, v), "matmul 2-d x 1-d");
  expect_product(matmul(cw, ca), matmul(w, a), "matmul 1-d x 2-d (a row)");
  expect_product(matmul(cv, cv), matmul(v, v), "matmul 1-d x 1-d");
  expect_product(mv(ca, cv), mv(a, v), "mv");
  expect_product(dot(cv, cv), dot(v, v), "dot");
  CHECK(dot(cv, cv).dim() == 0);
  // Batched: broadcast batch dims (stride 0 in the strided-batched call), a shared matrix folded into one tall
  // product, bmm, and batch dims that do not merge (one call per outer index).
  const Tensor<T> x = r({4, 1, 5, 6}), y = r({3, 6, 7}), z = r({3, 5, 6}), q = r({2, 3, 5, 6});
  expect_product(matmul(x.cuda(), y.cuda()), matmul(x, y), "matmul [4, 1, 5, 6] x [3, 6, 7]");
  expect_product(matmul(z.cuda(), y[0].cuda()), matmul(z, y[0]), "matmul [3, 5, 6] x [6, 7] (one tall product)");
  expect_product(matmul(y[0].t().cuda(), z.transpose(1, 2).cuda()), matmul(y[0].t(), z.transpose(1, 2)),
                 "matmul [7, 6] x [3, 6, 5]");
  expect_product(bmm(z.cuda(), y.cuda()), bmm(z, y), "bmm");
  const long before = emulated_cublas() ? gemm_calls() : 0;
  expect_product(matmul(q.cuda(), y.cuda().unsqueeze(0).expand({2, 3, 6, 7})), matmul(q, y),
                 "matmul [2, 3, 5, 6] x [3, 6, 7] expanded");
  expect_product(matmul(q.cuda(), y.cuda()), matmul(q, y), "matmul [2, 3, 5, 6] x [3, 6, 7]");
  if (emulated_cublas()) CHECK(gemm_calls() - before == 4);  // two batches of 3, each
  // An expression operand is evaluated on the device first.
  if constexpr (!is_half_v<T>) expect_product(matmul(ca * T(2), cb), matmul(Tensor<T>(a * T(2)), b), "matmul of an expression");
}

}  // namespace

TEST_CASE("cuBLAS: mm, matmul (1-d, 2-d, batched, broadcast), bmm, mv, dot of CUDA tensors equal the CPU's" * no_device()) {
  SUBCASE("float32") { products_equal_the_cpus<float>(); }
  SUBCASE("float64") { products_equal_the_cpus<double>(); }
  SUBCASE("bfloat16 (cublasGemmStridedBatchedEx, float compute)") {
    products_equal_the_cpus<bfloat16>();
    if (emulated_cublas()) CHECK(last_call().find("cublasGemmStridedBatchedEx") == 0);
  }
  SUBCASE("float16") { products_equal_the_cpus<float16>(); }
}

TEST_CASE("cuBLAS: transposed and sliced operands go without a copy, others are made contiguous on the device first" * no_device()) {
  Generator g(12);
  const Tensor<float> a = randn<float>({37, 41}, &g), b = randn<float>({41, 23}, &g);
  const Tensor<float> ca = a.cuda(), cb = b.cuda();
  const auto product = [&](const Tensor<float>& x, const Tensor<float>& y, const Tensor<float>& hx,
                           const Tensor<float>& hy, int64_t want_allocations, const char* ops, const char* what) {
    const int64_t before = allocations();
    const Tensor<float> c = matmul(x, y);
    CHECK_MESSAGE(allocations() - before == want_allocations, what);
    if (emulated_cublas()) CHECK_MESSAGE(last_call().find(ops) != std::string::npos, what, ": ", last_call());
    expect_product(c, matmul(hx, hy), what);
  };
  // cuBLAS computes c^T = b^T a^T: its first operand is b (op N for a row-major b), its second a.
  product(ca, cb, a, b, 1, "(N, N, m=23, n=37, k=41, lda=23", "contiguous");
  product(cb.t(), ca.t(), b.t(), a.t(), 1, "(T, T, m=37, n=23, k=41, lda=41", "both transposed");
  product(ca.slice(1, 3, 30), cb.slice(0, 3, 30).slice(1, 2, 20), a.slice(1, 3, 30), b.slice(0, 3, 30).slice(1, 2, 20),
          1, "(N, N, m=18, n=37, k=27, lda=23", "row and column slices: leading dims of their bases");
  product(ca.slice(0, 0, 37, 2), cb.t().t(), a.slice(0, 0, 37, 2), b, 1, "ldb=82", "every second row");
  // No unit stride (every second column), and rows that overlap (an expanded row): one copy each.
  product(ca.slice(1, 0, 41, 2), cb.slice(0, 0, 41, 2), a.slice(1, 0, 41, 2), b.slice(0, 0, 41, 2), 2,
          "(N, N, m=23, n=37, k=21, lda=46, strideA=0, ldb=21", "every second column of a (copied), row of b (not)");
  product(ca, cb[0].unsqueeze(0).expand({41, 23}), a, b[0].unsqueeze(0).expand({41, 23}), 2, "(N, N", "an expanded b");
  // Permuted batches: [4, 5, 6] of column-major matrices (strides [5, 1, 20]) goes as it is; [5, 6, 4] whose
  // matrices have no unit stride (strides [1, 20, 5]) is copied.
  const Tensor<float> p = randn<float>({6, 4, 5}, &g), q = randn<float>({4, 6, 3}, &g), s = randn<float>({5, 4, 3}, &g);
  product(p.cuda().permute({1, 2, 0}), q.cuda(), p.permute({1, 2, 0}), q, 1, "(N, T, m=3, n=5, k=6, lda=3, strideA=18, "
          "ldb=20, strideB=5", "column-major batch from a permute");
  product(p.cuda().permute({2, 0, 1}), s.cuda(), p.permute({2, 0, 1}), s, 2, "(N, N, m=3, n=6, k=4, lda=3, strideA=12, "
          "ldb=4, strideB=24", "a permute with no unit stride");
}

TEST_CASE("cuBLAS: empty sizes as the CPU's (K = 0 gives zeros)" * no_device()) {
  const auto check_empty = [](Shape sa, Shape sb) {
    const Tensor<float> a = ones<float>(sa), b = ones<float>(sb);
    const Tensor<float> c = matmul(a.cuda(), b.cuda()), want = matmul(a, b);
    CHECK(c.is_cuda());
    CHECK(c.shape() == want.shape());
    CHECK(c.cpu().to_vector() == want.to_vector());
  };
  check_empty({0, 4}, {4, 5});
  check_empty({3, 4}, {4, 0});
  check_empty({3, 0}, {0, 5});  // zeros
  check_empty({2, 3, 0}, {0, 5});
  check_empty({0, 3, 4}, {4, 5});
  CHECK(dot(zeros<float>({0}).cuda(), zeros<float>({0}).cuda()).cpu().item() == 0.0f);
}

TEST_CASE("cuBLAS: integer products and operands on two devices are refused with the reason" * no_device()) {
  const Tensor<int32_t> i = ones<int32_t>({3, 4}), j = ones<int32_t>({4, 5});
  CHECK_THROWS_WITH_AS(matmul(i.cuda(), j.cuda()),
                       doctest::Contains("matmul: int32 tensors of shapes [3, 4] and [4, 5] on cuda:0: cuBLAS has no "
                                         "integer product"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(mm(i.to<int64_t>().cuda(), j.to<int64_t>().cuda()), doctest::Contains("mm: int64 tensors"),
                       std::invalid_argument);
  const Tensor<float> a = ones<float>({3, 4}), b = ones<float>({4, 5}), v = ones<float>({4});
  CHECK_THROWS_WITH_AS(matmul(a.cuda(), b),
                       doctest::Contains("matmul: operands on cuda:0 and cpu (shapes [3, 4] and [4, 5]); move them to "
                                         "one device first"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(mm(a, b.cuda()), doctest::Contains("mm: operands on cpu and cuda:0"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(bmm(a.unsqueeze(0).cuda(), b.unsqueeze(0)), doctest::Contains("bmm: operands on cuda:0 and cpu"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(mv(a.cuda(), v), doctest::Contains("mv: operands on cuda:0 and cpu (shapes [3, 4] and [4])"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(dot(v, v.cuda()), doctest::Contains("dot: operands on cpu and cuda:0"), std::invalid_argument);
}

TEST_CASE("cuBLAS: matmul's backward on the device (a batch over a shared matrix, Linear's x w^T) equals the CPU's" * no_device()) {
  Generator g(13);
  Tensor<float> a = randn<float>({4, 5, 6}, &g), b = randn<float>({6, 7}, &g), w = randn<float>({3, 6}, &g);
  Tensor<float> ca = a.cuda(), cb = b.cuda(), cw = w.cuda();
  for (Tensor<float>* t : {&a, &b, &w, &ca, &cb, &cw}) t->requires_grad_();
  const auto loss = [](const Tensor<float>& x, const Tensor<float>& y, const Tensor<float>& z) {
    const Tensor<float> p = matmul(x, y);
    return Tensor<float>(sum(p * p) + sum(matmul(x, z.t())));
  };
  loss(a, b, w).backward();
  loss(ca, cb, cw).backward();
  for (auto [got, want, what] : {std::tuple{&ca, &a, "da"}, std::tuple{&cb, &b, "db"}, std::tuple{&cw, &w, "dw"}}) {
    CHECK(got->grad().is_cuda());
    expect_close(got->grad().cpu(), want->grad(), 1e-5, what);
  }
  NoGradGuard no_grad;
  expect_product(mm(ca[0], cb), mm(a[0], b), "mm of tensors that require grad, under NoGradGuard");
}

TEST_CASE("cuBLAS: the TF32 switch (torch.backends.cuda.matmul.allow_tf32) reaches cublasSetMathMode" * no_device()) {
  CHECK(!cuda::matmul_allows_tf32());  // off by default, as torch's
  Generator g(14);
  const Tensor<float> a = randn<float>({64, 256}, &g), b = randn<float>({256, 32}, &g);
  const Tensor<float> ca = a.cuda(), cb = b.cuda(), want = matmul(a, b);
  cuda::matmul_allow_tf32(true);
  CHECK(cuda::matmul_allows_tf32());
  const Tensor<float> tf32 = matmul(ca, cb);
  if (emulated_cublas()) CHECK(last_call().find("math=3") != std::string::npos);  // CUBLAS_TF32_TENSOR_OP_MATH
  // TF32 keeps 10 bits of each factor's mantissa: a product's error follows its terms' sizes, not its own.
  expect_close(tf32.cpu(), want, 2e-3, "TF32 product", Relative::kLargest);
  cuda::matmul_allow_tf32(false);
  const Tensor<float> full_precision = matmul(ca, cb);
  expect_product(full_precision, want, "after switching TF32 off");
  if (emulated_cublas()) CHECK(last_call().find("math=0") != std::string::npos);  // CUBLAS_DEFAULT_MATH
  else CHECK(kiln::test::values_of(tf32) != kiln::test::values_of(full_precision));  // a GPU's tensor cores did round
}

TEST_CASE("cuBLAS: its errors name the call, the arguments and the status" * no_device()) {
  const Tensor<float> c = zeros<float>({4, 4}).cuda();
  float* p = reinterpret_cast<float*>(c.impl().device_bytes());
  cuda::Cublas& blas = cuda::Cublas::get();
  // lda 2 for a 4-row matrix: cuBLAS refuses it (CUBLAS_STATUS_INVALID_VALUE).
  CHECK_THROWS_WITH_AS(blas.gemm<float>(blas.handle(0), cuda::blas::kNoTrans, cuda::blas::kNoTrans, 4, 4, 4, p, 2, 0, p,
                                        4, 0, p, 4, 0, 1),
                       doctest::Contains("kiln::cuda: cublasSgemmStridedBatched(N, N, m=4, n=4, k=4, lda=2, strideA=0, "
                                         "ldb=4, strideB=0, ldc=4, strideC=0, batch=1) failed: CUBLAS_STATUS_INVALID_VALUE (7)"),
                       cuda::CudaError);
}

TEST_CASE("profiling (KILN_PROFILE): launches and cuBLAS products add their time to a line per kernel" * no_device()) {
  cuda::KernelProfile& profile = cuda::KernelProfile::get();
  profile.clear();
  Generator g(15);
  const Tensor<float> a = randn<float>({64, 32}, &g).cuda(), b = randn<float>({32, 16}, &g).cuda();
  cuda::enable_profiling(true);
  const Tensor<float> twice = a * 2.0f + 1.0f, thrice = a * 3.0f + 1.0f;  // one kernel (the scalars are parameters)
  const Tensor<float> product = matmul(a, b);
  cuda::enable_profiling(false);
  const Tensor<float> unrecorded = a * 2.0f + 1.0f;
  const std::vector<cuda::KernelProfile::Line> lines = profile.lines();
  const std::string report = profile.report();
  profile.clear();  // (nothing left to print at exit)
  REQUIRE(lines.size() == 2);
  for (const cuda::KernelProfile::Line& line : lines) {
    INFO(line.name);
    CHECK(line.seconds > 0);
    if (line.name.rfind("cuBLAS ", 0) == 0) {
      CHECK(line.name == "cuBLAS float32 gemm 64x16x32");
      CHECK(line.calls == 1);
    } else {
      CHECK(line.name.rfind("kiln_forward #", 0) == 0);
      CHECK(line.name.size() == std::string("kiln_forward #").size() + 6);
      CHECK(line.calls == 2);
    }
  }
  CHECK(report.find("cuBLAS float32 gemm 64x16x32") != std::string::npos);
  CHECK(report.find(lines[1].name) > report.find(lines[0].name));  // the largest total first
  expect_close(product.cpu(), matmul(a.cpu(), b.cpu()), 1e-5, "the profiled product");
  expect_close(twice.cpu(), Tensor<float>(a.cpu() * 2.0f + 1.0f), 1e-6, "the profiled expression");
}

// cuBLAS is loaded once per process (and a failed load is tried again at the next use), so the missing library is
// checked in a process of its own: this test executable again, for this case alone, with KILN_CUBLAS_LIBRARY
// naming a file that does not exist.
TEST_CASE("cuBLAS: a missing library is a CudaUnavailableError naming it and where it was looked for" * no_device()) {
  const char* missing = "/nonexistent/libcublas.so.13";
  if (std::getenv("KILN_TEST_CUBLAS_CHILD")) {
    const Tensor<float> a = ones<float>({3, 4}).cuda(), b = ones<float>({4, 5}).cuda();
    const std::string want = kiln::detail::cat("kiln::cuda: cannot load cuBLAS (libcublas); tried:\n  ", missing, ": ");
    CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains(want.c_str()), cuda::CudaUnavailableError);
    CHECK_THROWS_AS(cuda::Cublas::get(), cuda::CudaUnavailableError);  // again at the next use
    return;
  }
  std::vector<std::string> env = {"KILN_TEST_CUBLAS_CHILD=1", std::string("KILN_CUBLAS_LIBRARY=") + missing};
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("KILN_CUBLAS_LIBRARY=", 0) != 0) env.emplace_back(*e);
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", filter = "--test-case=cuBLAS: a missing library*", quiet = "--minimal=true";
  argv = {self.data(), filter.data(), quiet.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "the child process (its failures are printed above)");
}

}  // namespace test_cuda_emulated_matmul
