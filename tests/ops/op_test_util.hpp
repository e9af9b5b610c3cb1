#pragma once
// Helpers of the table-driven op tests: type lists built from the registry, ULP distance,
// input sampling over an op's domain.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kiln/cpu/simd_target.hpp"
#include "kiln/tensor/factory.hpp"

namespace kiln::test {

template <class Tuple>
struct drop_first;
template <class First, class... Rest>
struct drop_first<std::tuple<First, Rest...>> {
  using type = std::tuple<Rest...>;
};

#define KILN_TEST_AS_TYPE(fn, Op) , ::kiln::ops::Op
using UnaryOps = drop_first<std::tuple<void KILN_UNARY_OPS(KILN_TEST_AS_TYPE)>>::type;
// The binary entries, with those whose second operand is always a number (KILN_BINARY_NUMBER_OPS).
using BinaryOps =
    drop_first<std::tuple<void KILN_BINARY_OPS(KILN_TEST_AS_TYPE) KILN_BINARY_NUMBER_OPS(KILN_TEST_AS_TYPE)>>::type;
#undef KILN_TEST_AS_TYPE

// A binary entry whose derivative has no gradient for its second operand (no_grad): that operand is a number
// (KILN_BINARY_NUMBER_OPS), so the gradient tests give it one and check the first operand's gradient only.
template <class Op>
constexpr bool number_second_operand() {
  if constexpr (ops::is_differentiable<Op>())
    return std::is_same_v<std::remove_cvref_t<std::tuple_element_t<1, decltype(Op::grad(1.0, 2.0, 2.0, 1.0))>>, NoGrad>;
  else return false;
}

// Which dtypes an op accepts, from its kind.
template <class Op, class T>
constexpr bool accepts() {
  if constexpr (std::is_base_of_v<ops::LogicalOp, Op>) return std::is_same_v<T, bool>;
  else if constexpr (std::is_base_of_v<ops::FloatOp, Op>) return std::is_floating_point_v<T>;
  else return !std::is_same_v<T, bool>;
}

// Distance in units in the last place between two finite values of T (0 when equal).
template <class T>
double ulp_distance(T a, T b) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  auto ordered = [](T v) {
    const I i = std::bit_cast<I>(v);
    return i < 0 ? std::numeric_limits<I>::min() - i : i;
  };
  const long double d = (long double)ordered(a) - (long double)ordered(b);
  return double(d < 0 ? -d : d);
}

// Same value as the reference, up to max_ulp; NaN matches NaN, infinities match exactly.
template <class T>
bool matches(T got, T want, double max_ulp) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return ulp_distance(got, want) <= max_ulp;
}

// Samples of [lo, hi]: uniform, plus log-uniform magnitudes when the range spans decades, plus
// the ends; deterministic.
template <class T>
std::vector<T> domain_samples(double lo, double hi, size_t n, uint32_t seed = 12345) {
  std::mt19937_64 rng(seed);
  std::vector<T> v;
  v.push_back(T(lo));
  v.push_back(T(hi));
  std::uniform_real_distribution<double> uni(lo, hi);
  for (size_t i = 0; i < n / 2; ++i) v.push_back(T(uni(rng)));
  const double amax = std::max(std::abs(lo), std::abs(hi));
  const double amin = lo > 0 ? lo : 1e-6;
  if (amax / amin > 1e3) {
    std::uniform_real_distribution<double> expo(std::log(amin), std::log(amax));
    while (v.size() < n) {
      const double m = std::exp(expo(rng));
      const double x = (lo < 0 && (rng() & 1)) ? -m : m;
      if (x >= lo && x <= hi) v.push_back(T(x));
    }
  }
  while (v.size() < n) v.push_back(T(uni(rng)));
  return v;
}

template <class T>
std::vector<T> special_values() {
  using L = std::numeric_limits<T>;
  return {T(0), -T(0), L::infinity(), -L::infinity(), L::quiet_NaN(), L::denorm_min(), -L::denorm_min(),
          L::min(), L::max(), L::lowest(), T(1), T(-1), T(0.5), T(-0.5), T(2), T(100), T(-100), T(1e-20)};
}

}  // namespace kiln::test
