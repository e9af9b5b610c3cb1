// kiln::index(t, {...}): results against element arithmetic on the input, views writing through, errors.
#include <doctest/doctest.h>

#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_indexing {

using namespace kiln;
using namespace kiln::indexing;

namespace {
// t[i][j][k] = 100 i + 10 j + k, shape [3, 4, 5].
Tensor<float> cube() {
  Tensor<float> t = empty({3, 4, 5});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) t.data_ptr()[(i * 4 + j) * 5 + k] = float(100 * i + 10 * j + k);
  return t;
}
}  // namespace

TEST_CASE("integers select, slices keep dims") {
  const Tensor<float> t = cube();
  Tensor<float> a = index(t, {1});
  REQUIRE(a.shape() == Shape{4, 5});
  CHECK(a.data_ptr() == t.data_ptr() + 20);  // a view, no copy

  Tensor<float> b = index(t, {Slice(), 2});
  REQUIRE(b.shape() == Shape{3, 5});
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k) CHECK(b.contiguous().data_ptr()[i * 5 + k] == float(100 * i + 20 + k));

  Tensor<float> c = index(t, {Slice(1, None), Slice(None, None, 2), -1});
  REQUIRE(c.shape() == Shape{2, 2});
  CHECK(c.to_vector() == std::vector<float>{104, 124, 204, 224});

  Tensor<float> d = index(t, {-1, Slice(-2), Slice(0, -1, 3)});  // Slice(-2): the last two
  REQUIRE(d.shape() == Shape{2, 2});
  CHECK(d.to_vector() == std::vector<float>{220, 223, 230, 233});

  CHECK(index(t, {Slice(5, 10)}).shape() == Shape{0, 4, 5});  // past the end: empty, as Python
  CHECK(index(t, {2, 3, 4}).dim() == 0);
  CHECK(index(t, {2, 3, 4}).item() == 234);
  CHECK(index(t, {}).shape() == t.shape());
  CHECK(index(t, std::vector<TensorIndex>{0, Slice(1, 2)}).to_vector() == std::vector<float>{10, 11, 12, 13, 14});
}

TEST_CASE("None adds a dim, Ellipsis fills the rest, booleans add a dim of size 1 or 0") {
  const Tensor<float> t = cube();
  CHECK(index(t, {None}).shape() == Shape{1, 3, 4, 5});
  CHECK(index(t, {Ellipsis, None}).shape() == Shape{3, 4, 5, 1});
  CHECK(index(t, {None, Slice(), None}).shape() == Shape{1, 3, 1, 4, 5});
  Tensor<float> e = index(t, {"...", 0});
  REQUIRE(e.shape() == Shape{3, 4});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(e.contiguous().data_ptr()[i * 4 + j] == float(100 * i + 10 * j));
  CHECK(index(t, {0, Ellipsis, 1}).to_vector() == std::vector<float>{1, 11, 21, 31});
  CHECK(index(t, {Ellipsis, 1, 2, 3}).item() == 123);  // an ellipsis may stand for no dims
  CHECK(index(t, {true}).shape() == Shape{1, 3, 4, 5});
  CHECK(index(t, {Slice(), false}).shape() == Shape{3, 0, 4, 5});
  Tensor<float> n = index(t, {1, None, Slice(2, 4), None, 0});
  REQUIRE(n.shape() == Shape{1, 2, 1});
  CHECK(n.to_vector() == std::vector<float>{120, 130});
}

TEST_CASE("assigning to an indexed view writes through") {
  Tensor<float> t = cube();
  const Tensor<float> before = t.clone();
  index(t, {Slice(), 0}) = index(before, {Slice(), 1}) * 2;  // t[:, 0] = 2 * t[:, 1]
  index(t, {2, Ellipsis, 4}) = -1.0f;                        // t[2, ..., 4] = -1
  index_put_(t, {0, 3}, tensor<float>({7, 8, 9, 10, 11}));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) {
        float expected = float(100 * i + 10 * j + k);
        if (j == 0) expected = 2 * float(100 * i + 10 + k);
        if (i == 2 && k == 4) expected = -1;
        if (i == 0 && j == 3) expected = float(7 + k);
        CHECK(t.data_ptr()[(i * 4 + j) * 5 + k] == expected);
      }
  // A source overlapping the destination is read before it is overwritten.
  Tensor<float> v = arange(6);
  index(v, {Slice(1, None)}) = index(v, {Slice(None, -1)});
  CHECK(v.to_vector() == std::vector<float>{0, 0, 1, 2, 3, 4});
}

TEST_CASE("bad indices throw, naming the dim and the size") {
  const Tensor<float> t = cube();
  CHECK_THROWS_WITH_AS(index(t, {3}), "index: index 3 is out of range for dim 0 of size 3", std::out_of_range);
  CHECK_THROWS_WITH_AS(index(t, {Slice(), None, -5}), "index: index -5 is out of range for dim 1 of size 4",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(index(t, {Ellipsis, 5}), "index: index 5 is out of range for dim 2 of size 5",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(index(t, {0, 0, 0, 0}),
                       "index: too many indices for a tensor of 3 dims (shape [3, 4, 5]): {0, 0, 0, 0} indexes 4",
                       ShapeError);
  CHECK_THROWS_AS(index(t, {Ellipsis, 0, "..."}), ShapeError);
  CHECK_THROWS_AS(index(full<float>({}, 1.0f), {0}), ShapeError);
  CHECK_THROWS_AS(index(t, {Slice(None, None, 0)}), std::invalid_argument);
  CHECK_THROWS_AS(index(t, {Slice(None, None, -1)}), std::invalid_argument);
  CHECK_THROWS_AS(index(t, {".."}), std::invalid_argument);
}

TEST_CASE("linspace and arange at their edges give torch's values and errors") {
  // PyTorch 2.15: torch.linspace(2, 3, 1) is [2.] (one step is start), linspace(2, 3, 0) is empty,
  // linspace(3, 2, 2) is [3., 2.], and with dtype=int64 linspace(0, 1, 3) is [0, 0, 1], linspace(0, 10, 4)
  // [0, 3, 6, 10], linspace(2.7, 3, 1) [2].
  CHECK(linspace<float>(2, 3, 1).to_vector() == std::vector<float>{2});
  CHECK(linspace<double>(2, 3, 1).to_vector() == std::vector<double>{2});
  CHECK(linspace<float>(2, 3, 0).numel() == 0);
  CHECK(linspace<float>(3, 2, 2).to_vector() == std::vector<float>{3, 2});
  CHECK(linspace<int64_t>(0, 1, 3).to_vector() == std::vector<int64_t>{0, 0, 1});
  CHECK(linspace<int64_t>(0, 10, 4).to_vector() == std::vector<int64_t>{0, 3, 6, 10});
  CHECK(linspace<int64_t>(2.7, 3, 1).to_vector() == std::vector<int64_t>{2});
  // torch.arange(5, 0, -1.5) is [5., 3.5, 2., 0.5], arange(3, 3) and arange(3, 3, -1) are empty, and a step
  // whose sign does not lead from start to end raises ("upper bound and lower bound inconsistent with step sign").
  CHECK(arange<float>(5, 0, -1.5).to_vector() == std::vector<float>{5, 3.5f, 2, 0.5f});
  CHECK(arange<int64_t>(3, 3).numel() == 0);
  CHECK(arange<int64_t>(3, 3, -1).numel() == 0);
  CHECK_THROWS_WITH_AS(arange<float>(5, 0), "arange: step 1 has the wrong sign for the range [5, 0)",
                       std::invalid_argument);
  CHECK_THROWS_AS(arange<float>(0, -0.5), std::invalid_argument);
  CHECK_THROWS_AS(arange<float>(0, -1, 0.5), std::invalid_argument);
  CHECK_THROWS_AS(arange<float>(0, 1, -1), std::invalid_argument);
}

}  // namespace test_tensor_indexing
