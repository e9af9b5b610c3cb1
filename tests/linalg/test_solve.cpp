// kiln::linalg solve, inv, det and slogdet against Eigen-independent references: closed forms for 2x2 and
// 3x3, residuals and products computed by hand, batched and broadcast shapes, torch's error cases, and
// gradcheck of every gradient (including det at a singular matrix).
#include <doctest/doctest.h>

#include "linalg_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_linalg_solve {

using namespace kiln;
using namespace kiln::test::la;
using kiln::test::values_of;

namespace {

// det by cofactor expansion along the first row (2x2 and 3x3).
double det_by_hand(const Mat& a) {
  if (a.rows == 2) return a(0, 0) * a(1, 1) - a(0, 1) * a(1, 0);
  return a(0, 0) * (a(1, 1) * a(2, 2) - a(1, 2) * a(2, 1)) - a(0, 1) * (a(1, 0) * a(2, 2) - a(1, 2) * a(2, 0)) +
         a(0, 2) * (a(1, 0) * a(2, 1) - a(1, 1) * a(2, 0));
}

// The inverse of a 3x3 matrix as adjugate / det.
Mat inverse_3x3(const Mat& a) {
  Mat inv = zeros(3, 3);
  const double d = det_by_hand(a);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const int r0 = (j + 1) % 3, r1 = (j + 2) % 3, c0 = (i + 1) % 3, c1 = (i + 2) % 3;
      inv(i, j) = (a(r0, c0) * a(r1, c1) - a(r0, c1) * a(r1, c0)) / d;
    }
  return inv;
}

}  // namespace

TEST_CASE("linalg::solve: Cramer's rule for 2x2, residuals for batches, vectors, broadcasting, float") {
  const Tensor<double> a = tensor_of({2, 2}, {4, 3, 6, 3});
  const Tensor<double> x = linalg::solve(a, tensor_of({2}, {10, 12}));  // det -6: x = (1, 2)
  CHECK(x.shape() == Shape{2});
  CHECK(x[0].item() == doctest::Approx(1.0).epsilon(1e-14));
  CHECK(x[1].item() == doctest::Approx(2.0).epsilon(1e-14));

  const Tensor<double> A = test::normal_tensor<double>({3, 2, 5, 5}, 1), B = test::normal_tensor<double>({3, 2, 5, 4}, 2);
  const Tensor<double> X = linalg::solve(A, B);
  REQUIRE(X.shape() == Shape{3, 2, 5, 4});
  for (int64_t i = 0; i < 6; ++i) CHECK(max_diff(mul(matrix(A, i), matrix(X, i)), matrix(B, i)) < 1e-12);

  // A batch of vectors: B's shape is A's without the last dim.
  const Tensor<double> v = test::normal_tensor<double>({3, 2, 5}, 3);
  const Tensor<double> xv = linalg::solve(A, v);
  REQUIRE(xv.shape() == Shape{3, 2, 5});
  const Mat r = mul(matrix(A, 4), matrix(xv.reshape({6, 5, 1}), 4));
  CHECK(max_diff(r, matrix(v.reshape({6, 5, 1}), 4)) < 1e-12);

  // Batch dims broadcast: A [2, 1, 4, 4] with B [3, 4, 2] gives [2, 3, 4, 2].
  const Tensor<double> Ab = test::normal_tensor<double>({2, 1, 4, 4}, 4), Bb = test::normal_tensor<double>({3, 4, 2}, 5);
  const Tensor<double> Xb = linalg::solve(Ab, Bb);
  REQUIRE(Xb.shape() == Shape{2, 3, 4, 2});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      CHECK(max_diff(mul(matrix(Ab, i), matrix(Xb, i * 3 + j)), matrix(Bb, j)) < 1e-12);

  // left = false: X A = B, for a batch of matrices and for one row. A vector B (1-d, or A's shape without the last
  // dim) is refused, as PyTorch ("Vector broadcasting of the left hand side is not supported for left=False").
  const Tensor<double> Xr = linalg::solve(A, B.transpose(-1, -2), false);
  REQUIRE(Xr.shape() == Shape{3, 2, 4, 5});
  for (int64_t i = 0; i < 6; ++i) CHECK(max_diff(mul(matrix(Xr, i), matrix(A, i)), transpose(matrix(B, i))) < 1e-12);
  const Tensor<double> xr = linalg::solve(a, tensor_of({1, 2}, {10, 12}), false);  // x A = b, b a row
  CHECK(max_diff(mul(matrix(xr), matrix(a)), Mat{1, 2, {10, 12}}) < 1e-13);
  CHECK_THROWS_WITH_AS(linalg::solve(a, tensor_of({2}, {10, 12}), false),
                       doctest::Contains("linalg.solve: B of shape [2] is a vector"), ShapeError);
  CHECK_THROWS_AS(linalg::solve(A, v, false), ShapeError);
  CHECK_THROWS_AS(linalg::solve(tensor_of({1, 1}, {2}), tensor_of({1}, {4}), false), ShapeError);

  // float: the residual within float's precision; a transposed (non-contiguous) A reads as its values.
  const Tensor<float> Af = test::normal_tensor<float>({4, 6, 6}, 6) + eye<float>(6) * 4.0f;
  const Tensor<float> Bf = test::normal_tensor<float>({4, 6, 1}, 7);
  const Tensor<float> Xf = linalg::solve(Af.transpose(-1, -2), Bf);
  for (int64_t i = 0; i < 4; ++i)
    CHECK(max_diff(mul(transpose(matrix(Af, i)), matrix(Xf, i)), matrix(Bf, i)) < 1e-5);
}

TEST_CASE("linalg::inv: the 3x3 adjugate formula, A A^-1 = I over a batch, float") {
  const Tensor<double> a = tensor_of({3, 3}, {2, -1, 0, 1, 3, 2, 0, 1, 4});
  CHECK(max_diff(matrix(linalg::inv(a)), inverse_3x3(matrix(a))) < 1e-15);
  const Tensor<double> A = test::normal_tensor<double>({2, 3, 7, 7}, 8);
  const Tensor<double> Y = linalg::inv(A);
  REQUIRE(Y.shape() == A.shape());
  for (int64_t i = 0; i < 6; ++i) CHECK(max_diff(mul(matrix(A, i), matrix(Y, i)), identity(7)) < 1e-11);
  const Tensor<float> Af = test::normal_tensor<float>({5, 5}, 9) + eye<float>(5) * 3.0f;
  CHECK(max_diff(mul(matrix(Af), matrix(linalg::inv(Af))), identity(5)) < 1e-5);
  CHECK(linalg::inv(empty<double>({0, 3, 3})).shape() == Shape{0, 3, 3});
}

TEST_CASE("linalg::det and slogdet: closed forms, a permutation, singular matrices, batches") {
  const Tensor<double> A = test::normal_tensor<double>({2, 4, 3, 3}, 10);
  const Tensor<double> d = linalg::det(A);
  REQUIRE(d.shape() == Shape{2, 4});
  const auto [sign, logabs] = linalg::slogdet(A);
  REQUIRE(sign.shape() == Shape{2, 4});
  for (int64_t i = 0; i < 8; ++i) {
    const double ref = det_by_hand(matrix(A, i));
    CHECK(values_of(d)[i] == doctest::Approx(ref).epsilon(1e-12));
    CHECK(values_of(sign)[i] == (ref > 0 ? 1.0 : -1.0));
    CHECK(values_of(logabs)[i] == doctest::Approx(std::log(std::abs(ref))).epsilon(1e-12));
  }
  const Tensor<double> two = test::normal_tensor<double>({6, 2, 2}, 11);
  for (int64_t i = 0; i < 6; ++i)
    CHECK(linalg::det(two)[i].item() == doctest::Approx(det_by_hand(matrix(two, i))).epsilon(1e-13));
  // A row swap has det -1; a singular matrix det 0, slogdet (0, -inf).
  CHECK(linalg::det(tensor_of({3, 3}, {0, 1, 0, 1, 0, 0, 0, 0, 1})).item() == -1.0);
  const Tensor<float> singular = tensor_of<float>({2, 2}, {1, 2, 2, 4});
  CHECK(linalg::det(singular).item() == 0.0f);
  const auto s = linalg::slogdet(singular);
  CHECK(s.sign.item() == 0.0f);
  CHECK(s.logabsdet.item() == -INFINITY);
  CHECK(linalg::det(tensor_of<float>({2, 2}, {3, 1, 4, 2})).item() == doctest::Approx(2.0f));
}

TEST_CASE("linalg errors name the op, the shapes and the batch element") {
  const Tensor<double> rect = zeros<double>({3, 2});
  CHECK_THROWS_WITH_AS(linalg::inv(rect), doctest::Contains("linalg.inv: A must be batches of square matrices, but they are 3 by 2"), ShapeError);
  CHECK_THROWS_WITH_AS(linalg::det(zeros<double>({3})), doctest::Contains("at least 2 dimensions, got shape [3]"), ShapeError);
  CHECK_THROWS_WITH_AS(linalg::solve(eye<double>(3), zeros<double>({4, 2})), doctest::Contains("linalg.solve: incompatible shapes"), ShapeError);
  CHECK_THROWS_WITH_AS(linalg::solve(zeros<double>({2, 3, 3}), zeros<double>({4, 3, 1})), doctest::Contains("cannot be broadcast"), ShapeError);
  // The second matrix of the batch is singular (its second pivot is zero).
  Tensor<double> batch = stack(std::vector<Tensor<double>>{eye<double>(2), tensor_of({2, 2}, {1, 2, 2, 4})});
  CHECK_THROWS_WITH_AS(linalg::inv(batch), doctest::Contains("linalg.inv: (Batch element 1): the diagonal element 2 is zero"), linalg::LinAlgError);
  CHECK_THROWS_WITH_AS(linalg::solve(batch, ones<double>({2, 2})), doctest::Contains("(Batch element 1): the solver failed because the input matrix is singular"), linalg::LinAlgError);
  CHECK_THROWS_WITH_AS(linalg::inv(zeros<double>({2, 2})), "linalg.inv: the diagonal element 1 is zero, the inversion could not be completed because the input matrix is singular", linalg::LinAlgError);
}

TEST_CASE("gradients of solve, inv, det and slogdet agree with finite differences") {
  using autograd::gradcheck;
  using In = std::vector<Tensor<double>>;
  const Tensor<double> A = test::normal_tensor<double>({2, 3, 3}, 12) + eye<double>(3) * 2.0;
  // solve: matrix right-hand side, vector right-hand side, and A broadcast over B's batch.
  CHECK(gradcheck([](const In& in) { return linalg::solve(in[0], in[1]); }, {A, test::normal_tensor<double>({2, 3, 2}, 13)}).message == "");
  CHECK(gradcheck([](const In& in) { return linalg::solve(in[0], in[1]); }, {A, test::normal_tensor<double>({2, 3}, 14)}).message == "");
  CHECK(gradcheck([](const In& in) { return linalg::solve(in[0], in[1]); }, {A[0], test::normal_tensor<double>({2, 3, 1}, 15)}).message == "");
  CHECK(gradcheck([](const In& in) { return linalg::solve(in[0], in[1], false); }, {A, test::normal_tensor<double>({2, 2, 3}, 16)}).message == "");
  CHECK(gradcheck([](const In& in) { return linalg::inv(in[0]); }, {A}).message == "");
  CHECK(gradcheck([](const In& in) { return linalg::det(in[0]); }, {A}).message == "");
  CHECK(gradcheck([](const In& in) { return linalg::slogdet(in[0]).logabsdet; }, {A}).message == "");
  // det at singular matrices (rank n - 1, where the gradient adj(A)^T is not zero, and rank n - 2).
  const Tensor<double> singular = stack(std::vector<Tensor<double>>{
      tensor_of({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), tensor_of({3, 3}, {1, 2, 3, 2, 4, 6, 3, 6, 9})});
  CHECK(gradcheck([](const In& in) { return linalg::det(in[0]); }, {singular}).message == "");
  // d det / dA of [[1, 2], [2, 4]] is its cofactor matrix [[4, -2], [-2, 1]].
  Tensor<double> a2 = tensor_of({2, 2}, {1, 2, 2, 4});
  a2.requires_grad_();
  linalg::det(a2).backward();
  CHECK(max_diff(matrix(a2.grad()), Mat{2, 2, {4, -2, -2, 1}}) < 1e-12);
}

}  // namespace test_linalg_solve
