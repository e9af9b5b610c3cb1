// The fused backward of elementwise expressions: every differentiable op of the registry through
// gradcheck (float64, finite differences), with broadcasting and non-contiguous inputs; one node
// per expression; repeated leaves; the autograd API.
#include <doctest/doctest.h>

#include "../ops/op_test_util.hpp"
#include "kiln/autograd/gradcheck.hpp"
#include "kiln/tensor/random.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_autograd_fused {

using namespace kiln;
using namespace kiln::test;

namespace {

// Values inside an op's domain and away from kinks (0, integers, halves), so finite differences hold.
Tensor<double> sample(const ops::OpInfo& info, const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  const double lo = info.lo > 0 ? std::max(info.lo, 0.2) : std::max(info.lo, -3.0);
  const double hi = std::min(info.hi, 3.0);
  Tensor<double> u = rand<double>(shape, &gen);
  Tensor<double> x = u * (hi - lo) + lo;
  double* p = x.data_ptr();
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::abs(p[i] * 2 - std::round(p[i] * 2)) < 0.05) p[i] += 0.1;
  return x;
}

// x^2 with a derivative that is off by 1%.
struct Wrong : ops::FloatOp {
  static constexpr std::string_view name = "wrong";
  static constexpr int arity = 1;
  static constexpr ops::OpInfo info{.cost = 1};
  template <class T> static T scalar(T x) { return x * x; }
  template <class L> static constexpr bool simd_for = false;
  static constexpr std::string_view cuda = "($0 * $0)";
  static auto grad(auto x, auto, auto g) { return g * x * 2.02; }
};

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("gradcheck of each unary op through the fused backward", Op, unary_gradcheck) {
  if constexpr (ops::is_differentiable<Op>() && std::is_base_of_v<ops::SameTypeOp, Op>) {
    // Broadcast against a column, read through a transposed view: the gradient is summed back.
    const Tensor<double> x = sample(Op::info, {3, 4}, 1);
    const Tensor<double> w = sample({.lo = 0.5, .hi = 2}, {4, 1}, 2);
    const auto result = autograd::gradcheck(
        [](const std::vector<Tensor<double>>& in) { return Tensor<double>(map<Op>(in[0].t()) * in[1] + in[1]); },
        {x, w});
    INFO(Op::name, ": ", result.message);
    CHECK(result.ok);
  }
}
TEST_CASE_TEMPLATE_APPLY(unary_gradcheck, UnaryOps);

TEST_CASE_TEMPLATE_DEFINE("gradcheck of each binary op through the fused backward", Op, binary_gradcheck) {
  if constexpr (ops::is_differentiable<Op>()) {
    const Tensor<double> a = sample(Op::info, {2, 3}, 3);
    const Tensor<double> b = sample(Op::info, {3}, 4);  // broadcast over rows
    autograd::GradcheckResult result;
    if constexpr (number_second_operand<Op>())  // a number bound, where sample() keeps a away from (0.5)
      result = autograd::gradcheck(
          [](const std::vector<Tensor<double>>& in) { return Tensor<double>(map<Op>(in[0], 0.5) * 1.5); }, {a});
    else
      result = autograd::gradcheck(
          [](const std::vector<Tensor<double>>& in) { return Tensor<double>(map<Op>(in[0], in[1]) * 1.5); }, {a, b});
    INFO(Op::name, ": ", result.message);
    CHECK(result.ok);
  }
}
TEST_CASE_TEMPLATE_APPLY(binary_gradcheck, BinaryOps);

TEST_CASE("where, clamp and composites differentiate") {
  const Tensor<double> x = sample({.lo = -2, .hi = 2}, {5}, 5);
  const Tensor<double> y = sample({.lo = -2, .hi = 2}, {5}, 6);
  const auto w = autograd::gradcheck(
      [](const auto& in) { return Tensor<double>(where(in[0] > in[1], in[0] * in[1], sin(in[1]))); }, {x, y});
  INFO(w.message);
  CHECK(w.ok);
  CHECK(autograd::gradcheck([](const auto& in) { return Tensor<double>(clamp(in[0], -0.7, 0.9) + silu(in[1])); }, {x, y}).ok);
  CHECK(autograd::gradcheck([](const auto& in) { return Tensor<double>(gelu(in[0]) * gelu_tanh(in[1])); }, {x, y}).ok);
}

TEST_CASE("gradcheck reports a wrong derivative") {
  // A user op whose derivative is off by 1%: gradcheck must catch it and name the element.
  const auto result = autograd::gradcheck([](const auto& in) { return Tensor<double>(map<Wrong>(in[0])); },
                                          {sample({.lo = 1, .hi = 2}, {3}, 7)});
  CHECK_FALSE(result.ok);
  CHECK(result.message.find("input 0 element 0") != std::string::npos);
}

TEST_CASE("a chain of elementwise ops records one node and one fused backward") {
  Tensor<float> a = rand<float>({1000}), b = rand<float>({1000});
  a.requires_grad_();
  b.requires_grad_();
  Tensor<float> y = sigmoid(a * b + sin(a)) * exp(-b) - tanh(a) / 2 + relu(b - 0.5f) * square(a) + softplus(b);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->next_edges.size() == 8);  // one edge per leaf occurrence
  for (const auto& edge : y.grad_fn()->next_edges) CHECK(edge.fn->name() == "AccumulateGrad");
  CHECK(y.grad_fn()->name().rfind("FusedBackward(", 0) == 0);
  y.backward(ones<float>({1000}));
  const float *pa = a.data_ptr(), *pb = b.data_ptr(), *ga = a.grad().data_ptr(), *gb = b.grad().data_ptr();
  for (int i = 0; i < 1000; i += 37) {
    const double x = pa[i], z = pb[i];
    const double s = 1 / (1 + std::exp(-(x * z + std::sin(x)))), t = std::tanh(x);
    const double da = s * (1 - s) * (z + std::cos(x)) * std::exp(-z) - (1 - t * t) / 2 + (z > 0.5 ? (z - 0.5) * 2 * x : 0);
    const double db = s * (1 - s) * x * std::exp(-z) - s * std::exp(-z) + (z > 0.5 ? x * x : 0) + 1 / (1 + std::exp(-z));
    CHECK(ga[i] == doctest::Approx(da).epsilon(1e-4));
    CHECK(gb[i] == doctest::Approx(db).epsilon(1e-4));
  }
}

TEST_CASE("a tensor that is several leaves gets the sum of their adjoints, on every kernel path") {
  // Leaves in order: a, b, a, c, b, a (c needs no gradient): a's buffer gets leaves 0, 2 and 5, b's 1 and 4.
  const auto expr = [](const auto& a, const auto& b, const auto& c) { return a * b + square(a) * c + b * a * 3; };
  const auto expect = [](double a, double b, double c) { return std::pair{b + 2 * a * c + 3 * b, a + 3 * a}; };
  const auto check_grads = [&](const auto& a, const auto& b, const auto& c, double tolerance) {
    const auto pa = a.template to<double>().to_vector(), pb = b.template to<double>().to_vector();
    const auto pc = c.template to<double>().to_vector();
    const auto ga = a.grad().template to<double>().to_vector(), gb = b.grad().template to<double>().to_vector();
    for (size_t i = 0; i < pa.size(); ++i) {
      const auto [da, db] = expect(pa[i], pb[i], pc[i]);
      CHECK(ga[i] == doctest::Approx(da).epsilon(tolerance));
      CHECK(gb[i] == doctest::Approx(db).epsilon(tolerance));
    }
  };
  SUBCASE("SIMD, with a tail") {
    Tensor<float> a = rand<float>({37}) - 0.5f, b = rand<float>({37}), c = rand<float>({37});
    a.requires_grad_();
    b.requires_grad_();
    Tensor<float>(expr(a, b, c)).backward(ones<float>({37}));
    check_grads(a, b, c, 1e-6);
  }
  SUBCASE("scalar (a cast inside the expression)") {
    Tensor<double> a = rand<double>({9}) - 0.5, b = rand<double>({9});
    const Tensor<float> c = rand<float>({9});
    a.requires_grad_();
    b.requires_grad_();
    const auto e = expr(a, b, (c + 0.0f).to<double>());
    static_assert(!cpu::is_simd_v<std::remove_const_t<decltype(e)>>);
    Tensor<double>(e).backward(ones<double>({9}));
    check_grads(a, b, c, 1e-12);
  }
  SUBCASE("bfloat16 leaves, through staging") {
    Tensor<bfloat16> a = (rand<float>({21}) - 0.5f).to<bfloat16>(), b = rand<float>({21}).to<bfloat16>();
    const Tensor<bfloat16> c = rand<float>({21}).to<bfloat16>();
    a.requires_grad_();
    b.requires_grad_();
    Tensor<bfloat16>(expr(a, b, c)).backward(ones<bfloat16>({21}));
    check_grads(a, b, c, 1e-2);  // summed in float, rounded to bfloat16 once
  }
}

// A chain costly enough that its backward reads the root's value from the output (autograd::detail::
// root_from_output): the bench_autograd Math chain.
auto costly(const auto& x, const auto& w) { return sigmoid(exp(tanh(sin(x * w) + x) * 0.5 - w) * x + 1); }

TEST_CASE("a costly expression's backward reads its root from the output, and gets the same gradients") {
  using autograd::detail::root_from_output;
  const Tensor<float> a = ones<float>({2});
  static_assert(root_from_output<decltype(costly(a, a))>::value);
  static_assert(root_from_output<decltype(costly(Tensor<double>(), Tensor<double>()))>::value);
  static_assert(!root_from_output<decltype(exp(a * a))>::value);       // cheap: recomputed, no extra array
  static_assert(!root_from_output<decltype(costly(a, a) * 2)>::value);  // mul's derivative does not read y
  static_assert(!root_from_output<decltype(costly(a, a).to<bfloat16>())>::value);
  // 64 leaves (the most a backward loop takes): no room for the output, recomputed.
  Tensor<float> many = rand<float>({7}) - 0.5f;
  many.requires_grad_();
  const auto sum64 = [&]<size_t... I>(std::index_sequence<I...>) { return ((many * float(I + 1)) + ...); };
  const auto wide = exp(sum64(std::make_index_sequence<64>{}) * 0.01f);
  using Wide = std::remove_cvref_t<decltype(wide)>;
  static_assert(leaf_count_v<Wide> == 64 && tree_traits<Wide>::cost >= 64 && !root_from_output<Wide>::value);
  Tensor<float>(wide).backward(ones<float>({7}));
  const float scale = 0.01f * 64 * 65 / 2;
  for (int i = 0; i < 7; ++i)
    CHECK(many.grad().to_vector()[i] == doctest::Approx(scale * std::exp(scale * many.to_vector()[i])).epsilon(1e-4));

  // float, 1003 elements (a SIMD tail), against the float64 chain rule.
  Tensor<float> x = rand<float>({1003}) * 2 - 1, w = rand<float>({1003}) * 2 - 1;
  x.requires_grad_();
  w.requires_grad_();
  Tensor<float> y = costly(x, w);
  y.backward(ones<float>({1003}), /*retain_graph=*/true);
  const float *px = x.data_ptr(), *pw = w.data_ptr(), *gx = x.grad().data_ptr(), *gw = w.grad().data_ptr();
  for (int i = 0; i < 1003; ++i) {
    const double u = px[i], v = pw[i], a1 = u * v, c = std::sin(a1) + u, d = std::tanh(c), h = std::exp(d * 0.5 - v);
    const double out = 1 / (1 + std::exp(-(h * u + 1))), dj = out * (1 - out), dh = dj * u, dd = dh * h * 0.5;
    const double dc = dd * (1 - d * d), da = dc * std::cos(a1);
    INFO(i);
    REQUIRE(gx[i] == doctest::Approx(da * v + dc + dj * h).epsilon(2e-4));
    REQUIRE(gw[i] == doctest::Approx(da * u - dh * h).epsilon(2e-4));
  }
  // The graph was retained: the saved output serves a second backward (gradients accumulate).
  const std::vector<float> once = x.grad().to_vector();
  y.backward(ones<float>({1003}));
  CHECK(x.grad().to_vector()[7] == doctest::Approx(2 * once[7]));

  // double: gradcheck, broadcasting w over rows.
  const Tensor<double> xd = sample({.lo = -1, .hi = 1}, {3, 5}, 7), wd = sample({.lo = -1, .hi = 1}, {5}, 8);
  const auto check = autograd::gradcheck([](const auto& in) { return Tensor<double>(costly(in[0], in[1])); }, {xd, wd});
  INFO(check.message);
  CHECK(check.ok);

  // The output is saved as PyTorch saves exp's and sigmoid's: modifying it in place makes backward throw.
  Tensor<float> z = costly(x, w);
  {
    NoGradGuard guard;
    z *= 2.0f;
  }
  CHECK_THROWS_WITH_AS(z.backward(ones<float>({1003})), doctest::Contains("modified in place"), StaleExpressionError);
}

TEST_CASE("gradients accumulate across backward calls; zero_grad clears them; hooks see and replace them") {
  Tensor<double> x = full<double>({3}, 2.0);
  x.requires_grad_();
  Tensor<double>(x * x).backward(ones<double>({3}));
  Tensor<double>(x * 3).backward(ones<double>({3}));
  CHECK(x.grad().to_vector() == std::vector<double>{7, 7, 7});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  std::vector<double> seen;
  x.register_hook([&](const Tensor<double>& g) { seen = g.to_vector(); });
  x.register_hook([](const Tensor<double>& g) { return Tensor<double>(g * 10); });
  Tensor<double>(x * 2).backward(ones<double>({3}));
  CHECK(seen == std::vector<double>{2, 2, 2});
  CHECK(x.grad().to_vector() == std::vector<double>{20, 20, 20});
}

TEST_CASE("the autograd API: leaves, detach, NoGradGuard, errors") {
  Tensor<float> x = ones<float>({2});
  CHECK(x.is_leaf());
  CHECK_FALSE(x.requires_grad());
  x.requires_grad_();
  Tensor<float> y = x * 2;
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  CHECK_FALSE(y.detach().requires_grad());
  CHECK(y.detach().data_ptr() == y.data_ptr());
  {
    NoGradGuard guard;
    Tensor<float> z = x * 2;
    CHECK_FALSE(z.requires_grad());
  }
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("only for scalar outputs"), std::logic_error);
  CHECK_THROWS_AS(y.requires_grad_(false), std::logic_error);
  CHECK_THROWS_AS(Tensor<int32_t>(zeros<int32_t>({2})).requires_grad_(), std::invalid_argument);
}

TEST_CASE("backward twice without retain_graph throws; with it, it accumulates") {
  Tensor<float> x = ones<float>({1});
  x.requires_grad_();
  Tensor<float> y = exp(x);
  y.backward(Tensor<float>(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item() == doctest::Approx(2 * std::exp(1.0)));
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("a second time"), std::logic_error);
}

TEST_CASE("modifying a saved tensor in place makes backward throw") {
  Tensor<float> x = ones<float>({4});
  x.requires_grad_();
  Tensor<float> w = full<float>({4}, 2.0f);
  Tensor<float> y = x * w;
  w.fill_(5);
  CHECK_THROWS_WITH_AS(y.backward(ones<float>({4})), doctest::Contains("modified in place"), StaleExpressionError);
}

TEST_CASE("in-place writes involving tensors that require grad are refused with a clear error") {
  Tensor<float> x = ones<float>({4});
  x.requires_grad_();
  Tensor<float> out = zeros<float>({4});
  CHECK_THROWS_WITH_AS(out.copy_(x * 2), doctest::Contains("require grad"), std::logic_error);
  CHECK_THROWS_AS(x += 1, std::logic_error);
  NoGradGuard guard;  // an optimizer's update
  x -= 0.1f;
  CHECK(x.to_vector()[0] == doctest::Approx(0.9f));
}

TEST_CASE("random fills into a tensor that requires grad are refused as copy_ is, before they draw") {
  // torch: "a leaf Variable that requires grad is being used in an in-place operation" (uniform_, normal_,
  // random_, bernoulli_ alike); inside no_grad the fill is allowed (initializing parameters).
  Tensor<float> w = zeros<float>({2, 3});
  w.requires_grad_();
  const uint64_t version = w.version();
  Generator g(7);
  const uint64_t offset = g.offset();
  const auto refused = [](const char* op) {
    return doctest::Contains(doctest::String(op) + ": in-place writes to or from tensors that require grad");
  };
  CHECK_THROWS_WITH_AS(uniform_(w, 0, 1, &g), refused("uniform_"), std::logic_error);
  CHECK_THROWS_WITH_AS(normal_(w, 0, 1, &g), refused("normal_"), std::logic_error);
  CHECK_THROWS_WITH_AS(random_(w, 0, 5, &g), refused("random_"), std::logic_error);
  CHECK_THROWS_WITH_AS(bernoulli_(w, 0.5, &g), refused("bernoulli_"), std::logic_error);
  CHECK_THROWS_WITH_AS(uniform_(w.t(), 0, 1, &g), refused("uniform_"), std::logic_error);  // a view of it
  CHECK(g.offset() == offset);  // nothing drawn
  CHECK(w.version() == version);
  CHECK(w.to_vector() == std::vector<float>(6, 0.0f));
  {
    NoGradGuard no_grad;
    uniform_(w, 1, 2, &g);
  }
  for (float v : w.to_vector()) CHECK((v >= 1 && v < 2));
  CHECK(w.requires_grad());
}

TEST_CASE("gradients flow through dtype conversions") {
  Tensor<double> x = tensor<double>({0.5, -1.5, 2.0});
  x.requires_grad_();
  Tensor<float> y = (x * 2.0 + 1.0).to<float>() * 3.0f;
  y.backward(ones<float>({3}));
  CHECK(x.grad().to_vector() == std::vector<double>{6, 6, 6});
}

}  // namespace test_autograd_fused
