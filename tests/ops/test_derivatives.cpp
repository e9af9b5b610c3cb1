// The op table's derivatives against central finite differences of the ops' float64 references,
// at points sampled over each op's domain. Derivatives are generic over their placeholders, so
// calling them with doubles evaluates exactly the formula autograd will fuse.
#include <doctest/doctest.h>

#include "op_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_ops_derivatives {

using namespace kiln;
using namespace kiln::test;

namespace {

// Points where a piecewise op has a kink or jump (multiples of 0.5 cover 0, integers and the
// halfway points of round) are skipped.
bool near_kink(double x) { return std::abs(x * 2 - std::round(x * 2)) < 1e-2; }

double sample_lo(const ops::OpInfo& info) { return info.lo > 0 ? std::max(info.lo, 0.1) : std::max(info.lo, -10.0); }
double sample_hi(const ops::OpInfo& info) { return std::min(info.hi, 10.0); }

// The central difference and a bound on its rounding error (eps * |f| / h), which dominates when a
// tiny operand sits next to a large one.
struct Difference {
  double value, rounding;
};
template <class F>
Difference central_difference(F f, double x) {
  const double h = 1e-6 * std::max(1e-4, std::abs(x));  // relative: operands reach 1e-6
  const double hi = f(x + h), lo = f(x - h);
  const double rounding = 4 * std::numeric_limits<double>::epsilon() * std::max(std::abs(hi), std::abs(lo)) / h;
  return {(hi - lo) / (2 * h), rounding};
}

bool close(double got, Difference want, double g) {
  return std::abs(got - g * want.value) <= 1e-6 * std::max(1.0, std::abs(g * want.value)) + std::abs(g) * want.rounding;
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("unary derivative matches finite differences", Op, unary_derivative) {
  if constexpr (ops::is_differentiable<Op>() && std::is_base_of_v<ops::SameTypeOp, Op>) {
    const auto xs = domain_samples<double>(sample_lo(Op::info), sample_hi(Op::info), 400, 11);
    int failures = 0;
    for (double x : xs) {
      if (near_kink(x)) continue;
      const double y = Op::template scalar<double>(x);
      const double g = 0.75;  // the incoming gradient scales the result
      const double got = Op::grad(x, y, g);
      const Difference want = central_difference([](double v) { return Op::template scalar<double>(v); }, x);
      if (!close(got, want, g) && ++failures <= 3) {
        INFO(Op::name, "'(", x, "): derivative gives ", got, ", finite differences ", g * want.value);
        CHECK(close(got, want, g));
      }
    }
    CHECK(failures == 0);
  }
}
TEST_CASE_TEMPLATE_APPLY(unary_derivative, UnaryOps);

TEST_CASE_TEMPLATE_DEFINE("binary derivative matches finite differences", Op, binary_derivative) {
  if constexpr (ops::is_differentiable<Op>()) {
    const auto as = domain_samples<double>(sample_lo(Op::info), sample_hi(Op::info), 300, 21);
    const auto bs = domain_samples<double>(sample_lo(Op::info), sample_hi(Op::info), 300, 22);
    int failures = 0;
    for (size_t i = 0; i < as.size(); ++i) {
      const double a = as[i], b = bs[i];
      if (std::abs(a - b) < 1e-2) continue;  // min/max switch there
      const double y = Op::template scalar<double>(a, b);
      const double g = -1.25;
      const auto grads = Op::grad(a, b, y, g);
      const double da = std::get<0>(grads);
      // A number second operand (clamp's bound) has no gradient: its derivative is not checked.
      double db = 0;
      if constexpr (!number_second_operand<Op>()) db = std::get<1>(grads);
      const Difference want_a = central_difference([&](double v) { return Op::template scalar<double>(v, b); }, a);
      const Difference want_b = central_difference([&](double v) { return Op::template scalar<double>(a, v); }, b);
      const bool b_ok = number_second_operand<Op>() || close(db, want_b, g);
      if ((!close(da, want_a, g) || !b_ok) && ++failures <= 3) {
        INFO(Op::name, "(", a, ", ", b, "): derivative gives (", da, ", ", db, "), finite differences (",
             g * want_a.value, ", ", g * want_b.value, ")");
        CHECK(close(da, want_a, g));
        CHECK(b_ok);
      }
    }
    CHECK(failures == 0);
  }
}
TEST_CASE_TEMPLATE_APPLY(binary_derivative, BinaryOps);

TEST_CASE("minimum and maximum: ties split the gradient, NaN sends all of it to both inputs, as PyTorch") {
  // PyTorch's rule: where(a == b, g / 2, g).masked_fill_(a < b, 0) for maximum's a (a > b for minimum's): no
  // comparison holds at NaN, so each input gets all of g.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    double a, b, max_a, max_b, min_a, min_b;
  };
  for (const Case& c : {Case{2, 2, .5, .5, .5, .5}, Case{3, 1, 1, 0, 0, 1}, Case{1, 3, 0, 1, 1, 0},
                        Case{nan, 1, 1, 1, 1, 1}, Case{1, nan, 1, 1, 1, 1}, Case{nan, nan, 1, 1, 1, 1}}) {
    INFO(c.a, ", ", c.b);
    const auto [ma, mb] = ops::Maximum::grad(c.a, c.b, std::max(c.a, c.b), 1.0);
    const auto [na, nb] = ops::Minimum::grad(c.a, c.b, std::min(c.a, c.b), 1.0);
    CHECK(ma == c.max_a);
    CHECK(mb == c.max_b);
    CHECK(na == c.min_a);
    CHECK(nb == c.min_b);
  }
}

TEST_CASE("where routes the gradient to the chosen branch") {
  const auto [dc, da, db] = ops::Where::grad(true, 1.0, 2.0, 1.0, 5.0);
  CHECK(std::is_same_v<std::remove_cvref_t<decltype(dc)>, NoGrad>);
  CHECK(da == 5.0);
  CHECK(db == 0.0);
}

TEST_CASE("composite ops differentiate through their parts") {
  // silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))), from the expansion x * sigmoid(x).
  for (double x : {-3.0, -0.5, 0.7, 2.5}) {
    const double s = 1 / (1 + std::exp(-x));
    const double want = s * (1 + x * (1 - s));
    CHECK(central_difference([](double v) { return silu(v); }, x).value == doctest::Approx(want).epsilon(1e-7));
    CHECK(silu(x) == doctest::Approx(x * s));
    CHECK(gelu(x) == doctest::Approx(0.5 * x * (1 + std::erf(x / std::sqrt(2.0)))));
  }
}

}  // namespace test_ops_derivatives
