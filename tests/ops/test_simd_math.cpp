// Tests for include/kiln/ops/simd_math.hpp: accuracy in ULP against std::
// (computed in double for float lanes, long double for double lanes, rounded
// to the lane type), special values against std:: exactly, and that a lane's
// result does not depend on its position (full vectors, FirstN/MaskedLoad
// tails and 1-lane CappedTag vectors all give bitwise the same values).
//
// Set KILN_SIMD_MATH_VERBOSE=1 to print the measured max ULP per function.

#include <doctest/doctest.h>

#include <kiln/ops/simd_math.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_ops_simd_math {

namespace {

namespace hn = hwy::HWY_NAMESPACE;
namespace km = kiln::HWY_NAMESPACE::math;

bool Verbose() {
  static const bool v = std::getenv("KILN_SIMD_MATH_VERBOSE") != nullptr;
  return v;
}

// Reference type: double for float lanes, long double for double lanes.
template <class T>
using RefT = std::conditional_t<std::is_same_v<T, float>, double, long double>;

template <class T>
using UInt = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// Monotonic map of a non-NaN float to an integer (+0 and -0 both map to 0).
template <class T>
int64_t Ordered(T x) {
  UInt<T> u;
  std::memcpy(&u, &x, sizeof(T));
  constexpr UInt<T> kSign = UInt<T>(1) << (sizeof(T) * 8 - 1);
  const int64_t mag = static_cast<int64_t>(u & ~kSign);
  return (u & kSign) ? -mag : mag;
}

constexpr double kHuge = 1e30;

// Distance in ULP; NaN only matches NaN, a zero only matches a zero of the
// same sign (as std:: gives it).
template <class T>
double UlpDist(T got, T ref) {
  if (std::isnan(ref) || std::isnan(got)) return (std::isnan(ref) && std::isnan(got)) ? 0 : kHuge;
  if (got == 0 && ref == 0) return std::signbit(got) == std::signbit(ref) ? 0 : kHuge;
  const int64_t a = Ordered(got), b = Ordered(ref);
  return static_cast<double>(a > b ? a - b : b - a);
}

// Highway 1.0.3's MaskedLoad is an *aligned* full-vector Load plus a mask on
// SSSE3/SSE4 (only AVX2/AVX3 use real masked loads), so a tail at an
// arbitrary address would fault there: stage it in an aligned buffer.
template <class D, class T = hn::TFromD<D>>
hn::Vec<D> LoadTail(D d, const T* p, size_t count) {
  constexpr size_t kMax = hn::MaxLanes(d);
  HWY_ALIGN T buf[kMax] = {};
  for (size_t i = 0; i < count && i < kMax; ++i) buf[i] = p[i];
  return hn::MaskedLoad(hn::FirstN(d, count), d, buf);
}

// Applies F over [in, in + n) with full vectors of tag D and a FirstN +
// MaskedLoad / BlendedStore tail.
template <class D, class F, class T>
void ApplyD(D d, F f, const T* in, T* out, size_t n) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, in + i)), d, out + i);
  if (i < n) {
    hn::BlendedStore(f(d, LoadTail(d, in + i, n - i)), hn::FirstN(d, n - i), d, out + i);
  }
}

template <class F, class T>
std::vector<T> ApplyAll(F f, const std::vector<T>& in) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  std::vector<T> inp(in.size() + N, T(0));
  std::copy(in.begin(), in.end(), inp.begin());
  std::vector<T> out(in.size() + N, T(0));
  std::vector<T> out2(in.size() + N, T(0));
  // Pass 1: the whole array (full vectors, one tail at the end).
  ApplyD(d, f, inp.data(), out.data(), in.size());
  // Pass 2: segments of lengths 1, 2, ..., 2N + 1, 1, 2, ... so that each
  // value lands in other lanes and in tails; must be bitwise identical.
  size_t seg = 1;
  for (size_t i = 0; i < in.size();) {
    const size_t len = std::min(seg, in.size() - i);
    ApplyD(d, f, inp.data() + i, out2.data() + i, len);
    i += len;
    seg = seg % (2 * N + 1) + 1;
  }
  // Pass 3 (first 4096 values): 1-lane CappedTag vectors.
  const hn::CappedTag<T, 1> d1;
  std::vector<T> out3(in.size() + N, T(0));
  const size_t n3 = std::min<size_t>(in.size(), 4096);
  ApplyD(d1, f, inp.data(), out3.data(), n3);
  size_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const bool same2 = std::memcmp(&out[i], &out2[i], sizeof(T)) == 0 ||
                       (std::isnan(out[i]) && std::isnan(out2[i]));
    const bool same3 = i >= n3 || std::memcmp(&out[i], &out3[i], sizeof(T)) == 0 ||
                       (std::isnan(out[i]) && std::isnan(out3[i]));
    if (!same2 || !same3) ++mismatches;
  }
  CHECK_MESSAGE(mismatches == 0, "lane position changed a result");
  out.resize(in.size());
  return out;
}

// ---------------------------------------------------------------- inputs

template <class T>
void AddUniform(std::vector<T>& v, std::mt19937_64& rng, double lo, double hi, size_t n) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (size_t i = 0; i < n; ++i) v.push_back(static_cast<T>(u(rng)));
}

// |x| log-uniform in [lo, hi] (lo > 0), both signs if `both`.
template <class T>
void AddLog(std::vector<T>& v, std::mt19937_64& rng, double lo, double hi, size_t n, bool both) {
  std::uniform_real_distribution<double> u(std::log2(lo), std::log2(hi));
  std::uniform_real_distribution<double> m(1.0, 2.0);
  for (size_t i = 0; i < n; ++i) {
    const double e = std::floor(u(rng));
    T x = static_cast<T>(std::ldexp(m(rng), static_cast<int>(e)));
    const bool in_range = std::fabs(x) >= static_cast<T>(lo) && std::fabs(x) <= static_cast<T>(hi);
    if (x == 0 || !in_range) continue;
    if (both && (i & 1)) x = -x;
    v.push_back(x);
  }
}

// ---------------------------------------------------------------- checks

template <class T>
struct Stats {
  double max_ulp = 0;
  T worst_x = 0;
  T worst_got = 0;
  T worst_ref = 0;
};

template <class Op, class T>
T Ref(T x) {
  return static_cast<T>(Op::ref(static_cast<RefT<T>>(x)));
}

template <class Op, class T>
Stats<T> Measure(const std::vector<T>& xs) {
  const auto got = ApplyAll([](auto d, auto v) { return Op::simd(d, v); }, xs);
  Stats<T> s;
  for (size_t i = 0; i < xs.size(); ++i) {
    const T ref = Ref<Op>(xs[i]);
    const double u = UlpDist(got[i], ref);
    if (u > s.max_ulp) s = {u, xs[i], got[i], ref};
  }
  return s;
}

const char* TypeName(float) { return "float"; }
const char* TypeName(double) { return "double"; }

template <class Op, class T>
void CheckAccuracy(const std::vector<T>& xs, double bound, const char* domain) {
  const Stats<T> s = Measure<Op>(xs);
  if (Verbose()) {
    std::printf("%-9s %-6s max %2.0f ulp over %s (%zu pts); worst x=%.9g got=%.17g ref=%.17g\n",
                Op::name, TypeName(T()), s.max_ulp, domain, xs.size(), double(s.worst_x),
                double(s.worst_got), double(s.worst_ref));
  }
  INFO(Op::name, " ", TypeName(T()), " worst x=", double(s.worst_x), " got=", double(s.worst_got),
       " ref=", double(s.worst_ref));
  CHECK(s.max_ulp <= bound);
}

// Special values: NaN-ness, infinities and zero signs exactly as std::,
// finite results within the bound.
// `with_max`: also check +-max (false for sin/cos/tan, whose valid range is
// [-39000, 39000]).
template <class Op, class T>
void CheckSpecials(std::vector<T> xs, double bound, bool with_max = true) {
  using L = std::numeric_limits<T>;
  for (T v : {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity(), T(0), T(-0.0),
              L::denorm_min(), -L::denorm_min(), T(3) * L::denorm_min(), L::min(), -L::min(),
              L::min() / 2, -L::min() / 2, T(1), T(-1), L::epsilon(), -L::epsilon()}) {
    xs.push_back(v);
  }
  if (with_max) {
    xs.push_back(L::max());
    xs.push_back(-L::max());
  }
  const auto got = ApplyAll([](auto d, auto v) { return Op::simd(d, v); }, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    const T ref = Ref<Op>(xs[i]);
    INFO(Op::name, " ", TypeName(T()), " x=", double(xs[i]), " got=", double(got[i]),
         " ref=", double(ref));
    if (std::isnan(ref) || std::isinf(ref) || ref == 0) {
      CHECK(UlpDist(got[i], ref) == 0);
    } else {
      CHECK(UlpDist(got[i], ref) <= bound);
    }
  }
}

template <class T>
T Next(T x, double dir) {
  return std::nextafter(x, static_cast<T>(dir));
}

// ------------------------------------------------------------------ ops

#define SIMD_MATH_TEST_OP(Name, fn, expr) \
  struct Name {                            \
    static constexpr const char* name = fn; \
    template <class D, class V>            \
    static V simd(D d, V x) {              \
      return km::Name(d, x);               \
    }                                      \
    template <class R>                     \
    static R ref(R x) {                    \
      return expr;                         \
    }                                      \
  };

namespace ops {
SIMD_MATH_TEST_OP(Exp, "exp", std::exp(x))
SIMD_MATH_TEST_OP(Exp2, "exp2", std::exp2(x))
SIMD_MATH_TEST_OP(Expm1, "expm1", std::expm1(x))
SIMD_MATH_TEST_OP(Log, "log", std::log(x))
SIMD_MATH_TEST_OP(Log2, "log2", std::log2(x))
SIMD_MATH_TEST_OP(Log1p, "log1p", std::log1p(x))
SIMD_MATH_TEST_OP(Sin, "sin", std::sin(x))
SIMD_MATH_TEST_OP(Cos, "cos", std::cos(x))
SIMD_MATH_TEST_OP(Tan, "tan", std::tan(x))
SIMD_MATH_TEST_OP(Tanh, "tanh", std::tanh(x))
SIMD_MATH_TEST_OP(Sigmoid, "sigmoid", R(1) / (R(1) + std::exp(-x)))
// PyTorch's softplus: x above the threshold 20, else the stable form of log1p(exp(x)).
SIMD_MATH_TEST_OP(Softplus, "softplus",
                  x > 20 ? x : (x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x))))
SIMD_MATH_TEST_OP(Erf, "erf", std::erf(x))
}  // namespace ops

constexpr size_t kUniform = 100000;
constexpr size_t kLogSweep = 50000;

template <class T>
constexpr bool kF32 = std::is_same_v<T, float>;

// Smallest subnormal: lower end of the logarithmic sweeps.
template <class T>
double Tiny() {
  return double(std::numeric_limits<T>::denorm_min());
}

// Runs the accuracy sweep and the special values of one op and lane type.
template <class Op, class T>
void RunUnary(double bound, double lo, double hi, double log_lo, double log_hi, bool log_both,
              std::vector<T> extra_specials, uint64_t seed, bool with_max = true) {
  std::mt19937_64 rng(seed);
  std::vector<T> xs;
  AddUniform(xs, rng, lo, hi, kUniform);
  AddLog(xs, rng, log_lo, log_hi, kLogSweep, log_both);
  char domain[160];
  std::snprintf(domain, sizeof(domain), "[%g, %g] + |x| in [%g, %g]%s", lo, hi, log_lo, log_hi,
                log_both ? " both signs" : "");
  CheckAccuracy<Op>(xs, bound, domain);
  CheckSpecials<Op>(std::move(extra_specials), bound, with_max);
}

// The float nearest to k * pi/2 and its neighbours for random k < 24800
// (|x| < 39000): results near the zeros of sin/cos and the poles of tan.
template <class T>
std::vector<T> NearHalfPiMultiples(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> uk(1, 24800);
  std::vector<T> xs;
  const long double half_pi = 1.570796326794896619231321691639751442L;
  for (int i = 0; i < 8000; ++i) {
    const T x = static_cast<T>(uk(rng) * half_pi);
    for (T v : {x, Next(x, 0), Next(x, 1e6), Next(Next(x, 0), 0), Next(Next(x, 1e6), 1e6)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  return xs;
}

}  // namespace

// The bounds below are the "Max Error" figures documented in simd_math.hpp.

TEST_CASE("simd_math traits") {
  static_assert(km::kHasExp<float> && km::kHasExp<double>);
  static_assert(km::kHasErf<float> && km::kHasErf<double>);
  static_assert(km::kHasPow<float> && !km::kHasPow<double>);
  static_assert(!km::kHasExp<int>);
  if (Verbose()) std::printf("target: %s\n", hwy::TargetName(HWY_TARGET));
  CHECK(true);
}

TEST_CASE_TEMPLATE("simd_math exp", T, float, double) {
  const double hi = kF32<T> ? 89 : 710, lo = kF32<T> ? -104 : -746;
  const T maxlog = kF32<T> ? T(88.72283172607421875) : T(709.782712893384);
  RunUnary<ops::Exp, T>(1, lo, hi, Tiny<T>(), hi, true,
                        {maxlog, Next(maxlog, 1000), Next(maxlog, 0), T(lo), T(lo - 1), T(-745.2),
                         T(-87.4), T(-103.9), T(100), T(1000), T(-1000), T(-1e30)},
                        1);
}

TEST_CASE_TEMPLATE("simd_math exp2", T, float, double) {
  const double hi = kF32<T> ? 129 : 1025, lo = kF32<T> ? -151 : -1076;
  RunUnary<ops::Exp2, T>(1, lo, hi, Tiny<T>(), hi, true,
                         {T(128), Next(T(128), 0), T(127.99), T(-126), T(-149), T(-150), T(-149.5),
                          T(-1074), T(-1075), T(1023.9), T(1024), T(3), T(-3), T(0.5), T(1e6),
                          T(-1e6)},
                         2);
}

TEST_CASE_TEMPLATE("simd_math expm1", T, float, double) {
  const double hi = kF32<T> ? 89 : 710, lo = kF32<T> ? -20 : -40;
  RunUnary<ops::Expm1, T>(1, lo, hi, Tiny<T>(), hi, true,
                          {T(88.7), T(89), T(100), T(709), T(710), T(-17.3), T(-18), T(-37),
                           T(-100), T(1e-10), T(-1e-10), T(0.3466), T(-0.3466)},
                          3);
}

TEST_CASE_TEMPLATE("simd_math log", T, float, double) {
  using L = std::numeric_limits<T>;
  RunUnary<ops::Log, T>(1, 0.25, 4, double(L::denorm_min()), double(L::max()), false,
                        {T(-1), T(-1e-30), -L::denorm_min(), T(2), T(0.5), T(1024),
                         Next(T(1), 0), Next(T(1), 2)},
                        4);
}

TEST_CASE_TEMPLATE("simd_math log2", T, float, double) {
  using L = std::numeric_limits<T>;
  RunUnary<ops::Log2, T>(1, 0.25, 4, double(L::denorm_min()), double(L::max()), false,
                         {T(-1), T(-1e-30), T(2), T(0.5), T(1024), T(0x1p-140), T(8),
                          Next(T(1), 0), Next(T(1), 2)},
                         5);
}

TEST_CASE_TEMPLATE("simd_math log1p", T, float, double) {
  using L = std::numeric_limits<T>;
  RunUnary<ops::Log1p, T>(1, -1, 4, double(L::denorm_min()), double(L::max()), false,
                          {T(-1), Next(T(-1), 0), Next(T(-1), -2), T(-2), T(-1e30), T(1e30),
                           T(-0.5), T(1e-20), T(-1e-20), -L::denorm_min()},
                          6);
  // Negative side of the log sweep: (-1, -tiny].
  std::mt19937_64 rng(66);
  std::vector<T> xs;
  AddLog(xs, rng, double(L::denorm_min()), 0.999, kLogSweep, false);
  for (T& x : xs) x = -x;
  CheckAccuracy<ops::Log1p>(xs, 1, "-(|x| in [denorm_min, 0.999])");
}

TEST_CASE_TEMPLATE("simd_math sin cos", T, float, double) {
  const std::vector<T> sp = {T(39000), T(-39000), T(3.14159265358979), T(1.5707963267948966),
                             T(-1.5707963267948966), T(6.283185307179586), T(1e-20), T(-1e-20),
                             T(100), T(-100)};
  RunUnary<ops::Sin, T>(1, -39000, 39000, Tiny<T>(), 39000, true, sp, 7, /*with_max=*/false);
  RunUnary<ops::Cos, T>(1, -39000, 39000, Tiny<T>(), 39000, true, sp, 8, /*with_max=*/false);
  std::mt19937_64 rng(78);
  std::vector<T> xs;
  AddUniform(xs, rng, -6.3, 6.3, kUniform);
  CheckAccuracy<ops::Sin>(xs, 1, "[-6.3, 6.3]");
  CheckAccuracy<ops::Cos>(xs, 1, "[-6.3, 6.3]");
  const std::vector<T> near = NearHalfPiMultiples<T>(79);
  CheckAccuracy<ops::Sin>(near, 1, "floats nearest k*pi/2, |x| < 39000");
  CheckAccuracy<ops::Cos>(near, 1, "floats nearest k*pi/2, |x| < 39000");
}

TEST_CASE_TEMPLATE("simd_math tan", T, float, double) {
  const T hp = T(1.5707963267948966);
  RunUnary<ops::Tan, T>(2, -39000, 39000, Tiny<T>(), 39000, true,
                        {hp, Next(hp, 0), Next(hp, 2), -hp, T(3.14159265358979), T(0.785398163),
                         T(39000), T(-39000), T(1e-20), T(-1e-20)},
                        9, /*with_max=*/false);
  std::mt19937_64 rng(99);
  std::vector<T> xs;
  AddUniform(xs, rng, -6.3, 6.3, kUniform);
  CheckAccuracy<ops::Tan>(xs, 2, "[-6.3, 6.3]");
  CheckAccuracy<ops::Tan>(NearHalfPiMultiples<T>(98), 2,
                          "floats nearest k*pi/2, |x| < 39000");
}

TEST_CASE_TEMPLATE("simd_math tanh", T, float, double) {
  RunUnary<ops::Tanh, T>(2, -20, 20, Tiny<T>(), 50, true,
                         {T(9), T(9.1), T(-9.1), T(19), T(19.1), T(20), T(1e-10), T(-1e-10),
                          T(0.55), T(-0.55)},
                         10);
}

TEST_CASE_TEMPLATE("simd_math sigmoid", T, float, double) {
  const double r = kF32<T> ? 110 : 750;
  RunUnary<ops::Sigmoid, T>(2, -r, r, Tiny<T>(), r, true,
                            {T(-87), T(-88.8), T(-103), T(-104), T(-105), T(17), T(40), T(-40),
                             T(-745), T(-746), T(710)},
                            11);
}

TEST_CASE_TEMPLATE("simd_math softplus", T, float, double) {
  const double r = kF32<T> ? 110 : 750;
  RunUnary<ops::Softplus, T>(1, -r, r, Tiny<T>(), r, true,
                             {T(20), Next(T(20), 30), T(-20), T(36), Next(T(36), 40), T(-90),
                              T(-104), T(-110), T(-745), T(-800), T(1e30), T(-1e30)},
                             12);
}

TEST_CASE_TEMPLATE("simd_math erf", T, float, double) {
  RunUnary<ops::Erf, T>(1, -6.5, 6.5, Tiny<T>(), 10, true,
                        {T(1), Next(T(1), 0), T(-1), T(3.93), Next(T(3.93), 0), T(5.93),
                         Next(T(5.93), 0), T(0.5), T(-0.5), T(1e-20)},
                        13);
}

// ------------------------------------------------------------------ pow

namespace {

std::vector<float> PowSimd(const std::vector<float>& xs, const std::vector<float>& ys) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const size_t n = xs.size();
  std::vector<float> x(n + N, 1.0f), y(n + N, 1.0f), out(n + N, 0.0f);
  std::copy(xs.begin(), xs.end(), x.begin());
  std::copy(ys.begin(), ys.end(), y.begin());
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(km::Pow(d, hn::LoadU(d, &x[i]), hn::LoadU(d, &y[i])), d, &out[i]);
  }
  if (i < n) {
    hn::BlendedStore(km::Pow(d, LoadTail(d, &x[i], n - i), LoadTail(d, &y[i], n - i)),
                     hn::FirstN(d, n - i), d, &out[i]);
  }
  // Same values through 1-lane vectors (a tail-sized tag).
  const hn::CappedTag<float, 1> d1;
  for (size_t j = 0; j < n; ++j) {
    const float r1 = hn::GetLane(km::Pow(d1, hn::Set(d1, x[j]), hn::Set(d1, y[j])));
    if (!(std::memcmp(&r1, &out[j], 4) == 0 || (std::isnan(r1) && std::isnan(out[j])))) {
      FAIL_CHECK("pow: 1-lane result differs at x=", x[j], " y=", y[j]);
      break;
    }
  }
  out.resize(n);
  return out;
}

float PowRef(float x, float y) { return static_cast<float>(std::pow(double(x), double(y))); }

}  // namespace

TEST_CASE("simd_math pow float") {
  std::mt19937_64 rng(14);
  std::vector<float> xs, ys;
  std::uniform_real_distribution<double> ux(-20, 20), uy(-40, 40), um(1, 2), uy2(-3, 3);
  // Positive x log-uniform in 2^[-20, 20], y uniform in [-40, 40] (results
  // cover overflow, underflow and subnormals).
  for (int i = 0; i < 100000; ++i) {
    xs.push_back(static_cast<float>(std::ldexp(um(rng), static_cast<int>(std::floor(ux(rng))))));
    ys.push_back(static_cast<float>(uy(rng)));
  }
  // x near 1 with large y; x anywhere with small y.
  for (int i = 0; i < 50000; ++i) {
    xs.push_back(static_cast<float>(1 + (um(rng) - 1.5) * 1e-3));
    ys.push_back(static_cast<float>(uy(rng) * 1e3));
    xs.push_back(static_cast<float>(std::ldexp(um(rng), int(std::floor(ux(rng) * 6)))));
    ys.push_back(static_cast<float>(uy2(rng)));
  }
  // Negative x with integer y.
  for (int i = 0; i < 50000; ++i) {
    xs.push_back(-static_cast<float>(std::ldexp(um(rng), int(std::floor(ux(rng) / 4)))));
    ys.push_back(std::round(static_cast<float>(uy(rng))));
  }
  const auto got = PowSimd(xs, ys);
  double max_ulp = 0;
  size_t worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double u = UlpDist(got[i], PowRef(xs[i], ys[i]));
    if (u > max_ulp) max_ulp = u, worst = i;
  }
  if (Verbose()) {
    std::printf("%-9s %-6s max %2.0f ulp over the pow sample (%zu pts); "
                "worst x=%.9g y=%.9g got=%.9g ref=%.9g\n",
                "pow", "float", max_ulp, xs.size(), double(xs[worst]), double(ys[worst]),
                double(got[worst]), double(PowRef(xs[worst], ys[worst])));
  }
  INFO("worst x=", xs[worst], " y=", ys[worst], " got=", got[worst]);
  CHECK(max_ulp <= 1);

  // Special values: the full cross product against std::pow.
  using L = std::numeric_limits<float>;
  const float nan = L::quiet_NaN(), inf = L::infinity();
  const std::vector<float> sx = {nan, inf, -inf, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f,
                                 -2.0f, -8.0f, 10.0f, L::denorm_min(), -L::denorm_min(), L::min(),
                                 L::max(), -L::max(), 1.0000001f, 0.99999994f, -3.0f};
  const std::vector<float> sy = {nan, inf, -inf, 0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 3.0f,
                                 -3.0f, 0.5f, -0.5f, 1.0f / 3, 1e30f, -1e30f, 16777216.0f,
                                 16777215.0f, -16777215.0f, 127.0f, 128.0f, -149.0f, -150.0f, 2.5f,
                                 L::denorm_min(), 0x1p25f + 2};
  std::vector<float> px, py;
  for (float a : sx)
    for (float b : sy) px.push_back(a), py.push_back(b);
  const auto sg = PowSimd(px, py);
  for (size_t i = 0; i < px.size(); ++i) {
    const float ref = PowRef(px[i], py[i]);
    INFO("pow(", px[i], ", ", py[i], ") got=", sg[i], " ref=", ref);
    if (std::isnan(ref) || std::isinf(ref) || ref == 0) {
      CHECK(UlpDist(sg[i], ref) == 0);
    } else {
      CHECK(UlpDist(sg[i], ref) <= 1);
    }
  }
}

}  // namespace test_ops_simd_math
