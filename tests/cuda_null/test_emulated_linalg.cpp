// kiln::linalg on CUDA tensors (linalg/common.hpp's on_cuda): every function takes CUDA operands, answers on their
// device and equals the CPU's result; gradients through solve, inv, det, slogdet, cholesky and eigh reach the device
// leaves and equal the CPU's; errors (a singular matrix, operands on two devices, a gradient svd does not have) read
// as on the CPU. In CI on the emulated device (emulated/driver.cpp), on a GPU through tests/gpu/run.sh.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "kiln/linalg.hpp"

#include "compare.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cuda_emulated_linalg {

using namespace kiln;
using kiln::test::expect_close;

namespace {

// Each case is skipped (and reported so) where there is no CUDA device, emulated or real.
auto no_device() { return doctest::skip(!cuda::is_available()); }

constexpr double kTol = 1e-12;

// A batch [2, n, n] of well-conditioned matrices (diagonally dominant) and of symmetric positive-definite ones.
Tensor<double> well_conditioned(int64_t n, Generator& g) {
  return randn<double>({2, n, n}, &g) + eye<double>(n) * double(2 * n);
}
Tensor<double> positive_definite(int64_t n, Generator& g) {
  const Tensor<double> m = randn<double>({2, n, n}, &g);
  return matmul(m, m.transpose(-1, -2)) + eye<double>(n) * double(n);
}

// got is on cuda:0 and equals want (the CPU's).
template <class T>
void expect_on_device(const Tensor<T>& got, const Tensor<T>& want, const std::string& what) {
  INFO(what);
  CHECK(got.device() == Device(kCUDA, 0));
  CHECK(got.shape() == want.shape());
  expect_close(got.cpu(), want, kTol, what);
}

}  // namespace

TEST_CASE("linalg of CUDA tensors: every function answers on the device and equals the CPU's" * no_device()) {
  Generator g(41);
  const Tensor<double> a = well_conditioned(5, g), spd = positive_definite(5, g), b = randn<double>({2, 5, 3}, &g);
  const Tensor<double> tall = randn<double>({2, 7, 4}, &g), rhs = randn<double>({2, 7, 2}, &g);
  const Tensor<double> ca = a.cuda(), cspd = spd.cuda(), cb = b.cuda(), ctall = tall.cuda(), crhs = rhs.cuda();

  expect_on_device(linalg::solve(ca, cb), linalg::solve(a, b), "solve");
  expect_on_device(linalg::solve(ca, cb.transpose(-1, -2), false), linalg::solve(a, b.transpose(-1, -2), false),
                   "solve, left = false");
  expect_on_device(linalg::solve(ca, cb.select(-1, 0)), linalg::solve(a, b.select(-1, 0)), "solve, a vector B");
  expect_on_device(linalg::inv(ca), linalg::inv(a), "inv");
  expect_on_device(linalg::inv(ca * 2.0), linalg::inv(a * 2.0), "inv of an expression of CUDA tensors");
  expect_on_device(linalg::det(ca), linalg::det(a), "det");
  const auto sl = linalg::slogdet(ca), sl_cpu = linalg::slogdet(a);
  expect_on_device(sl.sign, sl_cpu.sign, "slogdet sign");
  expect_on_device(sl.logabsdet, sl_cpu.logabsdet, "slogdet logabsdet");
  expect_on_device(linalg::cholesky(cspd), linalg::cholesky(spd), "cholesky");
  expect_on_device(linalg::cholesky(cspd, true), linalg::cholesky(spd, true), "cholesky, upper");
  const auto eh = linalg::eigh(cspd, "U"), eh_cpu = linalg::eigh(spd, "U");
  expect_on_device(eh.eigenvalues, eh_cpu.eigenvalues, "eigh values");
  expect_on_device(eh.eigenvectors, eh_cpu.eigenvectors, "eigh vectors");
  expect_on_device(linalg::eigvalsh(cspd), linalg::eigvalsh(spd), "eigvalsh");
  const auto sv = linalg::svd(ctall, false), sv_cpu = linalg::svd(tall, false);
  expect_on_device(sv.U, sv_cpu.U, "svd U");
  expect_on_device(sv.S, sv_cpu.S, "svd S");
  expect_on_device(sv.Vh, sv_cpu.Vh, "svd Vh");
  expect_on_device(linalg::svdvals(ctall), linalg::svdvals(tall), "svdvals");
  const auto q = linalg::qr(ctall), q_cpu = linalg::qr(tall);
  expect_on_device(q.Q, q_cpu.Q, "qr Q");
  expect_on_device(q.R, q_cpu.R, "qr R");
  for (const char* driver : {"gelsy", "gelsd"}) {
    const auto ls = linalg::lstsq(ctall, crhs, std::nullopt, driver), ls_cpu = linalg::lstsq(tall, rhs, std::nullopt, driver);
    expect_on_device(ls.solution, ls_cpu.solution, std::string("lstsq solution, ") + driver);
    expect_on_device(ls.rank, ls_cpu.rank, std::string("lstsq rank, ") + driver);
    expect_on_device(ls.residuals, ls_cpu.residuals, std::string("lstsq residuals, ") + driver);
    expect_on_device(ls.singular_values, ls_cpu.singular_values, std::string("lstsq singular values, ") + driver);
  }
  for (double ord : {2.0, -2.0, 1.0})
    expect_on_device(linalg::matrix_norm(ctall, ord), linalg::matrix_norm(tall, ord), "matrix_norm " + std::to_string(ord));
  expect_on_device(linalg::matrix_norm(ctall, "nuc"), linalg::matrix_norm(tall, "nuc"), "matrix_norm nuc");
  expect_on_device(linalg::vector_norm(ctall, 3.0), linalg::vector_norm(tall, 3.0), "vector_norm");

  // float as well as double.
  const Tensor<float> af = a.to<float>();
  expect_on_device(linalg::inv(af.cuda()), linalg::inv(af), "inv of floats");
}

TEST_CASE("linalg of CUDA tensors: gradients reach the device leaves and equal the CPU's" * no_device()) {
  Generator g(42);
  const Tensor<double> a = well_conditioned(4, g), b = randn<double>({2, 4, 3}, &g);
  // Each case: a function of (A, B) to a tensor; the loss is sum(f * w) for a fixed random w.
  using F = std::function<Tensor<double>(const Tensor<double>&, const Tensor<double>&)>;
  const std::vector<std::pair<std::string, F>> cases = {
      {"solve", [](const Tensor<double>& x, const Tensor<double>& y) { return linalg::solve(x, y); }},
      {"inv", [](const Tensor<double>& x, const Tensor<double>&) { return linalg::inv(x); }},
      {"det", [](const Tensor<double>& x, const Tensor<double>&) { return linalg::det(x); }},
      {"slogdet", [](const Tensor<double>& x, const Tensor<double>&) { return linalg::slogdet(x).logabsdet; }},
      {"cholesky", [](const Tensor<double>& x, const Tensor<double>&) {
         return linalg::cholesky(matmul(x, x.transpose(-1, -2)) + eye<double>(4).to(x.device()));
       }},
      {"eigh", [](const Tensor<double>& x, const Tensor<double>&) {
         const auto e = linalg::eigh(x + x.transpose(-1, -2));
         return e.eigenvalues.unsqueeze(-1) * abs(e.eigenvectors);  // |vectors|: sign-invariant
       }},
  };
  for (const auto& [name, f] : cases) {
    INFO(name);
    const Tensor<double> a_leaf = a.clone().requires_grad_();
    const Tensor<double> b_leaf = b.clone().requires_grad_();
    const Tensor<double> out = f(a_leaf, b_leaf);
    const Tensor<double> w = randn<double>(out.shape(), &g);
    sum(out * w).backward();

    const Tensor<double> ca = a_leaf.detach().cuda().requires_grad_(), cb = b_leaf.detach().cuda().requires_grad_();
    const Tensor<double> cout = f(ca, cb);
    CHECK(cout.is_cuda());
    sum(cout * w.cuda()).backward();
    REQUIRE(ca.grad().defined());
    expect_on_device(ca.grad(), a_leaf.grad(), name + ": gradient of A");
    if (name == "solve") expect_on_device(cb.grad(), b_leaf.grad(), name + ": gradient of B");
  }
}

TEST_CASE("linalg of CUDA tensors: errors read as on the CPU, operands on two devices are refused" * no_device()) {
  Generator g(43);
  Tensor<double> singular = randn<double>({3, 3, 3}, &g);
  singular.select(0, 1).select(1, 2).fill_(0.0);  // batch element 1 has a zero column
  CHECK_THROWS_WITH_AS((void)linalg::solve(singular.cuda(), randn<double>({3, 3, 1}, &g).cuda()),
                       doctest::Contains("(Batch element 1): the solver failed because the input matrix is singular"),
                       linalg::LinAlgError);
  CHECK_THROWS_WITH_AS((void)linalg::cholesky(Tensor<double>(-eye<double>(3)).cuda()), doctest::Contains("not positive-definite"),
                       linalg::LinAlgError);
  const Tensor<double> a = randn<double>({3, 3}, &g), b = randn<double>({3, 2}, &g);
  CHECK_THROWS_WITH_AS((void)linalg::solve(a.cuda(), b),
                       "linalg.solve: A of shape [3, 3] is on cuda:0 but B of shape [3, 2] is on cpu; move them to one "
                       "device first (.to(device))",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)linalg::lstsq(a, b.cuda()), doctest::Contains("linalg.lstsq: A of shape [3, 3] is on cpu"),
                       std::invalid_argument);
  const Tensor<double> leaf = a.cuda().requires_grad_();
  CHECK_THROWS_WITH_AS((void)linalg::svd(leaf), doctest::Contains("linalg.svd: kiln has no gradient for this function"),
                       std::logic_error);
  CHECK_THROWS_WITH_AS((void)linalg::det(randn<double>({2, 3}, &g).cuda()), doctest::Contains("must be batches of square"),
                       ShapeError);
}

}  // namespace test_cuda_emulated_linalg
