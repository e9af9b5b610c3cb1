// kiln::linalg cholesky, qr, eigh and svd against Eigen-independent references: closed forms, and the
// defining properties checked with hand-written products (L L^T = A with L lower, Q^T Q = I with R upper,
// A V = V diag(L) with V orthonormal and L ascending, U diag(S) Vh = A); cholesky's gradient by gradcheck.
#include <doctest/doctest.h>

#include "linalg_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_linalg_factorizations {

using namespace kiln;
using namespace kiln::test::la;
using kiln::test::values_of;

namespace {

bool lower_triangular(const Mat& m) {
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = i + 1; j < m.cols; ++j)
      if (m(i, j) != 0) return false;
  return true;
}

Mat diag_times(const Mat& u, const std::vector<double>& s, const Mat& vh) {
  Mat us = u;
  for (int64_t i = 0; i < u.rows; ++i)
    for (int64_t j = 0; j < u.cols; ++j) us(i, j) *= j < int64_t(s.size()) ? s[size_t(j)] : 0.0;
  return mul(us, vh);
}

}  // namespace

TEST_CASE("linalg::cholesky: 2x2 closed form, L L^T = A over a batch, upper, only one triangle read") {
  const Tensor<double> a = tensor_of({2, 2}, {4, 2, 2, 3});  // L = [[2, 0], [1, sqrt(2)]]
  CHECK(max_diff(matrix(linalg::cholesky(a)), Mat{2, 2, {2, 0, 1, std::sqrt(2.0)}}) < 1e-15);
  CHECK(max_diff(matrix(linalg::cholesky(a, true)), Mat{2, 2, {2, 1, 0, std::sqrt(2.0)}}) < 1e-15);

  const Tensor<double> A = spd({2, 3, 5, 5}, 20);
  const Tensor<double> L = linalg::cholesky(A);
  REQUIRE(L.shape() == A.shape());
  for (int64_t i = 0; i < 6; ++i) {
    const Mat l = matrix(L, i);
    CHECK(lower_triangular(l));
    for (int64_t k = 0; k < 5; ++k) CHECK(l(k, k) > 0);
    CHECK(max_diff(mul(l, transpose(l)), matrix(A, i)) < 1e-12);
    const Mat u = matrix(linalg::cholesky(A, true), i);
    CHECK(lower_triangular(transpose(u)));
    CHECK(max_diff(mul(transpose(u), u), matrix(A, i)) < 1e-12);
  }
  // Garbage in the strict upper triangle is never read (and in the lower one, for upper).
  Tensor<double> messy = A.clone();
  Tensor<double> messy_u = A.clone();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = i + 1; j < 5; ++j) {
      messy.select(-2, i).select(-1, j).fill_(1e6);
      messy_u.select(-2, j).select(-1, i).fill_(-1e6);
    }
  CHECK(max_diff(matrix(linalg::cholesky(messy), 5), matrix(L, 5)) == 0.0);
  CHECK(max_diff(matrix(linalg::cholesky(messy_u, true), 5), transpose(matrix(L, 5))) < 1e-12);

  const Tensor<float> Af = spd<float>({8, 8}, 21);
  const Mat lf = matrix(linalg::cholesky(Af));
  CHECK(max_diff(mul(lf, transpose(lf)), matrix(Af)) < 1e-4);
}

TEST_CASE("linalg::cholesky: not positive-definite names the batch element and the leading minor") {
  const Tensor<double> batch = stack({eye<double>(3), tensor_of({3, 3}, {1, 0, 0, 0, 1, 2, 0, 2, 1})});
  CHECK_THROWS_WITH_AS(linalg::cholesky(batch),
                       "linalg.cholesky: (Batch element 1): the factorization could not be completed because the input "
                       "is not positive-definite (the leading minor of order 3 is not positive-definite)",
                       linalg::LinAlgError);
  CHECK_THROWS_WITH_AS(linalg::cholesky(tensor_of({2, 2}, {-1, 0, 0, 1})), doctest::Contains("leading minor of order 1"),
                       linalg::LinAlgError);
  CHECK_THROWS_AS(linalg::cholesky(zeros<double>({2, 3})), ShapeError);
}

TEST_CASE("linalg::cholesky's gradient agrees with finite differences (lower and upper, batched)") {
  using In = std::vector<Tensor<double>>;
  // A symmetric input X X^T + 3I, so that perturbing either triangle moves the same matrix.
  const auto sym = [](const Tensor<double>& x) { return Tensor<double>(matmul(x, x.transpose(-1, -2)) + eye<double>(3) * 3.0); };
  const Tensor<double> X = test::normal_tensor<double>({2, 3, 3}, 22);
  CHECK(autograd::gradcheck([&](const In& in) { return linalg::cholesky(sym(in[0])); }, {X}).message == "");
  CHECK(autograd::gradcheck([&](const In& in) { return linalg::cholesky(sym(in[0]), true); }, {X}).message == "");
}

TEST_CASE("linalg::qr: Q^T Q = I, R upper, Q R = A for tall, wide, complete and r modes") {
  const Tensor<double> A = test::normal_tensor<double>({2, 6, 4}, 23);
  const auto [Q, R] = linalg::qr(A);
  REQUIRE(Q.shape() == Shape{2, 6, 4});
  REQUIRE(R.shape() == Shape{2, 4, 4});
  for (int64_t i = 0; i < 2; ++i) {
    const Mat q = matrix(Q, i), r = matrix(R, i);
    CHECK(max_diff(mul(transpose(q), q), identity(4)) < 1e-14);
    CHECK(lower_triangular(transpose(r)));
    CHECK(max_diff(mul(q, r), matrix(A, i)) < 1e-13);
  }
  const auto complete = linalg::qr(A, "complete");
  REQUIRE(complete.Q.shape() == Shape{2, 6, 6});
  REQUIRE(complete.R.shape() == Shape{2, 6, 4});
  const Mat qc = matrix(complete.Q, 1);
  CHECK(max_diff(mul(qc, transpose(qc)), identity(6)) < 1e-14);
  CHECK(max_diff(mul(qc, matrix(complete.R, 1)), matrix(A, 1)) < 1e-13);
  CHECK(linalg::qr(A, "r").Q.numel() == 0);
  CHECK(max_diff(matrix(linalg::qr(A, "r").R, 1), matrix(R, 1)) == 0.0);
  const Tensor<float> wide = test::normal_tensor<float>({3, 5}, 24);
  const auto [qw, rw] = linalg::qr(wide);
  REQUIRE(rw.shape() == Shape{3, 5});
  CHECK(max_diff(mul(matrix(qw), matrix(rw)), matrix(wide)) < 1e-5);
  CHECK_THROWS_WITH_AS(linalg::qr(A, "full"), doctest::Contains("linalg.qr: mode must be"), std::invalid_argument);
}

TEST_CASE("linalg::eigh: 2x2 closed form, ascending eigenvalues, A V = V diag(L), UPLO") {
  const auto [l2, v2] = linalg::eigh(tensor_of({2, 2}, {2, 1, 1, 2}));  // eigenvalues 1 and 3
  CHECK(values_of(l2)[0] == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(values_of(l2)[1] == doctest::Approx(3.0).epsilon(1e-14));
  CHECK(std::abs(matrix(v2)(0, 1)) == doctest::Approx(std::sqrt(0.5)));

  const Tensor<double> X = test::normal_tensor<double>({3, 6, 6}, 25);
  const Tensor<double> A = X + X.transpose(-1, -2);
  const auto [L, V] = linalg::eigh(A);
  REQUIRE(L.shape() == Shape{3, 6});
  for (int64_t b = 0; b < 3; ++b) {
    const Mat v = matrix(V, b), a = matrix(A, b);
    const std::vector<double> all = values_of(L), l(all.begin() + b * 6, all.begin() + (b + 1) * 6);
    CHECK(std::is_sorted(l.begin(), l.end()));
    CHECK(max_diff(mul(transpose(v), v), identity(6)) < 1e-13);
    CHECK(max_diff(mul(a, v), diag_times(v, l, identity(6))) < 1e-12);
    double trace = 0, sum = 0;
    for (int64_t i = 0; i < 6; ++i) trace += a(i, i), sum += l[size_t(i)];
    CHECK(sum == doctest::Approx(trace).epsilon(1e-12));
  }
  // UPLO "U" reads the upper triangle: a matrix whose lower triangle is garbage gives the same values.
  Tensor<double> upper_only = A.clone();
  for (int64_t i = 1; i < 6; ++i) upper_only.select(-2, i).slice(-1, 0, i).fill_(7.0);
  CHECK(max_diff(matrix(linalg::eigvalsh(upper_only, "U").unsqueeze(-1), 2), matrix(L.unsqueeze(-1), 2)) < 1e-12);
  CHECK(max_diff(matrix(linalg::eigvalsh(A).unsqueeze(-1), 1), matrix(L.unsqueeze(-1), 1)) < 1e-12);
  CHECK_THROWS_AS(linalg::eigh(zeros<double>({2, 3})), ShapeError);
}

TEST_CASE("linalg::eigh's gradient: the trace's is I; eigenvalues and sign-invariant V * V by gradcheck") {
  Tensor<double> a = spd({4, 4}, 28);
  a.requires_grad_();
  sum(linalg::eigvalsh(a)).backward();  // the sum of the eigenvalues is the trace
  CHECK(max_diff(matrix(a.grad()), identity(4)) < 1e-12);
  using In = std::vector<Tensor<double>>;
  const auto sym = [](const Tensor<double>& x) { return Tensor<double>(x + x.transpose(-1, -2)); };
  const Tensor<double> X = test::normal_tensor<double>({2, 4, 4}, 29);
  CHECK(autograd::gradcheck([&](const In& in) { return linalg::eigh(sym(in[0])).eigenvalues; }, {X}).message == "");
  CHECK(autograd::gradcheck([&](const In& in) { return linalg::eigvalsh(sym(in[0]), "U"); }, {X}).message == "");
  CHECK(autograd::gradcheck([&](const In& in) {
          const Tensor<double> v = linalg::eigh(sym(in[0])).eigenvectors;
          return Tensor<double>(v * v);
        }, {X}).message == "");
}

TEST_CASE("linalg::svd: U diag(S) Vh = A, orthonormal factors, descending S, full and thin, svdvals") {
  const auto diag = linalg::svd(tensor_of({2, 2}, {3, 0, 0, -2}));
  CHECK(values_of(diag.S) == std::vector<double>{3, 2});

  const Tensor<double> A = test::normal_tensor<double>({2, 4, 7}, 26);
  const auto [U, S, Vh] = linalg::svd(A);
  REQUIRE(U.shape() == Shape{2, 4, 4});
  REQUIRE(S.shape() == Shape{2, 4});
  REQUIRE(Vh.shape() == Shape{2, 7, 7});
  for (int64_t b = 0; b < 2; ++b) {
    const Mat u = matrix(U, b), vh = matrix(Vh, b), a = matrix(A, b);
    const std::vector<double> all = values_of(S), s(all.begin() + b * 4, all.begin() + (b + 1) * 4);
    CHECK(std::is_sorted(s.rbegin(), s.rend()));
    CHECK(s.back() >= 0);
    CHECK(max_diff(mul(transpose(u), u), identity(4)) < 1e-13);
    CHECK(max_diff(mul(vh, transpose(vh)), identity(7)) < 1e-13);
    CHECK(max_diff(diag_times(u, s, vh), a) < 1e-13);
    double fro = 0, s2 = 0;
    for (double x : a.v) fro += x * x;
    for (double x : s) s2 += x * x;
    CHECK(s2 == doctest::Approx(fro).epsilon(1e-12));
  }
  const auto thin = linalg::svd(A.transpose(-1, -2), false);  // [2, 7, 4]
  REQUIRE(thin.U.shape() == Shape{2, 7, 4});
  REQUIRE(thin.Vh.shape() == Shape{2, 4, 4});
  const std::vector<double> thin_s = values_of(thin.S);
  CHECK(max_diff(diag_times(matrix(thin.U, 1), std::vector<double>(thin_s.begin() + 4, thin_s.end()), matrix(thin.Vh, 1)),
                 transpose(matrix(A, 1))) < 1e-13);
  CHECK(max_diff(matrix(linalg::svdvals(A).unsqueeze(-1), 1), matrix(S.unsqueeze(-1), 1)) < 1e-13);
  const Tensor<double> nan = tensor_of({2, 2}, {1, NAN, 0, 1});
  CHECK_THROWS_WITH_AS(linalg::svd(nan), doctest::Contains("non-finite"), linalg::LinAlgError);
}

TEST_CASE("decompositions without a gradient refuse inputs that require one") {
  Tensor<double> a = eye<double>(3);
  a.requires_grad_();
  CHECK_THROWS_WITH_AS(linalg::qr(a), doctest::Contains("linalg.qr: kiln has no gradient"), std::logic_error);
  CHECK_THROWS_AS(linalg::svd(a), std::logic_error);
  NoGradGuard no_grad;
  CHECK(linalg::svdvals(a).shape() == Shape{3});
}

}  // namespace test_linalg_factorizations
