// Reductions against float64 references computed by plain loops: every reduction over contiguous,
// transposed, strided, broadcast and expression inputs, all / single / multiple / negative dims,
// keepdim, zero-size dims and odd lengths; integer and bool dtypes; NaN rules; empty reductions and
// errors; accuracy on 16M zero-mean floats; bitwise-identical results for 1 and 2 threads; cumsum;
// topk against std::partial_sort.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "tensor_test_util.hpp"
#include "kiln/tensor/reduce.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_reduce {

using namespace kiln;
using kiln::test::normal_tensor;
using kiln::test::values_of;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();


uint32_t mask_of(const Shape& s, const Dims& dims) {
  uint32_t m = 0;
  if (dims.empty()) return s.size() ? (1u << s.size()) - 1 : 0;
  for (int64_t d : dims)
    if (s.size()) m |= 1u << (d < 0 ? d + s.size() : d);
  return m;
}

Shape reduced_shape(const Shape& s, uint32_t mask, bool keepdim) {
  Shape out;
  for (int i = 0; i < s.size(); ++i) {
    if (!(mask >> i & 1u)) out.push_back(s[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

// groups[o]: the values reduced into output o, in row-major order of the reduced dims.
std::vector<std::vector<double>> groups_of(const std::vector<double>& v, const Shape& s, uint32_t mask) {
  int64_t outputs = 1;
  for (int i = 0; i < s.size(); ++i)
    if (!(mask >> i & 1u)) outputs *= s[i];
  std::vector<std::vector<double>> g(static_cast<size_t>(outputs));
  for (int64_t flat = 0; flat < int64_t(v.size()); ++flat) {
    int64_t rest = flat, o = 0, scale = 1;
    for (int i = s.size() - 1; i >= 0; --i) {
      const int64_t idx = rest % s[i];
      rest /= s[i];
      if (!(mask >> i & 1u)) {
        o += idx * scale;
        scale *= s[i];
      }
    }
    g[size_t(o)].push_back(v[size_t(flat)]);
  }
  return g;
}

bool same_value(double a, double b, double tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= tol;
}

// Reports the first mismatch and the max difference.
void check_values(const std::vector<double>& got, const std::vector<double>& ref, const std::vector<double>& tol,
                  const std::string& what) {
  REQUIRE_MESSAGE(got.size() == ref.size(), what);
  size_t bad = 0, first = got.size();
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!same_value(got[i], ref[i], tol[i])) {
      if (first == got.size()) first = i;
      ++bad;
    }
    if (std::isfinite(got[i]) && std::isfinite(ref[i])) max_diff = std::max(max_diff, std::abs(got[i] - ref[i]));
  }
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", got.size(), " differ; first at ", first, ": got ",
                first < got.size() ? got[first] : 0.0, ", expected ", first < got.size() ? ref[first] : 0.0,
                "; max difference ", max_diff);
}

// ---- float64 references ------------------------------------------------------------------------

double ref_sum(const std::vector<double>& g) {
  long double s = 0;
  for (double x : g) s += x;
  return double(s);
}
double abs_sum(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += std::abs(x);
  return s;
}
double ref_mean(const std::vector<double>& g) { return g.empty() ? kNaN : ref_sum(g) / double(g.size()); }
double ref_var(const std::vector<double>& g, double correction) {
  const double m = ref_mean(g);
  long double s = 0;
  for (double x : g) s += (long double)(x - m) * (x - m);
  return double(s) / std::max(0.0, double(g.size()) - correction);
}
double ref_max(const std::vector<double>& g) {
  double m = -kInf;
  for (double x : g) {
    if (std::isnan(x)) return x;
    m = std::max(m, x);
  }
  return m;
}
double ref_min(const std::vector<double>& g) {
  double m = kInf;
  for (double x : g) {
    if (std::isnan(x)) return x;
    m = std::min(m, x);
  }
  return m;
}
double ref_norm(const std::vector<double>& g, double p) {
  if (p == kInf || p == -kInf) {
    std::vector<double> a;
    for (double x : g) a.push_back(std::abs(x));
    return p > 0 ? ref_max(a) : ref_min(a);
  }
  long double s = 0;
  for (double x : g) s += p == 0 ? (x != 0) : std::pow(std::abs((long double)x), (long double)p);
  return p == 0 ? double(s) : double(std::pow(s, 1.0L / p));
}
double ref_logsumexp(const std::vector<double>& g) {
  const double m = ref_max(g);
  if (!std::isfinite(m)) return m;
  long double s = 0;
  for (double x : g) s += std::exp((long double)(x - m));
  return m + double(std::log(s));
}
int64_t ref_argmax(const std::vector<double>& g, bool largest) {
  int64_t best = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return int64_t(i);
    if (largest ? g[i] > g[size_t(best)] : g[i] < g[size_t(best)]) best = int64_t(i);
  }
  return best;
}

// ---- inputs: one logical shape in several layouts ----------------------------------------------

enum class Layout { Contiguous, Transposed, Strided, Broadcast };
constexpr Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided, Layout::Broadcast};
const char* name(Layout l) {
  constexpr const char* n[] = {"contiguous", "transposed", "strided", "broadcast"};
  return n[int(l)];
}

Tensor<float> make_input(const Shape& s, Layout layout, uint64_t seed) {
  switch (layout) {
    case Layout::Contiguous:
      return normal_tensor(s, seed);
    case Layout::Transposed: {  // stored with the dims reversed, viewed back in order
      Shape r;
      Dims order;
      for (int i = s.size() - 1; i >= 0; --i) {
        r.push_back(s[i]);
        order.push_back(i);
      }
      return normal_tensor(r, seed).permute(order);
    }
    case Layout::Strided: {  // every other element of the last dim
      if (s.size() == 0) return normal_tensor(s, seed);
      Shape r = s;
      r[s.size() - 1] = 2 * s.back() + 1;
      return normal_tensor(r, seed).slice(-1, 1, std::numeric_limits<int64_t>::max(), 2);
    }
    case Layout::Broadcast: {  // dim 0 (and the last dim) broadcast
      if (s.size() == 0) return normal_tensor(s, seed);
      Shape r = s;
      r[0] = 1;
      if (s.size() > 1) r[s.size() - 1] = 1;
      return normal_tensor(r, seed).expand(s);
    }
  }
  return {};
}

// {40, 3}, {3, 40}, {2, 50, 3}: a short contiguous dim next to a longer one, which makes the
// reduction read along the longer dim with a stride (cpu::kReduceMinRow).
const std::vector<Shape> kShapes = {{},        {1},       {7},        {1000},   {3, 5},   {33, 17},
                                    {4, 1, 6}, {2, 3, 4, 5}, {40, 3}, {3, 40}, {2, 50, 3}, {0, 3}, {3, 0}};

// The dims lists tried for a shape: all ({}), each dim, each negative dim, first and last, and
// the same pair reversed.
std::vector<Dims> dims_for(const Shape& s) {
  std::vector<Dims> out = {Dims{}};
  for (int i = 0; i < s.size(); ++i) {
    out.push_back(Dims{i});
    out.push_back(Dims{i - s.size()});
  }
  if (s.size() >= 2) {
    out.push_back(Dims{0, s.size() - 1});
    out.push_back(Dims{-1, 0});
  }
  if (s.size() >= 3) out.push_back(Dims{0, 2});
  return out;
}

std::string describe(const Shape& s, const Dims& d, bool keepdim, const char* layout) {
  return detail::cat("shape ", s, " dims ", d, " keepdim ", keepdim, " ", layout);
}

// Runs op(x, dims, keepdim) for every shape, dims list, keepdim and layout (and an expression
// input) against ref(group) with tolerance tol(group). `needs_values`: skip empty groups.
template <class Op, class Ref, class Tol>
void check_reduction(Op op, Ref ref, Tol tol, bool needs_values = false) {
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    for (const Dims& dims : dims_for(s)) {
      const uint32_t mask = mask_of(s, dims);
      int64_t count = 1;  // elements per output
      for (int i = 0; i < s.size(); ++i)
        if (mask >> i & 1u) count *= s[i];
      if (needs_values && count == 0) continue;  // these throw (tested below)
      for (bool keepdim : {false, true}) {
        auto run = [&](const auto& x, const std::vector<double>& vals, const char* what) {
          const auto got = op(x, dims, keepdim);
          const std::string where = describe(s, dims, keepdim, what);
          CHECK_MESSAGE(got.shape() == reduced_shape(s, mask, keepdim), where);
          std::vector<double> r, t;
          for (const auto& g : groups_of(vals, s, mask)) {
            r.push_back(ref(g));
            t.push_back(tol(g));
          }
          check_values(values_of(got), r, t, where);
        };
        for (Layout layout : kLayouts) {
          const Tensor<float> x = make_input(s, layout, seed++);
          run(x, values_of(x), name(layout));
        }
        const Tensor<float> a = normal_tensor(s, seed++), b = make_input(s, Layout::Transposed, seed++);
        const auto e = a * b + 0.25f;
        run(e, values_of(Tensor<float>(e)), "expression a*b+0.25");
      }
    }
  }
}

auto sum_tol = [](const std::vector<double>& g) { return 1e-6 * abs_sum(g) + 1e-30; };
auto rel_tol = [](double r) { return [r](const std::vector<double>&) { return r; }; };

}  // namespace

TEST_CASE("sum, mean and prod match float64 references for every layout, dims list and keepdim") {
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::sum(x, d, k); }, ref_sum, sum_tol);
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::mean(x, d, k); }, ref_mean,
                  [](const std::vector<double>& g) { return 1e-6 * abs_sum(g) / std::max<size_t>(g.size(), 1) + 1e-30; });
  check_reduction(
      [](const auto& x, const Dims& d, bool k) { return kiln::prod(x, d, k); },
      [](const std::vector<double>& g) {
        long double p = 1;
        for (double v : g) p *= v;
        return double(float(p));  // rounded as the float result (which may underflow)
      },
      [](const std::vector<double>& g) {
        long double p = 1;
        for (double v : g) p *= std::abs(v);
        return double(p) * 1e-6 + 1e-44;
      });
}

TEST_CASE("amax and amin match, and max / min over all elements") {
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::amax(x, d, k); }, ref_max, rel_tol(0), true);
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::amin(x, d, k); }, ref_min, rel_tol(0), true);
  const Tensor<float> x = make_input({37, 29}, Layout::Transposed, 5);
  CHECK(kiln::max(x).item() == float(ref_max(values_of(x))));
  CHECK(kiln::min(x * 2).item() == float(2 * ref_min(values_of(x))));
  CHECK(kiln::max(x).dim() == 0);
}

TEST_CASE("var and std with corrections 0, 1 and 2, and var_mean") {
  for (double c : {0.0, 1.0, 2.0}) {
    check_reduction([c](const auto& x, const Dims& d, bool k) { return kiln::var(x, d, c, k); },
                    [c](const std::vector<double>& g) { return ref_var(g, c); },
                    [](const std::vector<double>& g) { return 1e-5 * ref_var(g, 0) + 1e-6; });
  }
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::std(x, d, 1, k); },
                  [](const std::vector<double>& g) { return std::sqrt(ref_var(g, 1)); },
                  [](const std::vector<double>& g) { return 1e-5 * std::sqrt(ref_var(g, 0)) + 1e-6; });
  const Tensor<float> x = normal_tensor({6, 50}, 3);
  const auto v = values_of(x);
  CHECK(kiln::var(x).item() == doctest::Approx(ref_var(v, 1)).epsilon(1e-6));
  CHECK(kiln::var(x, false).item() == doctest::Approx(ref_var(v, 0)).epsilon(1e-6));
  CHECK(kiln::std(x, {1}, false, true).shape() == Shape{6, 1});  // torch's (dims, unbiased, keepdim)
  auto [var1, mean1] = kiln::var_mean(x, {1});
  auto [std1, mean2] = kiln::std_mean(x, 1, 0);
  const auto g = groups_of(v, x.shape(), 2u);
  for (int i = 0; i < 6; ++i) {
    CHECK(var1.to_vector()[size_t(i)] == doctest::Approx(ref_var(g[size_t(i)], 1)).epsilon(1e-6));
    CHECK(mean1.to_vector()[size_t(i)] == doctest::Approx(ref_mean(g[size_t(i)])).epsilon(1e-6));
    CHECK(std1.to_vector()[size_t(i)] == doctest::Approx(std::sqrt(ref_var(g[size_t(i)], 0))).epsilon(1e-6));
    CHECK(mean2.to_vector()[size_t(i)] == mean1.to_vector()[size_t(i)]);
  }
  // A large offset does not cancel the variance away (two-pass blocks in double).
  const Tensor<float> shifted = x + 10000.0f;
  CHECK(kiln::var(shifted).item() == doctest::Approx(ref_var(values_of(shifted), 1)).epsilon(1e-6));
  CHECK(std::isnan(kiln::var(tensor<float>({3.0f})).item()));  // one value, correction 1: 0 / 0
  CHECK(kiln::var(tensor<float>({3.0f}), false).item() == 0);
}

TEST_CASE("norm for p = 2, 1, 3, 0.5, 0, inf and -inf") {
  for (double p : {2.0, 1.0, 3.0, 0.5, 0.0}) {
    check_reduction([p](const auto& x, const Dims& d, bool k) { return kiln::norm(x, p, d, k); },
                    [p](const std::vector<double>& g) { return ref_norm(g, p); },
                    [p](const std::vector<double>& g) { return 2e-6 * ref_norm(g, p) + 1e-30; });
  }
  for (double p : {kInf, -kInf})
    check_reduction([p](const auto& x, const Dims& d, bool k) { return kiln::norm(x, p, d, k); },
                    [p](const std::vector<double>& g) { return ref_norm(g, p); }, rel_tol(0), true);
  CHECK(kiln::norm(tensor<float>({3, -4})).item() == 5);
  CHECK(kiln::norm(tensor<float>({3, -4}), 1).item() == 7);
  CHECK_THROWS_AS(kiln::norm(empty<float>({0}), kInf), std::invalid_argument);
}

TEST_CASE("logsumexp is stable and handles infinities and NaN") {
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::logsumexp(x, d, k); }, ref_logsumexp,
                  [](const std::vector<double>& g) { return 1e-6 * (1 + std::abs(ref_logsumexp(g))); });
  CHECK(kiln::logsumexp(tensor<float>({1000, 1000})).item() == doctest::Approx(1000 + std::log(2.0)));
  CHECK(kiln::logsumexp(tensor<float>({-1000, -1000}), 0).item() == doctest::Approx(-1000 + std::log(2.0)));
  CHECK(kiln::logsumexp(tensor<float>({-INFINITY, -INFINITY})).item() == -INFINITY);
  CHECK(kiln::logsumexp(tensor<float>({1, INFINITY})).item() == INFINITY);
  CHECK(std::isnan(kiln::logsumexp(tensor<float>({1, NAN, INFINITY})).item()));
  CHECK(kiln::logsumexp(tensor<float>({-INFINITY, 0})).item() == 0);
  CHECK(kiln::logsumexp(empty<float>({0})).item() == -INFINITY);
  // Along dim 0 of a matrix (outer mode), with the same special values.
  const Tensor<float> m = tensor<float>({{1000, -INFINITY, 1, NAN}, {1000, -INFINITY, INFINITY, 0}});
  const auto r = kiln::logsumexp(m, 0).to_vector();
  CHECK(r[0] == doctest::Approx(1000 + std::log(2.0)));
  CHECK(r[1] == -INFINITY);
  CHECK(r[2] == INFINITY);
  CHECK(std::isnan(r[3]));
}

TEST_CASE("all and any on floats, ints, bools and comparisons") {
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::any(x > 1.0f, d, k); },
                  [](const std::vector<double>& g) {
                    return double(std::any_of(g.begin(), g.end(), [](double v) { return v > 1; }));
                  },
                  rel_tol(0));
  check_reduction([](const auto& x, const Dims& d, bool k) { return kiln::all(x, d, k); },
                  [](const std::vector<double>& g) {
                    return double(std::all_of(g.begin(), g.end(), [](double v) { return v != 0; }));
                  },
                  rel_tol(0));
  const Tensor<float> x = tensor<float>({{1, 0, 2}, {3, 4, NAN}});
  CHECK(kiln::all(x).item() == false);
  CHECK(kiln::any(x).item() == true);
  CHECK(kiln::all(x, 0).to_vector() == std::vector<bool>{true, false, true});  // NaN is nonzero
  CHECK(kiln::all(x, 1, true).shape() == Shape{2, 1});
  CHECK(kiln::any(x > 3.5f, {0, 1}).item() == true);
  CHECK(kiln::all(x == x, 1).to_vector() == std::vector<bool>{true, false});
  const Tensor<bool> b = tensor<bool>({{true, true}, {false, true}});
  CHECK(kiln::all(b, 0).to_vector() == std::vector<bool>{false, true});
  CHECK(kiln::any(b.t(), 0).to_vector() == std::vector<bool>{true, true});
  CHECK(kiln::all(tensor<int32_t>({1, -2, 3})).item() == true);
  CHECK(kiln::all(empty<float>({0})).item() == true);
  CHECK(kiln::any(empty<float>({0})).item() == false);
}

TEST_CASE("argmax, argmin and max / min along a dim give the first occurrence; NaN propagates") {
  for (const Shape& s : {Shape{7}, Shape{33, 17}, Shape{4, 1, 6}, Shape{2, 3, 4, 5}, Shape{300, 2500}, Shape{300, 3},
                         Shape{2, 70, 5}}) {
    for (Layout layout : kLayouts) {
      const Tensor<float> x = make_input(s, layout, 11);  // the broadcast layout has many ties
      const auto v = values_of(x);
      for (int d = -s.size(); d < s.size(); ++d) {
        const uint32_t mask = 1u << (d < 0 ? d + s.size() : d);
        const auto groups = groups_of(v, s, mask);
        const auto am = values_of(kiln::argmax(x, d));
        const auto an = values_of(kiln::argmin(x, d, true));
        auto [mv, mi] = kiln::max(x, d);
        auto [nv, ni] = kiln::min(x, d, true);
        CHECK(mi.shape() == reduced_shape(s, mask, false));
        CHECK(nv.shape() == reduced_shape(s, mask, true));
        const auto mvv = values_of(mv), miv = values_of(mi), nvv = values_of(nv), niv = values_of(ni);
        for (size_t o = 0; o < groups.size(); ++o) {
          const int64_t ia = ref_argmax(groups[o], true), in = ref_argmax(groups[o], false);
          REQUIRE_MESSAGE(am[o] == double(ia), describe(s, {d}, false, name(layout)), " output ", o);
          REQUIRE(an[o] == double(in));
          CHECK(miv[o] == double(ia));
          CHECK(niv[o] == double(in));
          CHECK(mvv[o] == groups[o][size_t(ia)]);
          CHECK(nvv[o] == groups[o][size_t(in)]);
        }
      }
      CHECK(kiln::argmax(x).item() == ref_argmax(v, true));  // flat index in logical order
      CHECK(kiln::argmin(x).item() == ref_argmax(v, false));
    }
  }
  const Tensor<float> ties = tensor<float>({{1, 5, 5, 2}, {7, 7, 0, 7}, {0, 0, 0, 0}});
  CHECK(kiln::argmax(ties, 1).to_vector() == std::vector<int64_t>{1, 0, 0});
  CHECK(kiln::argmin(ties, 1).to_vector() == std::vector<int64_t>{0, 2, 0});
  CHECK(kiln::argmax(ties, 0).to_vector() == std::vector<int64_t>{1, 1, 0, 1});
  CHECK(kiln::argmax(ties).item() == 4);
  const Tensor<float> nan = tensor<float>({{1, NAN, 3, NAN}, {NAN, 9, 9, 1}});
  CHECK(kiln::argmax(nan, 1).to_vector() == std::vector<int64_t>{1, 0});
  CHECK(kiln::argmin(nan, 1).to_vector() == std::vector<int64_t>{1, 0});
  CHECK(kiln::argmax(nan, 0).to_vector() == std::vector<int64_t>{1, 0, 1, 0});
  CHECK(kiln::argmax(nan).item() == 1);
  CHECK(std::isnan(kiln::max(nan).item()));
  CHECK(std::isnan(kiln::min(nan).item()));
  CHECK(std::isnan(kiln::amax(nan, 1).to_vector()[1]));
  const auto col = kiln::amax(nan, 0).to_vector();
  CHECK((std::isnan(col[0]) && std::isnan(col[1]) && col[2] == 9 && std::isnan(col[3])));
  auto [v, i] = kiln::max(nan.t(), 0);
  CHECK(std::isnan(v.to_vector()[0]));
  CHECK(i.to_vector() == std::vector<int64_t>{1, 0});
  // torch.max(a, b) is the elementwise maximum.
  CHECK(Tensor<float>(kiln::max(tensor<float>({1, 5}), tensor<float>({3, 2}))).to_vector() == std::vector<float>{3, 5});
}

TEST_CASE("integer and bool inputs: int64 sums and products, exact extremes") {
  const Tensor<int32_t> a = tensor<int32_t>({{2000000000, 2000000000, -7}, {1, 2, 3}});
  const Tensor<int64_t> s = kiln::sum(a);
  CHECK(s.item() == int64_t(4000000000) - 7 + 6);
  CHECK(kiln::sum(a, 0).to_vector() == std::vector<int64_t>{2000000001, 2000000002, -4});
  CHECK(kiln::sum(a.t(), 0, true).to_vector() == std::vector<int64_t>{3999999993, 6});
  CHECK(kiln::prod(tensor<int32_t>({{2000000000, 3, -7}, {1, 2, 3}}), 1).to_vector() ==
        std::vector<int64_t>{-42000000000, 6});
  CHECK(kiln::max(a).item() == 2000000000);
  CHECK(kiln::amin(a, 0).to_vector() == std::vector<int32_t>{1, 2, -7});
  CHECK(kiln::argmax(a, 1).to_vector() == std::vector<int64_t>{0, 2});
  const Tensor<int32_t> small = tensor<int32_t>({{1, 2, 3}, {4, 5, 6}});
  CHECK(kiln::sum(small * 2 + 1, 1).to_vector() == std::vector<int64_t>{15, 33});
  const Tensor<int64_t> big = tensor<int64_t>({int64_t(1) << 40, int64_t(1) << 40, 5});
  CHECK(kiln::sum(big).item() == (int64_t(1) << 41) + 5);
  CHECK(kiln::max(big).item() == int64_t(1) << 40);
  const Tensor<bool> b = tensor<bool>({true, false, true, true});
  const Tensor<int64_t> count = kiln::sum(b);
  CHECK(count.item() == 3);
  CHECK(kiln::sum(tensor<float>({1, 2, 3, 4}) > 2.5f).item() == 2);
  CHECK(kiln::max(b).item() == true);
  CHECK(kiln::min(b).item() == false);
  CHECK(kiln::argmin(b).item() == 1);
  // int32 over many elements, across chunks and outer mode.
  Tensor<int32_t> r = (normal_tensor({257, 300}, 9) * 1000.0f).to<int32_t>();
  const auto rv = values_of(r);
  for (int d : {0, 1}) {
    const auto got = values_of(kiln::sum(r, d));
    const auto groups = groups_of(rv, r.shape(), 1u << d);
    for (size_t o = 0; o < groups.size(); ++o) CHECK(got[o] == ref_sum(groups[o]));
  }
}

TEST_CASE("double and bfloat16 inputs") {
  Tensor<double> x = empty<double>({129, 65});
  Generator gen(4);
  fill_normal(gen, x.data_ptr(), x.numel(), 1.0, 2.0);
  const auto v = values_of(x);
  CHECK(kiln::sum(x).item() == doctest::Approx(ref_sum(v)).epsilon(1e-12));
  CHECK(kiln::var(x.t(), 1).to_vector()[3] == doctest::Approx(ref_var(groups_of(v, x.shape(), 1u)[3], 1)).epsilon(1e-10));
  CHECK(kiln::norm(x).item() == doctest::Approx(ref_norm(v, 2)).epsilon(1e-12));
  const Tensor<bfloat16> h = normal_tensor({100}, 2).to<bfloat16>();
  const Tensor<bfloat16> hs = kiln::sum(h);
  CHECK(float(hs.item()) == doctest::Approx(ref_sum(values_of(h))).epsilon(1e-2));
  CHECK(float(kiln::max(h).item()) == float(ref_max(values_of(h))));
  CHECK(float(kiln::mean(h * h).item()) == doctest::Approx(ref_mean(values_of(Tensor<bfloat16>(h * h)))).epsilon(1e-2));
}

TEST_CASE("large reductions: inner chunks and outer-mode partial blocks") {
  // Rows longer than a chunk (inner mode, several partials per output), and many rows with more
  // than one column block (outer mode, partial blocks combined in order).
  for (const Shape& s : {Shape{3, 100003}, Shape{1000, 2500}, Shape{5, 70, 4099}}) {
    const Tensor<float> x = normal_tensor(s, 21);
    const auto v = values_of(x);
    for (int d = 0; d < s.size(); ++d) {
      const auto groups = groups_of(v, s, 1u << d);
      const auto got = values_of(kiln::sum(x, d)), gotv = values_of(kiln::var(x, d)), gotm = values_of(kiln::amax(x, d));
      std::vector<double> r, t, rv, tv, rm;
      for (const auto& g : groups) {
        r.push_back(ref_sum(g));
        t.push_back(sum_tol(g));
        rv.push_back(ref_var(g, 1));
        tv.push_back(1e-5 * rv.back());
        rm.push_back(ref_max(g));
      }
      check_values(got, r, t, detail::cat("sum ", s, " dim ", d));
      check_values(gotv, rv, tv, detail::cat("var ", s, " dim ", d));
      check_values(gotm, rm, std::vector<double>(rm.size(), 0.0), detail::cat("amax ", s, " dim ", d));
    }
  }
}

TEST_CASE("sum of 16M zero-mean randn floats is within 1e-6 of the sum of magnitudes") {
  const int64_t n = int64_t(1) << 24;
  const Tensor<float> x = normal_tensor({n}, 2024);
  const float* p = x.data_ptr();
  long double ref = 0, mag = 0;
  float naive = 0;
  for (int64_t i = 0; i < n; ++i) {
    ref += p[i];
    mag += std::abs(p[i]);
    naive += p[i];
  }
  const double got = kiln::sum(x).item();
  const double err = std::abs(got - double(ref)) / double(mag);
  MESSAGE("sum ", got, " reference ", double(ref), " relative to sum|x|: ", err, " (naive float loop: ",
          std::abs(double(naive) - double(ref)) / double(mag), ")");
  CHECK(err < 1e-6);
  const double mean_err = std::abs(double(kiln::mean(x).item()) - double(ref) / double(n)) / (double(mag) / double(n));
  CHECK(mean_err < 1e-6);
  // A fused expression reduces as accurately: sum((x - 1) * 2 + 2) == 2 * sum(x).
  CHECK(std::abs(double(kiln::sum((x - 1.0f) * 2.0f + 2.0f).item()) - 2 * double(ref)) / double(2 * mag) < 1e-6);
}

TEST_CASE("results are bitwise identical for 1 and 2 threads") {
  const int before = get_num_threads();
  const Tensor<float> x = normal_tensor({int64_t(1) << 22}, 77);
  const Tensor<float> m = normal_tensor({1024, 1030}, 78);
  auto run = [&] {
    std::vector<Tensor<float>> r;
    r.push_back(kiln::sum(x));
    r.push_back(kiln::mean(x * x - 0.5f));
    r.push_back(kiln::var(x));
    r.push_back(kiln::std(x.view({2048, 2048}), 0));
    r.push_back(kiln::norm(x));
    r.push_back(kiln::logsumexp(x));
    r.push_back(kiln::amax(x));
    r.push_back(kiln::sum(m, 0));
    r.push_back(kiln::sum(m, 1));
    r.push_back(kiln::sum(m.t(), 1));
    r.push_back(kiln::var(m, 0));
    r.push_back(kiln::sum(x.view({16, 512, 512}), {0, 2}));
    return r;
  };
  set_num_threads(1);
  const auto one = run();
  set_num_threads(2);
  const auto two = run();
  set_num_threads(before);
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    REQUIRE(one[i].shape() == two[i].shape());
    CHECK_MESSAGE(std::memcmp(one[i].data_ptr(), two[i].data_ptr(), size_t(one[i].numel()) * sizeof(float)) == 0,
                  "result ", i, " differs between 1 and 2 threads");
  }
}

TEST_CASE("a reduced expression is never materialized") {
  const Tensor<float> a = normal_tensor({500, 300}, 1), b = normal_tensor({500, 300}, 2);
  const MemoryStats before = memory_stats();
  const Tensor<float> s = kiln::sum(a * b + sin(a));
  const Tensor<float> r = kiln::sum(a * b, 1);
  const MemoryStats after = memory_stats();
  CHECK(after.allocations - before.allocations == 2);  // the two results only
  const Tensor<float> ref = a * b + sin(a);
  CHECK(s.item() == doctest::Approx(ref_sum(values_of(ref))).epsilon(1e-5));
  CHECK(r.shape() == Shape{500});
}

TEST_CASE("empty reductions follow PyTorch") {
  const Tensor<float> e = empty<float>({0});
  CHECK(kiln::sum(e).item() == 0);
  CHECK(kiln::prod(e).item() == 1);
  CHECK(std::isnan(kiln::mean(e).item()));
  CHECK(std::isnan(kiln::var(e).item()));
  CHECK(kiln::norm(e).item() == 0);
  const Tensor<float> z = empty<float>({3, 0});
  CHECK(kiln::sum(z, 1).to_vector() == std::vector<float>{0, 0, 0});
  CHECK(kiln::sum(z, 0).shape() == Shape{0});
  CHECK(kiln::amax(z, 0).shape() == Shape{0});  // nothing to reduce into
  CHECK_THROWS_WITH_AS(kiln::max(e), "max: cannot reduce over dim 0 of size 0 (input shape [0]): the operation has no identity",
                       std::invalid_argument);
  CHECK_THROWS_AS(kiln::amax(z, 1), std::invalid_argument);
  CHECK_THROWS_AS(kiln::argmax(z, 1), std::invalid_argument);
  CHECK_THROWS_AS(kiln::max(z, 1), std::invalid_argument);
  CHECK_THROWS_AS(kiln::argmin(e), std::invalid_argument);
}

TEST_CASE("bad dims name the op and the dim") {
  const Tensor<float> x = normal_tensor({2, 3}, 1);
  CHECK_THROWS_WITH_AS(kiln::sum(x, 2), "sum: dim 2 is out of range for a tensor of 2 dims (expected in [-2, 1])",
                       std::out_of_range);
  CHECK_THROWS_WITH_AS(kiln::mean(x, {0, -3}), "mean: dim -3 is out of range for a tensor of 2 dims (expected in [-2, 1])",
                       std::out_of_range);
  CHECK_THROWS_AS(kiln::argmax(x, 5), std::out_of_range);
  CHECK_THROWS_AS(kiln::var(x * 2.0f, {7}), std::out_of_range);
  CHECK_THROWS_WITH_AS(kiln::sum(x, {1, -1}), "sum: dim 1 appears more than once in the list of dims [1, -1]",
                       std::invalid_argument);
  CHECK_THROWS_AS(kiln::cumsum(x, -3), std::out_of_range);
  CHECK_THROWS_AS(kiln::topk(x, 4, 1), std::out_of_range);
  // A 0-dim tensor reduces over dim 0 or -1, as in PyTorch.
  const Tensor<float> s = kiln::sum(x);
  CHECK(kiln::sum(s, 0).item() == s.item());
  CHECK(kiln::amax(s, {-1}, true).dim() == 0);
}

TEST_CASE("an expression whose leaf changed after it was built throws") {
  Tensor<float> a = normal_tensor({10}, 1);
  const auto e = a * 2.0f;
  a += 1.0f;
  CHECK_THROWS_AS(kiln::sum(e), StaleExpressionError);
  CHECK_THROWS_AS(kiln::argmax(e, 0), StaleExpressionError);
}

TEST_CASE("cumsum along each dim; integers give int64") {
  for (const Shape& s : {Shape{1}, Shape{17}, Shape{5, 7, 3}, Shape{2, 3000}, Shape{3000, 5}, Shape{4, 0}}) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      const Tensor<float> x = make_input(s, layout, 3);
      const auto v = values_of(x);
      for (int d = -s.size(); d < s.size(); ++d) {
        const int k = d < 0 ? d + s.size() : d;
        const Tensor<float> c = kiln::cumsum(x, d);
        REQUIRE(c.shape() == s);
        const auto got = values_of(c);
        int64_t inner = 1;
        for (int i = k + 1; i < s.size(); ++i) inner *= s[i];
        std::vector<double> ref(v.size()), tol(v.size());
        std::vector<double> mag(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
          const int64_t pos = (int64_t(i) / inner) % s[k];
          ref[i] = v[i] + (pos > 0 ? ref[i - size_t(inner)] : 0.0);
          mag[i] = std::abs(v[i]) + (pos > 0 ? mag[i - size_t(inner)] : 0.0);
          tol[i] = 1e-6 * mag[i] + 1e-30;
        }
        check_values(got, ref, tol, describe(s, {d}, false, name(layout)));
      }
    }
  }
  const Tensor<int32_t> i = tensor<int32_t>({{2000000000, 2000000000}, {1, -1}});
  CHECK(kiln::cumsum(i, 1).to_vector() == std::vector<int64_t>{2000000000, 4000000000, 1, 0});
  CHECK(kiln::cumsum(tensor<bool>({true, false, true}), 0).to_vector() == std::vector<int64_t>{1, 1, 2});
  const Tensor<float> a = tensor<float>({1, 2, 3});
  CHECK(kiln::cumsum(a * 2.0f, 0).to_vector() == std::vector<float>{2, 6, 12});
}

TEST_CASE("topk matches std::partial_sort along any dim, largest and smallest") {
  for (const Shape& s : {Shape{1}, Shape{50}, Shape{7, 33}, Shape{33, 7}, Shape{3, 10, 4}}) {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      const Tensor<float> x = make_input(s, layout, 8);
      const auto v = values_of(x);
      for (int d = 0; d < s.size(); ++d) {
        for (int64_t k : {int64_t(1), std::min<int64_t>(3, s[d]), s[d]}) {
          for (bool largest : {true, false}) {
            auto [tv, ti] = kiln::topk(x, k, d, largest);
            Shape os = s;
            os[d] = k;
            REQUIRE(tv.shape() == os);
            REQUIRE(ti.shape() == os);
            const auto got = values_of(tv), idx = values_of(ti);
            int64_t inner = 1;
            for (int i = d + 1; i < s.size(); ++i) inner *= s[i];
            const int64_t outer = numel_of(s) / (s[d] * inner);
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t c = 0; c < inner; ++c) {
                std::vector<double> line;
                for (int64_t i = 0; i < s[d]; ++i) line.push_back(v[size_t((o * s[d] + i) * inner + c)]);
                std::vector<double> sorted = line;
                if (largest) std::partial_sort(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<>());
                else std::partial_sort(sorted.begin(), sorted.begin() + k, sorted.end());
                for (int64_t j = 0; j < k; ++j) {
                  const size_t at = size_t((o * k + j) * inner + c);
                  CHECK(got[at] == sorted[size_t(j)]);
                  CHECK(line[size_t(idx[at])] == got[at]);
                }
              }
          }
        }
      }
    }
  }
  const Tensor<float> t = tensor<float>({3, NAN, 5, 5, -1});
  auto [v, i] = kiln::topk(t, 3);
  CHECK(std::isnan(v.to_vector()[0]));
  CHECK(i.to_vector() == std::vector<int64_t>{1, 2, 3});  // NaN first, then ties by index
  auto [sv, si] = kiln::topk(t, 2, 0, /*largest=*/false);
  CHECK(sv.to_vector() == std::vector<float>{-1, 3});
  CHECK(si.to_vector() == std::vector<int64_t>{4, 0});
  auto [iv, ii] = kiln::topk(tensor<int64_t>({4, 9, 1}), 2);
  CHECK(iv.to_vector() == std::vector<int64_t>{9, 4});
  auto [ev, ei] = kiln::topk(tensor<float>({1, 2}) * 3.0f, 0);
  CHECK(ev.numel() == 0);
}

TEST_CASE("sort and argsort: ascending and descending along a dim, stable, NaN last ascending and first descending") {
  const Tensor<float> t = tensor<float>({3, NAN, 5, -1, 5, 3, 0, NAN}).view({2, 4});
  auto [up, up_at] = kiln::sort(t, 1);
  CHECK(up_at.to_vector() == std::vector<int64_t>{3, 0, 2, 1, 2, 1, 0, 3});
  CHECK(up.select(0, 1).to_vector()[0] == 0.0f);
  CHECK(std::isnan(up.to_vector()[3]));
  auto [down, down_at] = kiln::sort(t, 1, /*descending=*/true);
  CHECK(down_at.to_vector() == std::vector<int64_t>{1, 2, 0, 3, 3, 0, 1, 2});
  CHECK(kiln::argsort(t, 0).to_vector() == std::vector<int64_t>{0, 1, 1, 0, 1, 0, 0, 1});
  CHECK(kiln::argsort(tensor<int64_t>({2, 1, 2, 0}), -1).to_vector() == std::vector<int64_t>{3, 1, 0, 2});  // stable
  // The gradient goes back to each value's place.
  Tensor<float> x = tensor<float>({2, -1, 4});
  x.requires_grad_();
  kiln::sum(std::get<0>(kiln::sort(x)) * tensor<float>({1, 10, 100})).backward();
  CHECK(x.grad().to_vector() == std::vector<float>{10, 1, 100});
}

}  // namespace test_tensor_reduce
