// kiln::linalg lstsq (normal equations, an exact line fit, the minimum-norm solution of an underdetermined
// system by hand, rank deficiency, what each driver fills in) and the norms (closed forms, dims and keepdim,
// torch.linalg.norm's dispatch, gradients of the reduction-based ones).
#include <doctest/doctest.h>

#include "linalg_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_linalg_lstsq_norm {

using namespace kiln;
using namespace kiln::test::la;
using kiln::test::values_of;

TEST_CASE("linalg::lstsq: an exact line fit, normal equations over a broadcast batch, drivers, residuals") {
  // y = 2 x + 1 at x = 0..3: the solution of [x 1] [a b]^T = y is exactly (2, 1).
  const Tensor<double> fit = linalg::lstsq(tensor_of({4, 2}, {0, 1, 1, 1, 2, 1, 3, 1}), tensor_of({4}, {1, 3, 5, 7})).solution;
  REQUIRE(fit.shape() == Shape{2});
  CHECK(values_of(fit)[0] == doctest::Approx(2.0).epsilon(1e-13));
  CHECK(values_of(fit)[1] == doctest::Approx(1.0).epsilon(1e-13));

  const Tensor<double> A = test::normal_tensor<double>({2, 7, 3}, 30), B = test::normal_tensor<double>({7, 2}, 31);
  for (const char* driver : {"gelsy", "gelsd", "gelss", "gels"}) {
    CAPTURE(driver);
    const auto r = linalg::lstsq(A, B, std::nullopt, driver);
    REQUIRE(r.solution.shape() == Shape{2, 3, 2});
    for (int64_t i = 0; i < 2; ++i) {
      const Mat a = matrix(A, i), x = matrix(r.solution, i);
      Mat residual = mul(a, x);
      for (size_t k = 0; k < residual.v.size(); ++k) residual.v[k] -= matrix(B).v[k];
      CHECK(max_diff(mul(transpose(a), residual), zeros(3, 2)) < 1e-12);  // A^T (A X - B) = 0
      if (std::string(driver) != "gelsy") {
        REQUIRE(r.residuals.shape() == Shape{2, 2});
        for (int64_t c = 0; c < 2; ++c) {
          double ss = 0;
          for (int64_t k = 0; k < 7; ++k) ss += residual(k, c) * residual(k, c);
          CHECK(values_of(r.residuals)[size_t(i * 2 + c)] == doctest::Approx(ss).epsilon(1e-12));
        }
      }
    }
    const std::string d = driver;
    CHECK(r.residuals.numel() == (d == "gelsy" ? 0 : 4));
    CHECK(r.rank.to_vector() == (d == "gels" ? std::vector<int64_t>{} : std::vector<int64_t>{3, 3}));
    CHECK(r.singular_values.numel() == (d == "gelsd" || d == "gelss" ? 6 : 0));
  }
  const auto svd_driver = linalg::lstsq(A, B, std::nullopt, "gelsd");
  CHECK(max_diff(matrix(svd_driver.singular_values.unsqueeze(-1), 1), matrix(linalg::svdvals(A).unsqueeze(-1), 1)) < 1e-13);
  CHECK_THROWS_WITH_AS(linalg::lstsq(A, B, std::nullopt, "gelsx"), doctest::Contains("linalg.lstsq: driver must be"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(linalg::lstsq(A, zeros<double>({6, 2})), doctest::Contains("linalg.lstsq: incompatible shapes"), ShapeError);
}

TEST_CASE("linalg::lstsq: the minimum-norm solution of underdetermined and rank-deficient systems") {
  // x = A^T (A A^T)^-1 b, with the 2x2 inverse by hand.
  const Tensor<double> A = test::normal_tensor<double>({2, 5}, 32), b = test::normal_tensor<double>({2, 1}, 33);
  const Mat a = matrix(A), g = mul(a, transpose(a));
  const double det = g(0, 0) * g(1, 1) - g(0, 1) * g(1, 0);
  const Mat g_inv{2, 2, {g(1, 1) / det, -g(0, 1) / det, -g(1, 0) / det, g(0, 0) / det}};
  const Mat expected = mul(transpose(a), mul(g_inv, matrix(b)));
  for (const char* driver : {"gelsy", "gelsd"}) {
    CAPTURE(driver);
    CHECK(max_diff(matrix(linalg::lstsq(A, b, std::nullopt, driver).solution), expected) < 1e-12);
  }
  // Two equal columns: rank 1, and the minimum-norm solution splits the weight evenly. In double, as every lstsq
  // call of the suite: lstsq<float> would compile Eigen's SVD and complete orthogonal decomposition a second time
  // (80 s of CPU at -O2), and float differs only in the default rcond, eps(T) * max(m, n), one line for both.
  const Tensor<double> dup = tensor_of<double>({3, 2}, {1, 1, 2, 2, 3, 3});
  const auto r = linalg::lstsq(dup, tensor_of<double>({3}, {2, 4, 6}));
  CHECK(r.rank.item() == 1);
  CHECK(values_of(r.solution)[0] == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(values_of(r.solution)[1] == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(linalg::lstsq(dup, tensor_of<double>({3}, {2, 4, 6}), std::nullopt, "gelsd").residuals.numel() == 0);  // rank-deficient
}

TEST_CASE("linalg vector and matrix norms: closed forms, dims, keepdim, torch.linalg.norm's dispatch") {
  const Tensor<double> v = tensor_of({2}, {3, -4});
  CHECK(linalg::vector_norm(v).item() == 5.0);
  CHECK(linalg::vector_norm(v, 1).item() == 7.0);
  CHECK(linalg::vector_norm(v, INFINITY).item() == 4.0);
  CHECK(linalg::vector_norm(v, -INFINITY).item() == 3.0);
  CHECK(linalg::vector_norm(v, 0).item() == 2.0);
  CHECK(linalg::vector_norm(v, 3).item() == doctest::Approx(std::cbrt(91.0)).epsilon(1e-14));
  CHECK(linalg::vector_norm(v, 2, std::nullopt, true).shape() == Shape{1});

  const Tensor<double> m = tensor_of({2, 2}, {1, -2, 3, 4});  // column sums 4, 6; row sums 3, 7
  CHECK(linalg::matrix_norm(m).item() == doctest::Approx(std::sqrt(30.0)).epsilon(1e-15));
  CHECK(linalg::matrix_norm(m, 1).item() == 6.0);
  CHECK(linalg::matrix_norm(m, -1).item() == 4.0);
  CHECK(linalg::matrix_norm(m, INFINITY).item() == 7.0);
  CHECK(linalg::matrix_norm(m, -INFINITY).item() == 3.0);
  // Singular values: square roots of the eigenvalues 15 +- sqrt(125) of m^T m = [[10, 10], [10, 20]].
  const double s_max = std::sqrt(15 + std::sqrt(125.0)), s_min = std::sqrt(15 - std::sqrt(125.0));
  CHECK(linalg::matrix_norm(m, 2).item() == doctest::Approx(s_max).epsilon(1e-14));
  CHECK(linalg::matrix_norm(m, -2).item() == doctest::Approx(s_min).epsilon(1e-14));
  CHECK(linalg::matrix_norm(m, "nuc").item() == doctest::Approx(s_max + s_min).epsilon(1e-14));

  // Dims other than the last two, keepdim, a batch: matrix (0, 2) of a [2, 3, 2] tensor.
  const Tensor<double> t = test::normal_tensor<double>({2, 3, 2}, 34);
  const Tensor<double> n1 = linalg::matrix_norm(t, 1, Dims{0, 2}, true);
  REQUIRE(n1.shape() == Shape{1, 3, 1});
  for (int64_t j = 0; j < 3; ++j) {
    const Tensor<double> slice = t.select(1, j);  // [2, 2]
    CHECK(n1[0][j][0].item() == linalg::matrix_norm(slice, 1).item());
    CHECK(linalg::matrix_norm(t, "nuc", Dims{0, 2})[j].item() == doctest::Approx(linalg::matrix_norm(slice, "nuc").item()));
  }
  CHECK(linalg::matrix_norm(t, INFINITY).shape() == Shape{2});

  // linalg::norm: flattened 2-norm without ord and dim; vector or matrix norm by the input's rank or dims.
  CHECK(linalg::norm(t).item() == doctest::Approx(linalg::vector_norm(t.reshape({12})).item()).epsilon(1e-15));
  CHECK(linalg::norm(m, 1.0).item() == 6.0);  // 2-d: a matrix norm
  CHECK(linalg::norm(v, 1.0).item() == 7.0);  // 1-d: a vector norm
  CHECK(linalg::norm(t, 1.0, Dims{1}).shape() == Shape{2, 2});
  CHECK(linalg::norm(m, "fro").item() == doctest::Approx(std::sqrt(30.0)));
  CHECK_THROWS_WITH_AS(linalg::norm(t, 2.0), doctest::Contains("linalg.norm: with ord and without dim"), ShapeError);
  CHECK_THROWS_WITH_AS(linalg::matrix_norm(m, 3), doctest::Contains("linalg.matrix_norm: order 3 is not supported"), std::invalid_argument);
  CHECK_THROWS_AS(linalg::matrix_norm(v), ShapeError);
  CHECK_THROWS_AS(linalg::matrix_norm(t, "fro", Dims{1, 1}), ShapeError);
}

TEST_CASE("gradients of the reduction-based norms agree with finite differences; SVD norms refuse") {
  using In = std::vector<Tensor<double>>;
  const Tensor<double> x = test::normal_tensor<double>({2, 3, 4}, 35);
  CHECK(autograd::gradcheck([](const In& in) { return linalg::matrix_norm(in[0]); }, {x}).message == "");
  CHECK(autograd::gradcheck([](const In& in) { return linalg::matrix_norm(in[0], 1); }, {x}).message == "");
  CHECK(autograd::gradcheck([](const In& in) { return linalg::matrix_norm(in[0], -INFINITY); }, {x}).message == "");
  CHECK(autograd::gradcheck([](const In& in) { return linalg::vector_norm(in[0], 3, Dims{-1}); }, {x}).message == "");
  Tensor<double> y = x.clone();
  y.requires_grad_();
  CHECK_THROWS_AS(linalg::matrix_norm(y, "nuc"), std::logic_error);
}

}  // namespace test_linalg_lstsq_norm
