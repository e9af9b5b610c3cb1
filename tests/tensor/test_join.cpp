// cat, stack and unbind: values against index arithmetic, negative dims, strided inputs, zero-size parts, errors.
#include <doctest/doctest.h>

#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_join {

using namespace kiln;

namespace {
// t[i] = base + i in row-major order.
template <class T = float>
Tensor<T> iota(const Shape& s, int base = 0) {
  Tensor<T> t = empty<T>(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_ptr()[i] = T(base + i);
  return t;
}
}  // namespace

TEST_CASE("cat along dim 0 and dim 1") {
  Tensor<float> a = iota({2, 3}), b = iota({1, 3}, 100), c = iota({2, 2}, 200);
  Tensor<float> r0 = cat({a, b}, 0);
  REQUIRE(r0.shape() == Shape{3, 3});
  CHECK(r0.to_vector() == std::vector<float>{0, 1, 2, 3, 4, 5, 100, 101, 102});

  Tensor<float> r1 = cat({a, c, a}, 1);
  REQUIRE(r1.shape() == Shape{2, 8});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 8; ++j) {
      const float expected = j < 3 ? float(i * 3 + j) : j < 5 ? float(200 + i * 2 + (j - 3)) : float(i * 3 + j - 5);
      CHECK(r1.data_ptr()[i * 8 + j] == expected);
    }
  CHECK(cat({a, c, a}, -1).to_vector() == r1.to_vector());
}

TEST_CASE("cat reads strided views and skips zero-size parts") {
  Tensor<float> a = iota({3, 2});  // a.t() is [2, 3], not contiguous
  Tensor<float> e = empty({2, 0});
  Tensor<float> r = cat({a.t(), e, iota({2, 1}, 50)}, 1);
  REQUIRE(r.shape() == Shape{2, 4});
  CHECK(r.to_vector() == std::vector<float>{0, 2, 4, 50, 1, 3, 5, 51});
  CHECK(cat({e, e}, 1).shape() == Shape{2, 0});
}

TEST_CASE("cat of a 3-D tensor, int and bool dtypes") {
  Tensor<int32_t> a = iota<int32_t>({2, 2, 2}), b = iota<int32_t>({2, 1, 2}, 10);
  Tensor<int32_t> r = cat({a, b}, 1);
  REQUIRE(r.shape() == Shape{2, 3, 2});
  CHECK(r.to_vector() == std::vector<int32_t>{0, 1, 2, 3, 10, 11, 4, 5, 6, 7, 12, 13});
  Tensor<bool> t = full<bool>({2}, true), f = full<bool>({1}, false);
  CHECK(cat({t, f, t}).to_vector() == std::vector<bool>{true, true, false, true, true});
}

TEST_CASE("cat errors name the op, the tensor and both shapes") {
  CHECK_THROWS_WITH_AS(cat({iota({2, 3}), iota({3, 4})}, 1),
                       "cat: tensor 1 has shape [3, 4] but tensor 0 has shape [2, 3] (all dims but 1 must match)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(cat({iota({2, 3}), iota({2, 3}), iota({2, 4})}, 0),
                       "cat: tensor 2 has shape [2, 4] but tensor 0 has shape [2, 3] (all dims but 0 must match)",
                       ShapeError);
  CHECK_THROWS_WITH_AS(cat({iota({2, 3}), iota({6})}),
                       "cat: tensor 1 has 1 dims but tensor 0 has 2 (shapes [6] and [2, 3])", ShapeError);
  CHECK_THROWS_AS(cat(std::vector<Tensor<float>>{}), ShapeError);
  CHECK_THROWS_AS(cat({iota({}), iota({})}), ShapeError);
  CHECK_THROWS_AS(cat({iota({2})}, 1), std::out_of_range);
}

TEST_CASE("stack inserts a new dim") {
  Tensor<float> a = iota({2, 3}), b = iota({2, 3}, 10);
  Tensor<float> s0 = stack({a, b});
  REQUIRE(s0.shape() == Shape{2, 2, 3});
  CHECK(s0.to_vector() == std::vector<float>{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  Tensor<float> s1 = stack({a, b}, 1);
  REQUIRE(s1.shape() == Shape{2, 2, 3});
  CHECK(s1.to_vector() == std::vector<float>{0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15});
  Tensor<float> s2 = stack({a, b}, -1);
  REQUIRE(s2.shape() == Shape{2, 3, 2});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      CHECK(s2.data_ptr()[(i * 3 + j) * 2] == float(i * 3 + j));
      CHECK(s2.data_ptr()[(i * 3 + j) * 2 + 1] == float(10 + i * 3 + j));
    }
  // 0-dim tensors stack into a vector.
  CHECK(stack({full<double>({}, 1.5), full<double>({}, -2.0)}).to_vector() == std::vector<double>{1.5, -2.0});
  CHECK_THROWS_WITH_AS(stack({a, iota({3, 2})}),
                       "stack: tensor 1 has shape [3, 2] but tensor 0 has shape [2, 3] "
                       "(all tensors must have the same shape)",
                       ShapeError);
  CHECK_THROWS_AS(stack({a, b}, 3), std::out_of_range);
}

TEST_CASE("unbind gives the slices along a dim as views; stack of them is the input") {
  const Tensor<float> x = iota({2, 3, 4});
  for (int dim : {0, 1, 2, -1}) {
    const std::vector<Tensor<float>> parts = unbind(x, dim);
    REQUIRE(int64_t(parts.size()) == x.size(dim));
    for (size_t i = 0; i < parts.size(); ++i) {
      CHECK(parts[i].to_vector() == x.select(dim, int64_t(i)).contiguous().to_vector());
      CHECK(parts[i].data_ptr() == x.select(dim, int64_t(i)).data_ptr());  // a view, no copy
    }
    CHECK(stack(parts, dim).to_vector() == x.to_vector());
  }
  CHECK(unbind(zeros<float>({0, 3}), 0).empty());
  CHECK_THROWS_WITH_AS(unbind(x, 3), "unbind: dim 3 is out of range for a tensor of 3 dims (expected in [-3, 2])",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(unbind(Tensor<float>(full<float>({}, 1.0f)), 0), "unbind: a 0-dim tensor has no dim to unbind",
                       ShapeError);
}

}  // namespace test_tensor_join
