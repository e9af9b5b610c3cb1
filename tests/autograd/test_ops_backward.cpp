// Backward of the non-elementwise ops: sum and mean of expressions (one node each), softmax and
// log_softmax, matmul / mm / bmm with broadcast batch dims, the other reductions (topk, var_mean, std
// and norm where the result is 0); gradcheck in float64 against finite differences, PyTorch's values at
// the points finite differences cannot judge (clamp's bounds, zero spreads), and the graph's shape.
#include <doctest/doctest.h>

#include "kiln/autograd/gradcheck.hpp"
#include "kiln/tensor/indexing.hpp"
#include "kiln/tensor/join.hpp"
#include "kiln/tensor/linalg.hpp"
#include "kiln/tensor/random.hpp"
#include "kiln/tensor/softmax.hpp"
#include "gradcheck_inputs.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_autograd_ops_backward {

using namespace kiln;
using kiln::testing::Inputs;
using kiln::testing::sample;

TEST_CASE("sum and mean of an expression record one node and pass gradcheck") {
  const Tensor<double> a = sample({3, 4}, 1), b = sample({4}, 2);
  SUBCASE("all dims") {
    auto r = autograd::gradcheck([](const Inputs& in) { return sum(in[0] * in[1] + sin(in[0])); }, {a, b});
    INFO(r.message);
    CHECK(r.ok);
    r = autograd::gradcheck([](const Inputs& in) { return mean(exp(in[0] * 0.5) * in[1]); }, {a, b});
    INFO(r.message);
    CHECK(r.ok);
  }
  SUBCASE("over dims, with and without keepdim") {
    for (bool keep : {false, true}) {
      auto r = autograd::gradcheck([keep](const Inputs& in) { return sum(in[0] * in[1], {0}, keep); }, {a, b});
      INFO(r.message);
      CHECK(r.ok);
      r = autograd::gradcheck([keep](const Inputs& in) { return mean(tanh(in[0]) - in[1], -1, keep); }, {a, b});
      INFO(r.message);
      CHECK(r.ok);
    }
  }
  SUBCASE("a transposed view and a 3-d input") {
    const Tensor<double> c = sample({2, 3, 4}, 3);
    const auto r = autograd::gradcheck(
        [](const Inputs& in) { return sum(in[0].transpose(0, 2) * in[0].transpose(0, 2), {1, 2}); }, {c});
    INFO(r.message);
    CHECK(r.ok);
  }
  SUBCASE("one node: the reduction's backward is the expression's") {
    Tensor<double> x = a.clone().requires_grad_(), y = b.clone().requires_grad_();
    const Tensor<double> s = sum(x * y + sin(x));
    REQUIRE(s.grad_fn());
    CHECK(s.grad_fn()->name() == "SumBackward(add(mul(t0, t1), sin(t2)))");
    CHECK(s.grad_fn()->next_edges.size() == 3);
    s.backward();
    // d/dx = y + cos(x); d/dy = sum over rows of x.
    const Tensor<double> gx = x.grad(), gy = y.grad();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        CHECK(gx[i][j].item() == doctest::Approx(b[j].item() + std::cos(a[i][j].item())).epsilon(1e-14));
    for (int64_t j = 0; j < 4; ++j)
      CHECK(gy[j].item() == doctest::Approx(a[0][j].item() + a[1][j].item() + a[2][j].item()).epsilon(1e-14));
    const Tensor<double> m = mean(x * 2.0);
    CHECK(m.grad_fn()->name() == "MeanBackward(mul(t0, 2))");
  }
}

TEST_CASE("softmax and log_softmax backward pass gradcheck along every dim") {
  const Tensor<double> x = sample({2, 3, 4}, 5), w = sample({2, 3, 4}, 6);
  for (int dim = -3; dim < 3; ++dim) {
    // A weighted sum so that the gradient is not the trivial zero of sum(softmax).
    auto r = autograd::gradcheck(
        [dim](const Inputs& in) { return Tensor<double>(softmax(in[0] * 1.5, dim) * in[1]); }, {x, w});
    INFO("softmax dim ", dim, ": ", r.message);
    CHECK(r.ok);
    r = autograd::gradcheck([dim](const Inputs& in) { return Tensor<double>(log_softmax(in[0], dim) * in[1]); },
                            {x, w});
    INFO("log_softmax dim ", dim, ": ", r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("matmul, mm and bmm backward pass gradcheck, with broadcast batch dims and 1-d operands") {
  const auto check_pair = [](const char* what, const Shape& sa, const Shape& sb, auto f) {
    const auto r = autograd::gradcheck(f, {sample(sa, 7), sample(sb, 8)});
    INFO(what, " ", sa, " x ", sb, ": ", r.message);
    CHECK(r.ok);
  };
  check_pair("mm", {3, 4}, {4, 2}, [](const Inputs& in) { return mm(in[0], in[1]); });
  check_pair("mm of a transposed view", {4, 3}, {4, 2}, [](const Inputs& in) { return mm(in[0].t(), in[1]); });
  check_pair("bmm", {2, 3, 4}, {2, 4, 2}, [](const Inputs& in) { return bmm(in[0], in[1]); });
  check_pair("matmul broadcast", {2, 1, 3, 4}, {3, 4, 2}, [](const Inputs& in) { return matmul(in[0], in[1]); });
  // An operand broadcast over the whole batch (its gradient accumulates the batch's products).
  check_pair("matmul shared first operand", {1, 3, 4}, {5, 2, 4, 6}, [](const Inputs& in) { return matmul(in[0], in[1]); });
  check_pair("matmul shared 2-d first operand", {3, 4}, {2, 4, 5}, [](const Inputs& in) { return matmul(in[0], in[1]); });
  check_pair("matmul shared second operand", {2, 3, 3, 4}, {4, 2}, [](const Inputs& in) { return matmul(in[0], in[1]); });
  // A transposed second operand (Linear's x @ w.t()): its gradient is computed in the transposed layout.
  check_pair("matmul x @ w.t()", {3, 4}, {5, 4}, [](const Inputs& in) { return matmul(in[0], in[1].t()); });
  check_pair("matmul 1-d x 2-d", {4}, {4, 3}, [](const Inputs& in) { return matmul(in[0], in[1]); });
  check_pair("matmul 2-d x 1-d", {3, 4}, {4}, [](const Inputs& in) { return matmul(in[0], in[1]); });
  check_pair("dot", {5}, {5}, [](const Inputs& in) { return matmul(in[0], in[1]); });
}

TEST_CASE("a small MLP: gradients of every parameter agree with finite differences") {
  const Tensor<double> x = sample({5, 4}, 9), w1 = sample({4, 6}, 10), b1 = sample({6}, 11), w2 = sample({6, 3}, 12);
  const auto r = autograd::gradcheck(
      [](const Inputs& in) {
        const Tensor<double> h = tanh(matmul(in[0], in[1]) + in[2]);
        return mean(log_softmax(matmul(h, in[3]), 1) * -1.0);
      },
      {x, w1, b1, w2});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("the other reductions pass gradcheck: prod, amax, amin, max/min with dim, var, std, norm, logsumexp, cumsum") {
  const Tensor<double> x = sample({3, 4}, 13);
  const auto check_one = [&](const char* what, auto f, const Tensor<double>& input) {
    const auto r = autograd::gradcheck([f](const Inputs& in) { return Tensor<double>(f(in[0])); }, {input});
    INFO(what, ": ", r.message);
    CHECK(r.ok);
  };
  check_one("prod", [](const Tensor<double>& a) { return prod(a * 0.5 + 1.0); }, x);
  check_one("prod over dim 1", [](const Tensor<double>& a) { return prod(a, 1); }, x);
  // One zero in a row: the gradient at the zero is the product of the others.
  Tensor<double> with_zero = x.clone();
  with_zero.data_ptr()[5] = 0;
  check_one("prod with a zero", [](const Tensor<double>& a) { return prod(a, 1, true); }, with_zero);
  check_one("amax", [](const Tensor<double>& a) { return amax(a, 0); }, x);
  check_one("amin of an expression", [](const Tensor<double>& a) { return amin(a * a, {0, 1}); }, x);
  check_one("max with dim", [](const Tensor<double>& a) { return std::get<0>(max(a, 1)); }, x);
  check_one("min with dim, keepdim", [](const Tensor<double>& a) { return std::get<0>(min(a, 0, true)); }, x);
  check_one("var", [](const Tensor<double>& a) { return var(a, {1}); }, x);
  check_one("std, correction 0", [](const Tensor<double>& a) { return kiln::std(a, {0}, 0.0, true); }, x);
  check_one("norm 2", [](const Tensor<double>& a) { return norm(a); }, x);
  check_one("norm 1 over dim", [](const Tensor<double>& a) { return norm(a, 1, 1); }, x);
  check_one("norm 3", [](const Tensor<double>& a) { return norm(a, 3, {0}); }, x);
  check_one("norm inf", [](const Tensor<double>& a) { return norm(a, std::numeric_limits<double>::infinity()); }, x);
  check_one("logsumexp", [](const Tensor<double>& a) { return logsumexp(a * 2.0, 1); }, x);
  check_one("cumsum", [](const Tensor<double>& a) { return cumsum(a, 1); }, x);
  check_one("cumsum dim 0 of an expression", [](const Tensor<double>& a) { return cumsum(exp(a), 0); }, x);
}

TEST_CASE("cat and stack route each input its slice of the gradient") {
  const Tensor<double> a = sample({2, 3}, 14), b = sample({2, 2}, 15), c = sample({2, 3}, 16);
  auto r = autograd::gradcheck([](const Inputs& in) { return cat({in[0], Tensor<double>(in[1] * 2.0)}, 1); }, {a, b});
  INFO(r.message);
  CHECK(r.ok);
  r = autograd::gradcheck([](const Inputs& in) { return stack({in[0], Tensor<double>(sin(in[1]))}, 1); }, {a, c});
  INFO(r.message);
  CHECK(r.ok);
  Tensor<double> x = a.clone().requires_grad_();
  const Tensor<double> joined = cat({x, x}, 0);
  CHECK(joined.grad_fn()->name() == "CatBackward");
  sum(joined).backward();
  for (double v : x.grad().contiguous().to_vector()) CHECK(v == 2.0);
}

TEST_CASE("unbind: one node stacks the slices' gradients, zeros for a slice that got none") {
  const Tensor<double> a = sample({3, 4, 2}, 18);
  for (int dim : {0, 1, -1}) {
    const auto r = autograd::gradcheck(
        [dim](const Inputs& in) {
          // The base transposed (strided slices); slice 1 unused, the others through different ops.
          const std::vector<Tensor<double>> u = unbind(Tensor<double>(in[0].transpose(0, 2)).transpose(0, 2), dim);
          std::vector<Tensor<double>> used = {Tensor<double>(u[0] * 3.0), Tensor<double>(sin(u.back()))};
          return stack(used, 0);
        },
        {a});
    INFO("dim ", dim, ": ", r.message);
    CHECK(r.ok);
  }
  Tensor<double> x = a.clone().requires_grad_();
  const std::vector<Tensor<double>> rows = unbind(x, 0);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].grad_fn()->name() == "UnbindBackward");
  CHECK(rows[0].grad_fn() == rows[2].grad_fn());
  sum(rows[2] * 2.0).backward();
  const std::vector<double> g = x.grad().contiguous().to_vector();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == (i >= 16 ? 2.0 : 0.0));
}

TEST_CASE("every view passes gradcheck, on contiguous and transposed bases") {
  using indexing::Slice;
  const Tensor<double> x = sample({2, 3, 4}, 17);
  const auto check_view = [&](const char* what, auto f) {
    for (bool transposed : {false, true}) {
      const auto r = autograd::gradcheck(
          [f, transposed](const Inputs& in) {
            // A transposed base makes every view non-contiguous; multiplying by a position-dependent
            // weight makes a wrong routing of the gradient visible.
            const Tensor<double> base = transposed ? Tensor<double>(in[0].transpose(0, 2)).transpose(0, 2) : in[0];
            const Tensor<double> v = f(base);
            return Tensor<double>(v * arange<double>(1, double(v.numel()) + 1).view(v.shape()));
          },
          {x});
      INFO(what, transposed ? " (transposed base)" : "", ": ", r.message);
      CHECK(r.ok);
    }
  };
  check_view("view", [](const Tensor<double>& a) { return a.contiguous().view({6, 4}); });
  check_view("reshape", [](const Tensor<double>& a) { return a.reshape({4, 6}); });
  check_view("permute", [](const Tensor<double>& a) { return a.permute({2, 0, 1}); });
  check_view("transpose", [](const Tensor<double>& a) { return a.transpose(1, 2); });
  check_view("slice with step", [](const Tensor<double>& a) { return a.slice(2, 1, 4, 2); });
  check_view("narrow", [](const Tensor<double>& a) { return a.narrow(1, 1, 2); });
  check_view("select", [](const Tensor<double>& a) { return a.select(1, 2); });
  check_view("unsqueeze", [](const Tensor<double>& a) { return a.unsqueeze(1); });
  check_view("squeeze", [](const Tensor<double>& a) { return a.slice(0, 0, 1).squeeze(0); });
  check_view("expand", [](const Tensor<double>& a) { return a.slice(1, 0, 1).expand({2, 5, 4}); });
  check_view("flatten", [](const Tensor<double>& a) { return a.flatten(1); });
  check_view("contiguous", [](const Tensor<double>& a) { return a.contiguous(); });
  check_view("index", [](const Tensor<double>& a) { return a.index({Slice(), 1, Slice(0, 4, 3)}); });
  check_view("t of a select", [](const Tensor<double>& a) { return a.select(0, 1).t(); });
}

// x.grad() as a vector, each element checked against `expected` (PyTorch's values where the test says so).
void check_grad(const Tensor<double>& x, const std::vector<double>& expected) {
  const std::vector<double> got = x.grad().contiguous().to_vector();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i);
    CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-12));
  }
}

TEST_CASE("topk's values are differentiable: the gradient goes to the selected elements") {
  Tensor<double> x = tensor<double>({1, 5, 3}).requires_grad_();
  const auto [v, i] = topk(x, 1);
  REQUIRE(v.grad_fn());
  CHECK(v.grad_fn()->name() == "TopkBackward");
  sum(Tensor<double>(sum(x) + sum(v))).backward();
  check_grad(x, {1, 2, 1});  // PyTorch's

  // Along dim 1 with a weight per value; a tie (4, 4) sends each value's gradient to its own index.
  Tensor<double> y = tensor<double>({3, 1, 2, 5, 0, 4, 4, -1}).view({2, 4}).requires_grad_();
  const Tensor<double> top = std::get<0>(topk(y, 2, 1));
  sum(Tensor<double>(top * tensor<double>({1, 10, 100, 1000}).view({2, 2}))).backward();
  check_grad(y, {10, 0, 0, 1, 0, 100, 1000, 0});  // PyTorch's

  Tensor<double> s = full<double>({}, 4.0).requires_grad_();
  std::get<0>(topk(s, 1)).backward();
  check_grad(s, {1});  // PyTorch's: a 0-dim input is a line of one

  const Tensor<double> a = sample({3, 4}, 18);
  for (bool largest : {true, false})
    for (int dim : {0, 1}) {
      const auto r = autograd::gradcheck(
          [=](const Inputs& in) { return std::get<0>(topk(in[0].t() * 2.0, 2, dim, largest)); }, {a});
      INFO("largest ", largest, ", dim ", dim, ": ", r.message);
      CHECK(r.ok);
    }
}

TEST_CASE("var_mean and std_mean: both outputs are differentiable") {
  Tensor<double> x = tensor<double>({1, 2, 4}).requires_grad_();
  auto [v, m] = var_mean(x, Dims{0});
  Tensor<double>(sum(x) + v + m).backward();
  check_grad(x, {0, 1, 3});  // PyTorch's: 1 + 1/3 + (x - mean)
  x.zero_grad();
  auto [sd, m2] = std_mean(x, Dims{0});
  Tensor<double>(sum(x) + sd + m2).backward();
  check_grad(x, {0.8968975528613485, 1.2242243882153372, 1.8788780589233143});  // PyTorch's

  const Tensor<double> a = sample({3, 4}, 19), w = sample({3, 1}, 20);
  for (bool take_sqrt : {false, true}) {
    const auto r = autograd::gradcheck(
        [=](const Inputs& in) {
          const auto xw = in[0] * in[1];
          auto [spread, mean_] = take_sqrt ? std_mean(xw, {1}, 0.0, true) : var_mean(xw, {1}, 1.0, true);
          return Tensor<double>(spread * 3.0 + mean_ * mean_);
        },
        {a, w});
    const char* what = take_sqrt ? "std_mean" : "var_mean";
    INFO(what, ": ", r.message);
    CHECK(r.ok);
  }
}

TEST_CASE("std and norm have a zero gradient where the result is 0, and norm where x is 0, as PyTorch") {
  Tensor<double> x = ones<double>({2, 3}).requires_grad_();
  sum(kiln::std(x, {1})).backward();
  check_grad(x, {0, 0, 0, 0, 0, 0});  // PyTorch's (0 / 0 unmasked)
  x.zero_grad();
  kiln::std(x).backward();
  check_grad(x, {0, 0, 0, 0, 0, 0});
  for (double p : {2.0, 3.0, 0.5, -1.0, 1.0, std::numeric_limits<double>::infinity()}) {
    INFO("p = ", p);
    Tensor<double> z = zeros<double>({3}).requires_grad_();
    norm(z, p).backward();
    check_grad(z, {0, 0, 0});  // PyTorch's for every p
  }
  // p < 1: |x|^(p - 1) is inf at x = 0; PyTorch's gradient there is 0.
  Tensor<double> y = tensor<double>({0, 2, -3}).requires_grad_();
  norm(y, 0.5).backward();
  check_grad(y, {0, 2.224744871391589, -1.8164965809277265});  // PyTorch's
}

TEST_CASE("clamp, clamp_min and clamp_max: PyTorch's gradient at the bounds") {
  const auto grad_of = [](auto f, std::vector<double> values) {
    Tensor<double> x = tensor<double>(values).requires_grad_();
    sum(Tensor<double>(f(x))).backward();
    return x;
  };
  // Number bounds: 0 at a bound (maximum and minimum would give 1/2). PyTorch's values.
  const std::vector<double> five{-2, -1, 0, 1, 2}, three{-1, 0, 1};
  check_grad(grad_of([](const auto& x) { return clamp(x, -1.0, 1.0); }, five), {0, 0, 1, 0, 0});
  check_grad(grad_of([](const auto& x) { return clamp(x, 1.0, -1.0); }, five), {0, 0, 0, 0, 0});
  check_grad(grad_of([](const auto& x) { return clamp(x, 1.0, 1.0); }, five), {0, 0, 0, 0, 0});
  check_grad(grad_of([](const auto& x) { return clamp_min(x, 0.0); }, three), {0, 0, 1});
  check_grad(grad_of([](const auto& x) { return clamp_max(x, 0.0); }, three), {1, 0, 0});
  {
    const Tensor<double> c = grad_of([](const auto& x) { return clamp(x, -1.0, 1.0); }, {-3, 0.5, 3});
    CHECK(Tensor<double>(clamp(c, -1.0, 1.0)).to_vector() == std::vector<double>{-1, 0.5, 1});
  }
  // Tensor bounds: a tie with one bound splits the gradient, as maximum / minimum; lo == hi does not.
  Tensor<double> b = zeros<double>({3}).requires_grad_();
  Tensor<double> x = tensor<double>(three).requires_grad_();
  sum(Tensor<double>(clamp_min(x, b))).backward();
  check_grad(x, {0, 0.5, 1});  // PyTorch's
  check_grad(b, {1, 0.5, 0});
  x.zero_grad();
  b.zero_grad();
  sum(Tensor<double>(clamp_max(x, b))).backward();
  check_grad(x, {1, 0.5, 0});  // PyTorch's
  check_grad(b, {0, 0.5, 1});
  // Every (x, lo, hi) in {0, 1, 2}^3, x the slowest; PyTorch's gradients.
  std::vector<double> xs, los, his;
  for (double a : {0, 1, 2})
    for (double l : {0, 1, 2})
      for (double h : {0, 1, 2}) {
        xs.push_back(a);
        los.push_back(l);
        his.push_back(h);
      }
  Tensor<double> tx = tensor<double>(xs).requires_grad_(), tl = tensor<double>(los).requires_grad_(),
                 th = tensor<double>(his).requires_grad_();
  const Tensor<double> clamped = clamp(tx, tl, th);
  for (size_t i = 0; i < xs.size(); ++i)
    CHECK(clamped[int64_t(i)].item() == std::min(std::max(xs[i], los[i]), his[i]));
  sum(clamped).backward();
  check_grad(tx, {1, .5, .5, 0, 0, 0, 0, 0, 0, 0, .5, 1, 0, 1, .5, 0, 0, 0, 0, 0, .5, 0, 0, .5, 0, 0, 1});
  check_grad(tl, {0, .5, .5, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, .5, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  check_grad(th, {0, 0, 0, 1, 0, 0, 1, 1, 0, 1, .5, 0, 1, 0, 0, 1, 1, 0, 1, 1, .5, 1, 1, .5, 1, 1, 0});
}

TEST_CASE("maximum, minimum and clamp at NaN and at ties: PyTorch's gradients") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto grads = [](auto f, const std::vector<std::vector<double>>& values) {
    std::vector<Tensor<double>> in;
    for (const auto& v : values) in.push_back(tensor<double>(v).requires_grad_());
    sum(Tensor<double>(f(in))).backward();
    return in;
  };
  // maximum / minimum: every input gets g where either is NaN, half of it at a tie.
  const std::vector<double> a{nan, 1, 2, 3, nan}, b{1, nan, 2, 1, nan};
  auto mx = grads([](const auto& t) { return maximum(t[0], t[1]); }, {a, b});
  check_grad(mx[0], {1, 1, .5, 1, 1});  // PyTorch 2.15's
  check_grad(mx[1], {1, 1, .5, 0, 1});
  auto mn = grads([](const auto& t) { return minimum(t[0], t[1]); }, {a, b});
  check_grad(mn[0], {1, 1, .5, 0, 1});
  check_grad(mn[1], {1, 1, .5, 1, 1});
  // clamp_min / clamp_max with a tensor bound are maximum / minimum.
  const std::vector<double> x{-1, 0, 1, nan, 1}, bound{0, 0, 0, 0, nan};
  auto cmin = grads([](const auto& t) { return clamp_min(t[0], t[1]); }, {x, bound});
  check_grad(cmin[0], {0, .5, 1, 1, 1});
  check_grad(cmin[1], {1, .5, 0, 1, 1});
  auto cmax = grads([](const auto& t) { return clamp_max(t[0], t[1]); }, {x, bound});
  check_grad(cmax[0], {1, .5, 0, 1, 1});
  check_grad(cmax[1], {0, .5, 1, 1, 1});
  // Number bounds: no gradient at NaN.
  auto cn = grads([](const auto& t) { return clamp(t[0], -1.0, 1.0); }, {{nan, 0.5}});
  check_grad(cn[0], {0, 1});
}

}  // namespace test_autograd_ops_backward
