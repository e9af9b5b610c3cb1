// autograd::grad and custom Functions.
#include <doctest/doctest.h>

#include <functional>

#include "kiln/autograd/function.hpp"
#include "kiln/autograd/gradcheck.hpp"
#include "kiln/tensor/random.hpp"
#include "kiln/tensor/reduce.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_autograd_api {

using namespace kiln;

namespace {

// y = x^2 * k, with k a non-tensor argument saved in saved_data.
struct ScaledSquare : autograd::Function<ScaledSquare> {
  static Tensor<double> forward(autograd::AutogradContext* ctx, const Tensor<double>& x, double k) {
    ctx->save_for_backward<double>({x});
    ctx->saved_data["k"] = k;
    return x * x * k;
  }
  static std::vector<Tensor<double>> backward(autograd::AutogradContext* ctx, std::vector<Tensor<double>> g) {
    const Tensor<double> x = ctx->get_saved_variables<double>()[0];
    const double k = std::any_cast<double>(ctx->saved_data["k"]);
    return {g[0] * x * (2 * k), Tensor<double>()};
  }
};

// Two outputs (sum and difference) of two inputs.
struct SumDiff : autograd::Function<SumDiff> {
  static std::vector<Tensor<double>> forward(autograd::AutogradContext*, const Tensor<double>& a,
                                             const Tensor<double>& b) {
    return {a + b, a - b};
  }
  static std::vector<Tensor<double>> backward(autograd::AutogradContext*, std::vector<Tensor<double>> g) {
    return {g[0] + g[1], g[0] - g[1]};
  }
};

Tensor<double> sample(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return Tensor<double>(randn<double>(shape, &gen));
}

}  // namespace

TEST_CASE("autograd::grad returns gradients without touching .grad") {
  Tensor<double> x = sample({4}, 1).requires_grad_(), w = sample({4}, 2).requires_grad_();
  const Tensor<double> y = sum(x * w + exp(x));
  const auto g = autograd::grad<double>({y}, {x, w}, {}, /*retain_graph=*/true);
  REQUIRE(g.size() == 2);
  for (int64_t i = 0; i < 4; ++i) {
    CHECK(g[0][i].item() == doctest::Approx(w[i].item() + std::exp(x[i].item())).epsilon(1e-14));
    CHECK(g[1][i].item() == doctest::Approx(x[i].item()).epsilon(1e-14));
  }
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(w.grad().defined());
  // A non-leaf input: the gradient with respect to an intermediate.
  const Tensor<double> h = x * 3.0;
  const Tensor<double> z = sum(h * h);
  const auto gh = autograd::grad<double>({z}, {h});
  for (int64_t i = 0; i < 4; ++i) CHECK(gh[0][i].item() == doctest::Approx(2 * 3 * x[i].item()).epsilon(1e-14));
  // Unused inputs throw unless allowed.
  const Tensor<double> u = sum(x * 2.0);
  CHECK_THROWS_WITH_AS(autograd::grad<double>({u}, {w}, {}, true), doctest::Contains("was not used"),
                       std::logic_error);
  const auto unused = autograd::grad<double>({u}, {x, w}, {}, false, /*allow_unused=*/true);
  CHECK(unused[0].defined());
  CHECK_FALSE(unused[1].defined());
}

TEST_CASE("the engine orders a graph of many nodes whose gradients meet from many paths") {
  // y_0 = x, y_{i+1} = 1.01 y_i + 0.01 x: one node per step (more than the engine scans before it indexes), each
  // with an edge to the one before and one to x, so x's accumulator waits for n + 1 gradients.
  // dy_n/dx = 2 * 1.01^n - 1.
  for (const int n : {3, 16, 17, 60}) {
    Tensor<double> x = sample({5}, 3).requires_grad_();
    Tensor<double> y = x;
    for (int i = 0; i < n; ++i) y = Tensor<double>(y * 1.01 + x * 0.01);
    sum(y).backward();
    const double expected = 2 * std::pow(1.01, n) - 1;
    for (int64_t i = 0; i < 5; ++i) CHECK(x.grad()[i].item() == doctest::Approx(expected).epsilon(1e-13));
  }
}

TEST_CASE("a custom Function records one node whose backward is the user's") {
  Tensor<double> x = sample({3}, 3).requires_grad_();
  const Tensor<double> y = ScaledSquare::apply(x, 2.5);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->name() == "CppNode");
  for (int64_t i = 0; i < 3; ++i) CHECK(y[i].item() == doctest::Approx(x[i].item() * x[i].item() * 2.5));
  sum(y).backward();
  for (int64_t i = 0; i < 3; ++i) CHECK(x.grad()[i].item() == doctest::Approx(5 * x[i].item()).epsilon(1e-14));

  // It composes with fused nodes, and gradcheck agrees.
  const auto r = autograd::gradcheck(
      [](const std::vector<Tensor<double>>& in) { return Tensor<double>(sin(ScaledSquare::apply(in[0] * 1.5, 0.5))); },
      {sample({5}, 4)});
  INFO(r.message);
  CHECK(r.ok);

  // Two outputs; a gradient that reaches only one of them arrives as zeros for the other.
  Tensor<double> a = sample({2}, 5).requires_grad_(), b = sample({2}, 6).requires_grad_();
  const auto outs = SumDiff::apply(a, b);
  REQUIRE(outs.size() == 2);
  sum(outs[1] * 3.0).backward();
  for (int64_t i = 0; i < 2; ++i) {
    CHECK(a.grad()[i].item() == doctest::Approx(3.0));
    CHECK(b.grad()[i].item() == doctest::Approx(-3.0));
  }
  // Without requires_grad nothing is recorded.
  const Tensor<double> plain = ScaledSquare::apply(sample({2}, 7), 1.0);
  CHECK_FALSE(plain.grad_fn());
}

TEST_CASE("a custom Function's saved tensor modified in place makes backward throw") {
  Tensor<double> x = sample({3}, 8).requires_grad_();
  Tensor<double> h = x * 1.0;
  const Tensor<double> y = ScaledSquare::apply(h, 1.0);
  {
    NoGradGuard no_grad;
    h += 1.0;
  }
  CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("modified in place"), StaleExpressionError);
}

TEST_CASE("a 10-op chain on 4M floats: one node, and forward + backward allocate only output, gradients, incoming gradient") {
  const int64_t n = 4 << 20;
  Tensor<float> x = rand<float>({n}).requires_grad_(), w = rand<float>({n}).requires_grad_();
  const Tensor<float> incoming = ones<float>({n});
  reset_peak_memory_stats();  // (the peak is the process's: an earlier test's larger tensors would count)
  const MemoryStats before = memory_stats();
  // mul, sin, add, mul, tanh, sub, exp, mul, add, sigmoid
  const Tensor<float> y = sigmoid(exp(tanh(sin(x * w) + x) * 0.5f - w) * x + 1.0f);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->next_edges.size() == 5);  // leaves x, w, x, w, x: one node, an edge per leaf
  for (const auto& edge : y.grad_fn()->next_edges) CHECK(edge.fn->name() == "AccumulateGrad");
  y.backward(incoming);
  const MemoryStats after = memory_stats();
  // The output and one gradient buffer per tensor (x's three leaves share one, w's two another),
  // nothing else: no intermediates, saved or not. (The incoming gradient was allocated before.)
  CHECK(after.allocations - before.allocations == 1 + 2);
  CHECK(after.peak_bytes_in_use - before.bytes_in_use <= uint64_t(3 * n * 4 + (1 << 20)));
  REQUIRE(x.grad().defined());
  REQUIRE(w.grad().defined());
  // Spot-check against the chain rule in double at a few elements.
  for (int64_t i : {int64_t(0), n / 3, n - 1}) {
    const double xv = x[i].item(), wv = w[i].item();
    const double u = std::sin(xv * wv) + xv, t = std::tanh(u), e = std::exp(t * 0.5 - wv), v = e * xv + 1.0;
    const double s = 1 / (1 + std::exp(-v)), ds = s * (1 - s);
    const double dv_dt = e * 0.5 * xv, dt_du = 1 - t * t;
    const double dx = ds * (dv_dt * dt_du * (std::cos(xv * wv) * wv + 1) + e);
    const double dw = ds * (dv_dt * dt_du * std::cos(xv * wv) * xv - e * xv);
    CHECK(x.grad()[i].item() == doctest::Approx(dx).epsilon(1e-4));
    CHECK(w.grad()[i].item() == doctest::Approx(dw).epsilon(1e-4));
  }
}

TEST_CASE("anomaly detection names the node and its expression when backward makes a NaN") {
  Tensor<double> x = full<double>({3}, -1.0).requires_grad_();
  const Tensor<double> y = sqrt(x * 0.0 + 0.0);  // d sqrt at 0 is inf
  {
    autograd::DetectAnomalyGuard guard;
    CHECK_THROWS_WITH_AS(sum(y).backward(), doctest::Contains("FusedBackward(sqrt(add(mul(t0, 0), 0)))"),
                         std::runtime_error);
  }
  // Without the guard the same backward runs and produces the non-finite values.
  const Tensor<double> y2 = sqrt(x * 0.0 + 0.0);
  sum(y2).backward();
  CHECK_FALSE(std::isfinite(x.grad()[0].item()));
}

TEST_CASE("sum_to_shape sums a broadcast gradient over the leading and the size-1 dims, contiguous or not") {
  const Tensor<double> g = randn<double>({2, 3, 4, 5});
  const std::vector<Shape> targets{{1, 3, 1, 1}, {3, 1, 5}, {5}, {4, 1}, {}, {2, 1, 4, 1}, {1, 1, 1, 1}, {3, 4, 5}};
  for (const Shape& target : targets)
    for (bool transposed : {false, true}) {
      // A non-contiguous gradient with the same values: the transpose of a transposed copy.
      const Tensor<double> grad = transposed ? g.transpose(1, 3).contiguous().transpose(1, 3) : g;
      const auto summed = Tensor<double>(autograd::sum_to_shape(grad.impl_ptr(), target));
      CHECK(summed.shape() == target);
      const int lead = 4 - int(target.size());
      Tensor<double> expected = zeros<double>(target);
      for (int64_t a = 0; a < 2; ++a)
        for (int64_t b = 0; b < 3; ++b)
          for (int64_t c = 0; c < 4; ++c)
            for (int64_t d = 0; d < 5; ++d) {
              const int64_t idx[4] = {a, b, c, d};
              int64_t flat = 0;
              for (int i = 0; i < int(target.size()); ++i) flat = flat * target[i] + (target[i] == 1 ? 0 : idx[i + lead]);
              expected.data_ptr()[flat] += g[a][b][c][d].item();
            }
      for (int64_t i = 0; i < expected.numel(); ++i)
        CHECK(summed.contiguous().data_ptr()[i] == doctest::Approx(expected.data_ptr()[i]).epsilon(1e-12));
    }
  CHECK_THROWS_AS(autograd::sum_to_shape(g.impl_ptr(), {2, 4, 5}), ShapeError);
}

TEST_CASE("a reshape passes its gradient through without a copy, and accumulation never writes into a shared one") {
  Tensor<float> x = randn<float>({2, 3}).requires_grad_();
  // The add's gradient reaches x twice: directly and through two reshapes that hand it on as a view.
  Tensor<float> z = Tensor<float>(x.reshape({3, 2}).reshape({2, 3}) + x);
  const Tensor<float> g = full<float>({2, 3}, 1.5f);
  z.backward(g, /*retain_graph=*/true);
  for (int64_t i = 0; i < 6; ++i) CHECK(x.grad().contiguous().data_ptr()[i] == 3.0f);
  z.backward(g);
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(x.grad().contiguous().data_ptr()[i] == 6.0f);
    CHECK(g.data_ptr()[i] == 1.5f);  // the caller's gradient is untouched
  }
}

TEST_CASE("the gradient of a permuted or transposed whole tensor is laid back out in the base's order") {
  Tensor<double> x = randn<double>({2, 3, 4}).requires_grad_();
  const Tensor<double> w = randn<double>({4, 2, 3});
  sum(x.permute({2, 0, 1}) * w).backward();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c) CHECK(x.grad()[a][b][c].item() == w[c][a][b].item());
  Tensor<double> m = randn<double>({3, 5}).requires_grad_();
  const Tensor<double> v = randn<double>({5, 3});
  sum(m.t() * v * 2.0).backward();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) CHECK(m.grad()[i][j].item() == 2 * v[j][i].item());
}

// Two elements of an expanded tensor share one address: a view of it must route each gradient to its own element,
// not to the memory they share (which counted every gradient once per copy). Expected values: PyTorch 2.15 on the
// same inputs (sum(view * arange) for a = [1, 2, 3]).
TEST_CASE("views of an expanded tensor send each element's gradient to that element") {
  struct Case {
    const char* name;
    std::function<Tensor<float>(const Tensor<float>&)> view;
    std::vector<float> expect;
  };
  const std::vector<Case> cases = {
      {"expand, unsqueeze", [](const Tensor<float>& a) { return a.unsqueeze(0).expand({4, 3}).unsqueeze(-1); }, {18, 22, 26}},
      {"expand, t", [](const Tensor<float>& a) { return a.unsqueeze(0).expand({4, 3}).t(); }, {6, 22, 38}},
      {"expand, narrow", [](const Tensor<float>& a) { return a.unsqueeze(0).expand({4, 3}).narrow(0, 0, 2); }, {3, 5, 7}},
      {"expand, select", [](const Tensor<float>& a) { return a.unsqueeze(0).expand({4, 3}).select(0, 1); }, {0, 1, 2}},
      {"expand, view", [](const Tensor<float>& a) { return a.view({1, 3}).expand({4, 3}).view({4, 3, 1}); }, {18, 22, 26}},
      {"expand, expand", [](const Tensor<float>& a) { return a.view({1, 3}).expand({4, 3}).unsqueeze(0).expand({2, 4, 3}); },
       {84, 92, 100}},
      {"expand twice", [](const Tensor<float>& a) { return a.view({3, 1}).expand({3, 5}).unsqueeze(1).expand({3, 2, 5}); },
       {45, 145, 245}},
      {"expand, permute, strided slice",
       [](const Tensor<float>& a) { return a.view({3, 1}).expand({3, 4}).permute({1, 0}).slice(0, 1, 4, 2); }, {3, 5, 7}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Tensor<float> a = tensor<float>({1, 2, 3}).requires_grad_();
    const Tensor<float> v = c.view(a);
    sum(v * arange<float>(0, double(v.numel())).view(v.shape())).backward();
    CHECK(a.grad().to_vector() == c.expect);
  }
  // The expanded tensor's own gradient, seen by a hook, is per element too (PyTorch: e.grad = arange(12).view(4, 3)).
  Tensor<float> a = tensor<float>({1, 2, 3}).requires_grad_();
  const Tensor<float> e = a.unsqueeze(0).expand({4, 3});
  std::vector<float> seen;
  e.register_hook([&](const Tensor<float>& g) { seen = g.contiguous().to_vector(); });
  sum(e.unsqueeze(-1) * arange<float>(0, 12).view({4, 3, 1})).backward();
  std::vector<float> expect(12);
  for (int i = 0; i < 12; ++i) expect[size_t(i)] = float(i);
  CHECK(seen == expect);
}

TEST_CASE("InferenceMode: no graph, inference tensors without version counting, and their limits outside it") {
  Tensor<double> w = sample({3}, 9).requires_grad_();
  Tensor<double> normal = sample({3}, 10);
  Tensor<double> y;
  {
    InferenceMode guard;
    CHECK(InferenceMode::is_enabled());
    CHECK_FALSE(GradMode::is_enabled());
    y = w * 2.0;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_inference());
    y += 1.0;  // in place inside the scope: allowed, and no version is counted
    CHECK(y.impl().version() == 0);
    const uint64_t before = normal.impl().version();
    normal += 1.0;  // a normal tensor keeps counting
    CHECK(normal.impl().version() == before + 1);
    {
      InferenceMode off(false);  // grad mode and normal tensors again
      CHECK(GradMode::is_enabled());
      CHECK_FALSE(Tensor<double>(w * 1.0).is_inference());
    }
    CHECK_FALSE(GradMode::is_enabled());
  }
  CHECK_FALSE(InferenceMode::is_enabled());
  CHECK(GradMode::is_enabled());
  CHECK_FALSE(normal.is_inference());
  CHECK(y[1].item() == doctest::Approx(2 * w[1].item() + 1));
  // Outside the scope: readable and usable where nothing is saved, but no in-place update, no
  // requires_grad, and no place in a graph that would save it.
  {
    NoGradGuard no_grad;
    CHECK(sum(y * 2.0).item() == doctest::Approx(2 * sum(y).item()));
  }
  CHECK_THROWS_WITH_AS(y += 1.0, doctest::Contains("inference tensor"), std::logic_error);
  CHECK_THROWS_WITH_AS(y.requires_grad_(), doctest::Contains("InferenceMode"), std::logic_error);
  CHECK_THROWS_WITH_AS((void)Tensor<double>(y * w), doctest::Contains("cannot be saved for backward"), std::logic_error);
  const Tensor<double> copy = y.clone();  // the way back to a normal tensor
  CHECK_FALSE(copy.is_inference());
  sum(copy * w).backward();
  CHECK(w.grad()[2].item() == doctest::Approx(y[2].item()));
}

TEST_CASE("an untracked evaluation (backward formulas) computes without a graph and refuses where one is needed") {
  Tensor<double> x = sample({5}, 3).requires_grad_();
  // In grad mode a leaf that requires grad would need a node: refused rather than silently unrecorded.
  CHECK_THROWS_WITH_AS((void)kiln::detail::untracked(x * 2.0), doctest::Contains("requires grad"), std::logic_error);
  NoGradGuard no_grad;
  const Tensor<double> y = kiln::detail::untracked(x * 2.0 + 1.0);
  CHECK_FALSE(y.requires_grad());
  for (int i = 0; i < 5; ++i) CHECK(y[i].item() == doctest::Approx(2 * x[i].item() + 1));
  CHECK(&kiln::detail::untracked(y) == &y);  // a tensor is already evaluated
}

}  // namespace test_autograd_api
