// index_select, gather, scatter_add, masked_fill: values against hand-written loops (as torch's
// definitions), errors, and their backward by gradcheck (repeated indices accumulate).
#include <doctest/doctest.h>

#include "kiln/autograd/gradcheck.hpp"
#include "kiln/tensor/gather.hpp"
#include "kiln/tensor/random.hpp"
#include "kiln/tensor/reduce.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_gather {

using namespace kiln;

namespace {
Tensor<double> sample(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor<double>(randn<double>(shape, &gen));
}
Tensor<int64_t> indices(std::initializer_list<int64_t> values, const Shape& shape) {
  Tensor<int64_t> t = empty<int64_t>(shape);
  int64_t k = 0;
  for (int64_t v : values) t.data_ptr()[k++] = v;
  return t;
}
using Inputs = std::vector<Tensor<double>>;
}  // namespace

TEST_CASE("gather, index_select and scatter_add follow torch's definitions") {
  const Tensor<double> x = sample({3, 4}, 1);
  const Tensor<int64_t> idx = indices({2, 0, 1, 2, 0, 0, 2, 1}, {2, 4});
  // gather dim 0: out[i][j] = x[idx[i][j]][j]
  const Tensor<double> g0 = gather(x, 0, idx);
  CHECK(g0.shape() == Shape{2, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) CHECK(g0[i][j].item() == x[idx[i][j].item()][j].item());
  // gather dim 1 with a narrower index.
  const Tensor<int64_t> idx1 = indices({3, 3, 0, 1, 2, 2}, {3, 2});
  const Tensor<double> g1 = gather(x, 1, idx1);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 2; ++j) CHECK(g1[i][j].item() == x[i][idx1[i][j].item()].item());
  // index_select on a transposed view.
  const Tensor<double> xt = x.t();
  const Tensor<double> s = index_select(xt, 1, indices({2, 2, 0}, {3}));
  CHECK(s.shape() == Shape{4, 3});
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(s[i][0].item() == x[2][i].item());
    CHECK(s[i][1].item() == x[2][i].item());
    CHECK(s[i][2].item() == x[0][i].item());
  }
  // scatter_add: repeated indices accumulate; self is not modified.
  const Tensor<double> base = zeros<double>({3, 4});
  const Tensor<double> src = ones<double>({2, 4});
  const Tensor<double> sa = scatter_add(base, 0, idx, src);
  for (int64_t j = 0; j < 4; ++j) {
    double col = 0;
    for (int64_t i = 0; i < 3; ++i) col += sa[i][j].item();
    CHECK(col == 2.0);
  }
  CHECK(sa[0][1].item() == 2.0);  // idx[0][1] = 0 and idx[1][1] = 0
  CHECK(sum(base).item() == 0.0);
}

TEST_CASE("index ops reject bad indices and shapes with clear errors") {
  const Tensor<double> x = sample({3, 4}, 2);
  CHECK_THROWS_WITH_AS(gather(x, 0, indices({3}, {1, 1})), "gather: index 3 is out of range for dim 0 of size 3",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(index_select(x, 1, indices({-5}, {1})),
                       "index_select: index -5 is out of range for dim 1 of size 4", std::out_of_range);
  CHECK_THROWS_AS(gather(x, 0, indices({0, 0, 0, 0, 0}, {1, 5})), ShapeError);
  CHECK_THROWS_AS(gather(x, 0, indices({0, 0}, {2})), ShapeError);
  CHECK_THROWS_AS(index_select(x, 0, indices({0, 0, 0, 0}, {2, 2})), ShapeError);
  CHECK_THROWS_AS(masked_fill(x, Tensor<bool>(zeros<bool>({4, 1})), 0.0), ShapeError);
}

TEST_CASE("negative index values are out of range, as torch (not counted from the end)") {
  // torch.gather(torch.arange(6.).view(2, 3), 1, torch.tensor([[-1, 0]])) raises "index -1 is out of bounds for
  // dimension 1 with size 3"; index_select and nn.functional.embedding raise for -1 too.
  const Tensor<double> x = arange<double>(0, 6).view({2, 3});
  CHECK_THROWS_WITH_AS(gather(x, 1, indices({-1, 0}, {1, 2})), "gather: index -1 is out of range for dim 1 of size 3",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(index_select(x, 1, indices({0, -1}, {2})),
                       "index_select: index -1 is out of range for dim 1 of size 3", std::out_of_range);
  CHECK_THROWS_WITH_AS(index_select(x, -1, indices({-3}, {1})),  // a negative dim still wraps
                       "index_select: index -3 is out of range for dim 1 of size 3", std::out_of_range);
  CHECK_THROWS_WITH_AS(scatter_add(x, 0, indices({-2}, {1, 1}), ones<double>({1, 1})),
                       "scatter_add: index -2 is out of range for dim 0 of size 2", std::out_of_range);
  CHECK(gather(x, -1, indices({2, 0}, {1, 2})).to_vector() == std::vector<double>{2, 0});
}

TEST_CASE("scatter_add's index is at most src's size along every dim, self's along the others") {
  // src is a view of 2 elements of a larger buffer: an index of 4 would read past it. torch raises "Expected
  // index [4] to be no larger than self [5] apart from dimension 0 and to be no larger size than src [2]".
  const Tensor<double> src = arange<double>(10, 20).narrow(0, 0, 2);
  CHECK_THROWS_WITH_AS(scatter_add(zeros<double>({5}), 0, indices({0, 1, 2, 3}, {4}), src),
                       "scatter_add: index of shape [4] is larger than src of shape [2] along dim 0", ShapeError);
  CHECK_THROWS_WITH_AS(scatter_add(zeros<double>({2, 2}), 0, indices({0, 1, 1}, {1, 3}), ones<double>({1, 3})),
                       "scatter_add: index of shape [1, 3] is larger than self of shape [2, 2] along dim 1",
                       ShapeError);
  CHECK_THROWS_AS(scatter_add(zeros<double>({2, 2}), 0, indices({0, 1}, {2}), ones<double>({2})), ShapeError);
  // Along dim the index may be longer than self: torch.scatter_add(torch.zeros(2, 2), 0,
  // torch.tensor([[0], [1], [1]]), torch.ones(3, 1)) is [[1, 0], [2, 0]].
  const Tensor<double> r = scatter_add(zeros<double>({2, 2}), 0, indices({0, 1, 1}, {3, 1}), ones<double>({3, 1}));
  CHECK(r.to_vector() == std::vector<double>{1, 0, 2, 0});
  // A src larger than the index: only the index's part is read (torch gives [10, 11, 0, 0, 0]).
  CHECK(scatter_add(zeros<double>({5}), 0, indices({0, 1}, {2}), arange<double>(10, 20)).to_vector() ==
        std::vector<double>{10, 11, 0, 0, 0});
}

TEST_CASE("0-dim tensors count as size 1 along dim 0 / -1, as torch") {
  // PyTorch 2.15: s = torch.tensor(4.)
  const Tensor<double> s = full<double>({}, 4.0), pair = tensor<double>({4, 5});
  const Tensor<int64_t> i0 = full<int64_t>({}, 0), i1 = full<int64_t>({}, 1);
  Tensor<double> g = gather(s, 0, i0);  // tensor(4.)
  CHECK(g.dim() == 0);
  CHECK(g.item() == 4.0);
  CHECK(gather(s, -1, i0).item() == 4.0);
  g = gather(s, 0, indices({0, 0}, {2}));  // tensor([4., 4.])
  CHECK(g.shape() == Shape{2});
  CHECK(g.to_vector() == std::vector<double>{4, 4});
  g = gather(pair, 0, i1);  // tensor(5.)
  CHECK(g.dim() == 0);
  CHECK(g.item() == 5.0);
  CHECK_THROWS_WITH_AS(gather(s, 0, i1), "gather: index 1 is out of range for dim 0 of size 1", std::out_of_range);
  CHECK_THROWS_AS(gather(s, 1, i0), std::out_of_range);  // dim 1 of a 0-dim tensor

  g = index_select(s, 0, indices({0}, {1}));  // tensor(4.)
  CHECK(g.dim() == 0);
  CHECK(g.item() == 4.0);
  CHECK(index_select(s, 0, i0).dim() == 0);
  g = index_select(pair, 0, i1);  // tensor([5.])
  CHECK(g.shape() == Shape{1});
  CHECK(g.item() == 5.0);
  // torch: "Index to scalar can have only 1 value, got 2 value(s)"
  CHECK_THROWS_WITH_AS(index_select(s, 0, indices({0, 0}, {2})),
                       "index_select: an index into a 0-dim tensor must have one value, got 2", ShapeError);

  Tensor<double> a = scatter_add(s, 0, i0, full<double>({}, 1.0));  // tensor(5.)
  CHECK(a.dim() == 0);
  CHECK(a.item() == 5.0);
  a = scatter_add(s, 0, indices({0, 0}, {2}), tensor<double>({1, 2}));  // tensor(7.)
  CHECK(a.dim() == 0);
  CHECK(a.item() == 7.0);
  CHECK(scatter_add(zeros<double>({2}), 0, i1, full<double>({}, 3.0)).to_vector() == std::vector<double>{0, 3});

  // Gradients keep the 0-dim shapes: torch gives x.grad = tensor(1.) and, for scatter_add, 1 and 1.
  Tensor<double> x = full<double>({}, 4.0).requires_grad_(), y = full<double>({}, 2.0).requires_grad_();
  gather(x, 0, i0).backward();
  CHECK(x.grad().dim() == 0);
  CHECK(x.grad().item() == 1.0);
  x.zero_grad();
  scatter_add(x, 0, i0, y).backward();
  CHECK(x.grad().dim() == 0);
  CHECK(x.grad().item() == 1.0);
  CHECK(y.grad().dim() == 0);
  CHECK(y.grad().item() == 1.0);
}

TEST_CASE("masked_fill is an elementwise where") {
  const Tensor<double> x = sample({2, 3}, 3);
  const Tensor<bool> mask = x > 0.0;
  const Tensor<double> y = masked_fill(x, mask, -7.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) CHECK(y[i][j].item() == (x[i][j].item() > 0 ? -7.0 : x[i][j].item()));
}

TEST_CASE("index ops pass gradcheck; repeated indices accumulate gradients") {
  const Tensor<double> x = sample({3, 4}, 4), src = sample({2, 4}, 5);
  const Tensor<int64_t> idx = indices({2, 0, 1, 2, 0, 0, 2, 1}, {2, 4});
  const Tensor<int64_t> rows = indices({1, 1, 0, 2, 1}, {5});
  auto r = autograd::gradcheck([idx](const Inputs& in) { return gather(Tensor<double>(in[0] * 2.0), 0, idx); }, {x});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([rows](const Inputs& in) { return index_select(in[0], 0, rows); }, {x});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([rows](const Inputs& in) { return index_select(in[0].t(), 1, rows); }, {x});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([idx](const Inputs& in) { return scatter_add(in[0], 0, idx, in[1]); }, {x, src});
  INFO(r.message);
  CHECK(r.ok);
  const Tensor<bool> mask = x > 0.0;
  r = autograd::gradcheck([mask](const Inputs& in) { return masked_fill(in[0], mask, 0.5); }, {x});
  INFO(r.message);
  CHECK(r.ok);
  // An embedding lookup: row 1 is picked three times and gets three times the gradient.
  Tensor<double> table = x.clone().requires_grad_();
  sum(index_select(table, 0, rows)).backward();
  CHECK(table.grad()[1][0].item() == 3.0);
  CHECK(table.grad()[0][3].item() == 1.0);
  CHECK(table.grad()[2][2].item() == 1.0);
}

}  // namespace test_tensor_gather
