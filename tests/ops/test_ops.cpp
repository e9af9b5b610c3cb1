// Table-driven tests of every op in the registry: the fused (SIMD) result against the op's float64
// reference within its stated ULP over its domain, special values against std::, lengths around
// the vector width, non-contiguous and broadcast views, and integer and bool dtypes. No per-op code.
#include <doctest/doctest.h>

#include "op_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_ops_ops {

using namespace kiln;
using namespace kiln::test;

namespace {

template <class T>
Tensor<T> from(const std::vector<T>& v) {
  return tensor<T>(v);
}

// The reference is computed in a wider type than T (double for float, long double for double), so
// its own rounding does not count against the op; except for ops the table calls exact (max_ulp 0:
// IEEE add, mul, div, sqrt...), whose correctly rounded result is the op in T itself (rounding a
// wider result again can be off by one ULP).
template <class Op, class T>
using wider_t = std::conditional_t<Op::info.max_ulp == 0, T,
                                   std::conditional_t<std::is_same_v<T, float>, double, long double>>;

// Reference of a unary op at x, rounded to T.
template <class Op, class T>
T unary_reference(T x) {
  if constexpr (std::is_floating_point_v<T>) return T(Op::template scalar<wider_t<Op, T>>(wider_t<Op, T>(x)));
  else return Op::scalar(x);
}

template <class Op, class T>
void check_unary_domain() {
  const auto xs = domain_samples<T>(Op::info.lo, Op::info.hi, 50001);
  const std::vector<T> got = Tensor<T>(map<Op>(from(xs))).to_vector();
  double worst = 0;
  T worst_x = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const T want = unary_reference<Op>(xs[i]);
    if (!matches(got[i], want, Op::info.max_ulp)) {
      const double u = std::isfinite(got[i]) && std::isfinite(want) ? ulp_distance(got[i], want) : 1e30;
      if (u > worst) worst = u, worst_x = xs[i];
    }
  }
  INFO(Op::name, " on ", std::string(dtype_name(scalar_type_of<T>())), ": worst ", worst, " ULP at x = ", worst_x,
       " (allowed ", Op::info.max_ulp, ")");
  CHECK(worst == 0);
}

template <class Op, class T>
void check_unary_specials() {
  const auto xs = special_values<T>();
  const std::vector<T> got = Tensor<T>(map<Op>(from(xs))).to_vector();
  for (size_t i = 0; i < xs.size(); ++i) {
    // The std:: function in T itself is the reference for special values.
    const T want = T(Op::scalar(xs[i]));
    const bool in_domain = double(xs[i]) >= Op::info.lo && double(xs[i]) <= Op::info.hi;
    if (!std::isfinite(xs[i]) || std::isnan(want) || std::isinf(want) || xs[i] == T(0) || in_domain) {
      INFO(Op::name, "(", xs[i], ") on ", std::string(dtype_name(scalar_type_of<T>())), ": got ", got[i], ", std gives ", want);
      CHECK(matches(got[i], want, std::max(Op::info.max_ulp, 1.0)));
      if (want == T(0) && !std::isnan(got[i])) CHECK(std::signbit(got[i]) == std::signbit(want));
    }
  }
}

// Every length from 1 to 3 vectors + 1, so each tail size occurs; values match element by element
// whatever their position.
template <class Op, class T>
void check_lengths_and_views() {
  const auto pool = domain_samples<T>(std::max(Op::info.lo, -50.0), std::min(Op::info.hi, 50.0), 512, 7);
  for (size_t n = 1; n <= 3 * simd_float_lanes() + 1; ++n) {
    const std::vector<T> xs(pool.begin(), pool.begin() + long(n));
    const std::vector<T> got = Tensor<T>(map<Op>(from(xs))).to_vector();
    for (size_t i = 0; i < n; ++i) {
      INFO(Op::name, " length ", n, " index ", i);
      CHECK(matches(got[i], unary_reference<Op>(xs[i]), Op::info.max_ulp));
    }
  }
  // A transposed, a strided and a broadcast read give the same values as contiguous reads.
  Tensor<T> m = from(std::vector<T>(pool.begin(), pool.begin() + 12 * 17)).view({12, 17});
  const std::vector<T> expect = Tensor<T>(map<Op>(m.t().contiguous())).to_vector();
  CHECK(Tensor<T>(map<Op>(m.t())).to_vector() == expect);
  const std::vector<T> strided = Tensor<T>(map<Op>(m.slice(1, 1, 17, 3))).to_vector();
  const std::vector<T> strided_ref = Tensor<T>(map<Op>(m.slice(1, 1, 17, 3).contiguous())).to_vector();
  CHECK(strided == strided_ref);
  Tensor<T> row = m.select(0, 3);
  const std::vector<T> bcast = Tensor<T>(map<Op>(row.unsqueeze(0).expand({5, 17}))).to_vector();
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 17; ++c) CHECK(matches(bcast[r * 17 + c], unary_reference<Op>(pool[3 * 17 + c]), Op::info.max_ulp));
}

template <class Op, class T>
void check_unary() {
  if constexpr (accepts<Op, T>()) {
    if constexpr (std::is_floating_point_v<T>) {
      check_unary_domain<Op, T>();
      check_unary_specials<Op, T>();
      check_lengths_and_views<Op, T>();
    } else {
      std::vector<T> xs;
      for (int64_t v : {0, 1, -1, 2, -7, 100, -100, 12345}) xs.push_back(T(v));
      xs.push_back(std::numeric_limits<T>::max());
      xs.push_back(std::numeric_limits<T>::min());
      const std::vector<T> got = Tensor<T>(map<Op>(from(xs))).to_vector();
      for (size_t i = 0; i < xs.size(); ++i) {
        INFO(Op::name, "(", xs[i], ") on ", std::string(dtype_name(scalar_type_of<T>())));
        CHECK(got[i] == Op::scalar(xs[i]));
      }
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("unary op: fused result against its reference", Op, unary_ops) {
  check_unary<Op, float>();
  check_unary<Op, double>();
  check_unary<Op, int32_t>();
  check_unary<Op, int64_t>();
  if constexpr (accepts<Op, bool>()) {
    const std::vector<bool> xs{true, false, true, true, false};
    const Tensor<bool> t = empty<bool>({5});
    for (int i = 0; i < 5; ++i) t.data_ptr()[i] = xs[i];
    const Tensor<bool> r = map<Op>(t);
    for (int i = 0; i < 5; ++i) CHECK(r.data_ptr()[i] == Op::scalar(bool(xs[i])));
  }
}
TEST_CASE_TEMPLATE_APPLY(unary_ops, UnaryOps);

namespace {

template <class Op, class T>
void check_binary() {
  if constexpr (accepts<Op, T>()) {
    using R = typename Map<Op, Leaf<T>, Leaf<T>>::value_type;
    std::vector<T> a, b;
    if constexpr (std::is_floating_point_v<T>) {
      a = domain_samples<T>(Op::info.lo, Op::info.hi, 20001, 1);
      b = domain_samples<T>(Op::info.lo, Op::info.hi, 20001, 2);
      for (T s : special_values<T>())  // every pair of special values
        for (T t : special_values<T>()) a.push_back(s), b.push_back(t);
      for (size_t i = 0; i < 500; ++i) b[i] = a[i];  // ties matter for min/max and comparisons
    } else {
      std::mt19937 rng(3);
      std::uniform_int_distribution<int> dist(-1000, 1000);
      for (int i = 0; i < 2000; ++i) a.push_back(T(dist(rng))), b.push_back(T(dist(rng)));
      for (T s : {std::numeric_limits<T>::max(), std::numeric_limits<T>::min(), T(0), T(-1), T(1)})
        for (T t : {std::numeric_limits<T>::max(), std::numeric_limits<T>::min(), T(0), T(-1), T(1)})
          a.push_back(s), b.push_back(t);
    }
    const std::vector<R> got = Tensor<R>(map<Op>(from(a), from(b))).to_vector();
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      R want;
      if constexpr (std::is_floating_point_v<T>) {
        want = R(Op::template scalar<wider_t<Op, T>>(wider_t<Op, T>(a[i]), wider_t<Op, T>(b[i])));
        // Outside the sampled domain, the reference is the std:: function in T.
        if (i >= 20003) want = R(Op::scalar(a[i], b[i]));
      } else {
        want = Op::scalar(a[i], b[i]);
      }
      bool ok;
      if constexpr (std::is_floating_point_v<R>) ok = matches(got[i], want, std::max(Op::info.max_ulp, i >= 20003 ? 1.0 : 0.0));
      else ok = got[i] == want;
      if (!ok) {
        INFO(Op::name, "(", a[i], ", ", b[i], ") on ", std::string(dtype_name(scalar_type_of<T>())), ": got ", got[i], ", want ", want);
        CHECK(ok);
        if (++worst > 5) break;  // a few reports are enough
      }
    }
    CHECK(worst == 0);
    // Broadcast a column against a row, with a transposed operand.
    Tensor<T> col = from(std::vector<T>(a.begin(), a.begin() + 7)).view({7, 1});
    Tensor<T> rowt = from(std::vector<T>(b.begin(), b.begin() + 9)).view({9, 1}).t();
    const std::vector<R> outer = Tensor<R>(map<Op>(col, rowt)).to_vector();
    for (int i = 0; i < 7; ++i)
      for (int j = 0; j < 9; ++j) {
        R want;
        if constexpr (std::is_floating_point_v<T>) want = R(Op::template scalar<wider_t<Op, T>>(wider_t<Op, T>(a[i]), wider_t<Op, T>(b[j])));
        else want = Op::scalar(a[i], b[j]);
        if constexpr (std::is_floating_point_v<R>) CHECK(matches(outer[i * 9 + j], want, Op::info.max_ulp));
        else CHECK(outer[i * 9 + j] == want);
      }
  }
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("binary op: fused result against its reference", Op, binary_ops) {
  check_binary<Op, float>();
  check_binary<Op, double>();
  check_binary<Op, int32_t>();
  check_binary<Op, int64_t>();
  if constexpr (accepts<Op, bool>()) {
    Tensor<bool> a = empty<bool>({4, 1}), b = empty<bool>({1, 4});
    const bool va[] = {false, false, true, true}, vb[] = {false, true, false, true};
    for (int i = 0; i < 4; ++i) a.data_ptr()[i] = va[i], b.data_ptr()[i] = vb[i];
    const Tensor<bool> r = map<Op>(a, b);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) CHECK(r.data_ptr()[i * 4 + j] == Op::scalar(va[i], vb[j]));
  }
}
TEST_CASE_TEMPLATE_APPLY(binary_ops, BinaryOps);

TEST_CASE("clamp's number-bound entries are in the table-driven lists") {
  // clamp_min / clamp_max / clamp with number bounds build ops::ClampMin and ClampMax (KILN_BINARY_NUMBER_OPS),
  // so every table-driven test (these, the derivatives, gradcheck, CUDA codegen) runs them too.
  const auto listed = []<class Op>(std::type_identity<Op>) {
    return []<class... Ops>(std::type_identity<std::tuple<Ops...>>) {
      return (std::is_same_v<Op, Ops> || ...);
    }(std::type_identity<BinaryOps>{});
  };
  const Tensor<float> x = zeros<float>({3});
  CHECK(listed(std::type_identity<typename decltype(clamp_min(x, 0.5))::op_type>{}));
  CHECK(listed(std::type_identity<typename decltype(clamp_max(x, 0.5))::op_type>{}));
  CHECK(listed(std::type_identity<typename decltype(clamp(x, -0.5, 0.5))::op_type>{}));
  CHECK(number_second_operand<ops::ClampMin>());
  CHECK(!number_second_operand<ops::Maximum>());
}

}  // namespace test_ops_ops
