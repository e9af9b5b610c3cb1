// Eigen interop: maps of tensors and tensor views of Eigen objects share memory, keep strides, and never
// free what they view; an Eigen view is a leaf of kiln expressions (and autograd) like any tensor.
#include <doctest/doctest.h>

#include "kiln/eigen.hpp"
#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_interop_eigen {

using namespace kiln;

TEST_CASE("as_eigen: a map of a tensor, its transposed view and a column, sharing memory") {
  Tensor<double> t = arange<double>(6.0).view({2, 3});
  auto m = as_eigen(t);
  CHECK(m.rows() == 2);
  CHECK(m.cols() == 3);
  CHECK(m(1, 2) == 5.0);
  m(0, 1) = 10.0;
  CHECK(t[0][1].item() == 10.0);
  auto mt = as_eigen(t.t());  // strides (1, 3): no copy
  CHECK(mt.rows() == 3);
  CHECK(mt(1, 0) == 10.0);
  CHECK(mt.data() == t.data_ptr());
  const Tensor<double> column = t.select(1, 2);  // [2] with stride 3
  CHECK(as_eigen(column).rows() == 2);
  CHECK(as_eigen(column)(1, 0) == 5.0);
  // Eigen arithmetic on a map: a product against Eigen's own.
  Eigen::MatrixXd dense(2, 3);
  dense << 0, 10, 2, 3, 4, 5;
  CHECK((as_eigen(t) * as_eigen(t.t())).isApprox(dense * dense.transpose()));
  as_eigen_array(t) += 1.0;
  CHECK(t[1][0].item() == 4.0);
  CHECK_THROWS_AS(as_eigen(zeros<double>({2, 2, 2})), ShapeError);
  const Tensor<double> base = arange<double>(3.0);  // reversed, as a DLPack import of a[::-1] is
  const Tensor<double> reversed(base.impl_ptr()->view_as({3}, {-1}, 2));
  CHECK_THROWS_WITH_AS(as_eigen(reversed), doctest::Contains("negative strides"), ShapeError);
}

TEST_CASE("from_eigen: matrices of both orders, blocks, strided maps and vectors as kiln views") {
  Eigen::MatrixXf col(3, 4);  // column-major
  col.setRandom();
  const Tensor<float> c = from_eigen(col);
  CHECK(c.shape() == Shape{3, 4});
  CHECK(c.strides() == Strides{1, 3});
  CHECK(c[2][3].item() == col(2, 3));
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row = col;
  CHECK(from_eigen(row).strides() == Strides{4, 1});
  CHECK(from_eigen(row)[1][2].item() == col(1, 2));
  const Tensor<float> block = from_eigen(col.block(1, 1, 2, 2));
  CHECK(block.strides() == Strides{1, 3});
  CHECK(block[1][0].item() == col(2, 1));
  Eigen::VectorXd v = Eigen::VectorXd::LinSpaced(5, 0, 4);
  Tensor<double> tv = from_eigen(v);
  CHECK(tv.shape() == Shape{5});
  tv *= 2.0;  // writes reach the Eigen vector
  CHECK(v(4) == 8.0);
  double raw[6] = {0, 1, 2, 3, 4, 5};
  Eigen::Map<Eigen::VectorXd, 0, Eigen::InnerStride<2>> every_other(raw, 3);
  CHECK(from_eigen(every_other)[2].item() == 4.0);
}

TEST_CASE("an Eigen view is an expression leaf, also under autograd, and is never freed by kiln") {
  Eigen::ArrayXXd a = Eigen::ArrayXXd::Constant(2, 3, 1.5);
  {
    const Tensor<double> x = from_eigen(a);
    const Tensor<double> y = x * 2.0 + arange<double>(3.0);  // broadcast over rows
    CHECK(y[1][2].item() == 5.0);
    Tensor<double> w = from_eigen(a).clone().requires_grad_();
    sum(w * from_eigen(a)).backward();
    CHECK(w.grad()[0][0].item() == 1.5);
  }
  a(0, 0) = 2.0;  // still owned by Eigen after every kiln view is gone (ASan would see a double free)
  CHECK(a(0, 0) == 2.0);
}

}  // namespace test_interop_eigen
