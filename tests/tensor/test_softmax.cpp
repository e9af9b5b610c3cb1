// softmax and log_softmax against float64 references: every dim of several shapes (rows and
// column blocks), odd lengths, transposed and expression inputs, double and bfloat16, stability for
// large values, and PyTorch's special values (-inf entries, NaN, +inf and all -inf rows).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "tensor_test_util.hpp"
#include "kiln/tensor/softmax.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_softmax {

using namespace kiln;
using kiln::test::normal_tensor;
using kiln::test::values_of;

namespace {


// float64 softmax (or log_softmax) along dim d of row-major values of shape s.
std::vector<double> reference(const std::vector<double>& v, const Shape& s, int d, bool log) {
  int64_t inner = 1;
  for (int i = d + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t n = s.size() ? s[d] : 1, outer = int64_t(v.size()) / std::max<int64_t>(1, n * inner);
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      auto at = [&](int64_t i) { return size_t((o * n + i) * inner + c); };
      double m = -INFINITY;
      bool nan = false;
      for (int64_t i = 0; i < n; ++i) {
        nan |= std::isnan(v[at(i)]);
        m = std::max(m, v[at(i)]);
      }
      long double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp((long double)(v[at(i)] - m));
      for (int64_t i = 0; i < n; ++i) {
        double r = log ? v[at(i)] - m - double(std::log(sum)) : double(std::exp((long double)(v[at(i)] - m)) / sum);
        if (nan || !std::isfinite(m)) r = NAN;
        out[at(i)] = r;
      }
    }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& ref, double rtol, double atol,
                 const std::string& what) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, first = 0;
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(ref[i]) ? std::isnan(got[i]) : std::abs(got[i] - ref[i]) <= atol + rtol * std::abs(ref[i]);
    if (!ok && bad++ == 0) first = i;
    if (std::isfinite(got[i]) && std::isfinite(ref[i])) max_diff = std::max(max_diff, std::abs(got[i] - ref[i]));
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", got.size(), " differ; first at ", first, ": got ",
                bad ? got[first] : 0.0, ", expected ", bad ? ref[first] : 0.0, "; max difference ", max_diff);
}

}  // namespace

TEST_CASE("softmax and log_softmax match float64 along every dim") {
  const std::vector<Shape> shapes = {{1}, {5}, {17}, {1000}, {3, 7}, {8, 33}, {33, 8}, {2, 3, 4}, {4, 1, 70}, {3, 257, 65},
                                     {2, 0, 3}};
  uint64_t seed = 1;
  for (const Shape& s : shapes) {
    for (int d = -s.size(); d < s.size(); ++d) {
      const int k = d < 0 ? d + s.size() : d;
      const Tensor<float> x = normal_tensor<float>(s, seed++, 3);
      const auto v = values_of(x);
      for (bool log : {false, true}) {
        const Tensor<float> y = log ? log_softmax(x, d) : softmax(x, d);
        REQUIRE(y.shape() == s);
        check_close(values_of(y), reference(v, s, k, log), 2e-6, log ? 2e-6 : 1e-9,
                    detail::cat(log ? "log_softmax " : "softmax ", s, " dim ", d));
      }
    }
  }
}

TEST_CASE("softmax of views, expressions, double and bfloat16") {
  const Tensor<float> x = normal_tensor<float>({40, 23}, 7, 3);
  const Tensor<float> xt = x.t();  // [23, 40], non-contiguous
  const auto vt = values_of(xt);
  check_close(values_of(softmax(xt, 1)), reference(vt, xt.shape(), 1, false), 2e-6, 1e-9, "transposed dim 1");
  check_close(values_of(log_softmax(xt, 0)), reference(vt, xt.shape(), 0, true), 2e-6, 2e-6, "transposed dim 0");
  const auto e = x * 0.5f + 1.0f;
  check_close(values_of(softmax(e, -1)), reference(values_of(Tensor<float>(e)), x.shape(), 1, false), 2e-6, 1e-9,
              "expression");
  const Tensor<double> xd = normal_tensor<double>({9, 130}, 8, 3);
  for (int d : {0, 1}) {
    check_close(values_of(softmax(xd, d)), reference(values_of(xd), xd.shape(), d, false), 1e-12, 1e-15, "double");
    check_close(values_of(log_softmax(xd, d)), reference(values_of(xd), xd.shape(), d, true), 1e-12, 1e-12, "double log");
  }
  const Tensor<bfloat16> xh = x.to<bfloat16>();
  check_close(values_of(softmax(xh, 1)), reference(values_of(xh), xh.shape(), 1, false), 1e-2, 1e-3, "bfloat16");
}

TEST_CASE("softmax rows sum to one and are stable for large values") {
  const Tensor<float> x = normal_tensor<float>({64, 4099}, 9, 10);
  const Tensor<float> y = softmax(x, 1);
  for (int r = 0; r < 64; ++r) {
    double s = 0;
    for (int i = 0; i < 4099; ++i) s += y.data_ptr()[r * 4099 + i];
    CHECK(s == doctest::Approx(1.0).epsilon(1e-5));
  }
  const Tensor<float> big = tensor<float>({{1000, 1001, 999}, {-1000, -1001, -999}});
  const auto r = values_of(softmax(big, 1));
  const auto l = values_of(log_softmax(big, 1));
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  CHECK(r[0] == doctest::Approx(e1 / (1 + e1 + e2)));
  CHECK(r[1] == doctest::Approx(1 / (1 + e1 + e2)));
  CHECK(r[5] == doctest::Approx(1 / (1 + e1 + e2)));
  CHECK(l[1] == doctest::Approx(-std::log(1 + e1 + e2)));
  CHECK(l[4] == doctest::Approx(-2 - std::log(1 + e1 + e2)));
}

TEST_CASE("softmax special values follow PyTorch") {
  const float inf = INFINITY, nan = NAN;
  // rows: a -inf entry; a NaN; a +inf; all -inf
  const Tensor<float> x = tensor<float>({{0, -inf, 0, 1}, {1, nan, 2, 3}, {1, inf, 2, 3}, {-inf, -inf, -inf, -inf}});
  for (bool log : {false, true}) {
    for (int d : {1, 0}) {
      const Tensor<float> in = d == 1 ? x : Tensor<float>(x.t());
      const auto got = values_of(log ? log_softmax(in, d) : softmax(in, d));
      const auto ref = reference(values_of(x), x.shape(), 1, log);
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) {
          const double g = got[size_t(d == 1 ? r * 4 + c : c * 4 + r)], e = ref[size_t(r * 4 + c)];
          CHECK_MESSAGE((std::isnan(e) ? std::isnan(g) : (g == doctest::Approx(e) || g == e)), "row ", r, " col ", c,
                        " log ", log, " dim ", d, ": got ", g, " expected ", e);
        }
    }
  }
  CHECK(values_of(softmax(x, 1))[1] == 0);              // exp(-inf) is exactly 0
  CHECK(values_of(log_softmax(x, 1))[1] == -INFINITY);  // and its log -inf
}

TEST_CASE("softmax: bad dim names the op") {
  const Tensor<float> x = normal_tensor<float>({2, 3}, 1, 3);
  CHECK_THROWS_WITH_AS(softmax(x, 2), "softmax: dim 2 is out of range for a tensor of 2 dims (expected in [-2, 1])",
                       std::out_of_range);
  CHECK_THROWS_AS(log_softmax(x, -3), std::out_of_range);
  CHECK(softmax(tensor<float>({5})[0], 0).item() == 1);  // 0-dim: dim 0 allowed, as PyTorch
}

}  // namespace test_tensor_softmax
