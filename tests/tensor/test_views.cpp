// Views share storage and compute the right layout; view refuses what needs a copy.
#include <doctest/doctest.h>

#include "kiln/tensor/factory.hpp"
#include "kiln/tensor/reduce.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_views {

using namespace kiln;

namespace {
Tensor<float> iota(const Shape& s) { return arange<float>(double(numel_of(s))).view(s); }
// Element at a multi-index through the tensor's own strides.
float at(const Tensor<float>& t, std::initializer_list<int64_t> idx) {
  int64_t off = t.storage_offset(), d = 0;
  for (int64_t i : idx) off += i * t.stride(d++);
  return reinterpret_cast<const float*>(t.impl().storage->data())[off];
}
}  // namespace

TEST_CASE("view and reshape") {
  Tensor<float> t = iota({2, 3, 4});
  Tensor<float> v = t.view({6, -1});
  CHECK(v.shape() == Shape{6, 4});
  CHECK(v.data_ptr() == t.data_ptr());
  CHECK(at(v, {5, 3}) == 23);
  Tensor<float> tt = t.transpose(0, 2);  // [4, 3, 2], not contiguous
  CHECK_FALSE(tt.is_contiguous());
  CHECK_THROWS_AS(tt.view({24}), ShapeError);
  Tensor<float> r = tt.reshape({24});  // copies
  CHECK(r.data_ptr() != t.data_ptr());
  CHECK(r.to_vector()[1] == 12);
  Tensor<float> split = t.transpose(0, 1).view({3, 2, 2, 2});  // the last dim splits without a copy
  CHECK(split.data_ptr() == t.data_ptr());
  CHECK(at(split, {1, 1, 1, 0}) == at(t.transpose(0, 1), {1, 1, 2}));
  CHECK_THROWS_WITH_AS(t.view({5, -1}), "view: shape [5, -1] is invalid for input of size 24", ShapeError);
  CHECK_THROWS_AS(t.view({-1, -1}), ShapeError);
  CHECK(iota({0, 4}).view({2, 0, 8}).numel() == 0);
}

TEST_CASE("permute, transpose, t") {
  Tensor<float> t = iota({2, 3, 4});
  Tensor<float> p = t.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(at(p, {3, 1, 2}) == at(t, {1, 2, 3}));
  CHECK_THROWS_AS(t.permute({0, 0, 1}), ShapeError);
  CHECK_THROWS_AS(t.permute({0, 1}), ShapeError);
  CHECK(iota({3, 5}).t().shape() == Shape{5, 3});
  CHECK_THROWS_AS(t.t(), ShapeError);
}

TEST_CASE("slice, narrow, select, operator[]") {
  Tensor<float> t = iota({5, 6});
  Tensor<float> s = t.slice(1, 1, 6, 2);
  CHECK(s.shape() == Shape{5, 3});
  CHECK(at(s, {2, 2}) == 17);
  CHECK(t.slice(0, -2).shape() == Shape{2, 6});
  CHECK(t.slice(0, 4, 2).shape() == Shape{0, 6});   // empty, as Python slicing
  CHECK(t.slice(1, -100, 100).shape() == Shape{5, 6});
  CHECK_THROWS_AS(t.slice(1, 0, 6, 0), std::invalid_argument);
  CHECK(t.narrow(0, 1, 2).shape() == Shape{2, 6});
  CHECK_THROWS_AS(t.narrow(0, 4, 2), std::out_of_range);
  CHECK(t.select(1, -1).to_vector() == std::vector<float>{5, 11, 17, 23, 29});
  CHECK(t[2][3].item() == 15);
  CHECK(t[2].dim() == 1);
}

TEST_CASE("unsqueeze, squeeze, expand, flatten") {
  Tensor<float> t = iota({3, 4});
  CHECK(t.unsqueeze(0).shape() == Shape{1, 3, 4});
  CHECK(t.unsqueeze(-1).shape() == Shape{3, 4, 1});
  CHECK(t.unsqueeze(1).squeeze().shape() == Shape{3, 4});
  CHECK(t.unsqueeze(1).squeeze(1).shape() == Shape{3, 4});
  CHECK(t.squeeze(0).shape() == Shape{3, 4});  // size 3: unchanged
  Tensor<float> col = iota({3, 1});
  Tensor<float> e = col.expand({2, 3, 5});
  CHECK(e.shape() == Shape{2, 3, 5});
  CHECK(e.stride(2) == 0);
  CHECK(at(e, {1, 2, 4}) == 2);
  CHECK(col.expand({-1, 7}).shape() == Shape{3, 7});
  CHECK_THROWS_AS(t.expand({3, 5}), ShapeError);
  CHECK(iota({2, 3, 4}).flatten().shape() == Shape{24});
  CHECK(iota({2, 3, 4}).flatten(1).shape() == Shape{2, 12});
  CHECK(iota({2, 3, 4}).flatten(0, 1).shape() == Shape{6, 4});
  CHECK(full<float>({}, 3).flatten().shape() == Shape{1});
}

TEST_CASE("contiguous and clone copy only when needed") {
  Tensor<float> t = iota({4, 4});
  CHECK(t.contiguous().data_ptr() == t.data_ptr());
  Tensor<float> c = t.t().contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.data_ptr() != t.data_ptr());
  CHECK(c.to_vector()[1] == 4);
  Tensor<float> k = t.clone();
  k.fill_(0);
  CHECK(t.to_vector()[5] == 5);
}

TEST_CASE("writes through views reach the base tensor and bump the shared version") {
  Tensor<float> t = zeros<float>({4, 4});
  Tensor<float> diag_block = t.slice(0, 1, 3).slice(1, 1, 3);
  const uint64_t v = t.version();
  diag_block.fill_(1);
  CHECK(t.version() == v + 1);
  CHECK(t.to_vector()[5] == 1);
  CHECK(t.to_vector()[4] == 0);
  t.t()[0] = arange<float>(4);  // column 0
  CHECK(at(t, {3, 0}) == 3);
}

TEST_CASE("empty tensors: contiguous whatever their strides, and huge other dims neither overflow nor throw") {
  const Tensor<float> a = empty<float>({2, 0, 3});
  CHECK(a.numel() == 0);
  CHECK(a.is_contiguous());
  CHECK(a.contiguous().shape() == Shape{2, 0, 3});
  const int64_t huge = int64_t(1) << 40;
  const Tensor<float> b = empty<float>({huge, huge, 0}), c = zeros<float>({0, huge, huge});
  CHECK(b.numel() == 0);
  CHECK(c.numel() == 0);
  CHECK(b.is_contiguous());
  CHECK(Tensor<float>(c + 1.0f).numel() == 0);
  CHECK(sum(c).item() == 0.0f);
  CHECK_THROWS_AS(empty<float>({huge, huge, 2}), OutOfMemoryError);
}

}  // namespace test_tensor_views
