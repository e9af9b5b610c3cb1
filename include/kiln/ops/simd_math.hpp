// kiln/ops/simd_math.hpp - vectorized elementary functions for kiln's fused
// elementwise loops (Highway static dispatch; build with
// -DHWY_COMPILE_ONLY_STATIC=1).
//
// Every function here takes a float or double tag `d` and a vector `x` of
// that lane type and returns a vector of the same type. Each one agrees with
// the corresponding std:: function on special values the way IEEE/C99 Annex F
// specifies: NaN in gives NaN out, an argument outside the domain gives NaN
// (log(-1), log1p(-2), pow(-8, 1/3)), infinities give std::'s limits
// (exp(-inf) = 0, exp(inf) = inf, log(0) = -inf, tanh(+-inf) = +-1,
// sin(+-inf) = NaN, ...), and signed zeros come out as std:: gives them
// (sin(-0) = -0, expm1(-0) = -0, log1p(-0) = -0, tan(-0) = -0, erf(-0) = -0,
// tanh(-0) = -0). Highway 1.0.3's own math-inl.h functions do not do this
// (measured: Exp(NaN) = 0, Log(-1) = 177.4, Log(NaN) = 89.1, Sin(inf) = -inf,
// Log1p(inf) = NaN); where we wrap one of them, IfThenElse fix-ups restore the
// std:: behaviour.
//
// "Max error" below is the largest distance, in units in the last place of
// the lane type, between our result and std::f computed in double (for float
// lanes) or long double (for double lanes) and rounded to the lane type. It
// was MEASURED by tests/cpu/test_simd_math.cpp (dense random sample plus a
// logarithmic sweep over the stated range, a few hundred thousand points per
// function and lane type) on the AVX3, AVX2, SSSE3 and SCALAR targets with
// GCC 12.2; the test CHECKs these bounds. Results are bitwise identical for a
// lane whatever its position in the vector (tails go through the same code).
//
// Availability per lane type is given by the kHas<Name><T> traits below; a
// caller whose T is not covered (e.g. Pow for double) uses the scalar std::
// path instead. Calling a function for an unsupported T is a compile error.
//
// Flush-to-zero / denormals-are-zero modes and -ffast-math are not supported
// (the NaN and denormal handling relies on IEEE semantics).

#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace math {

namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------------------
// Availability traits: true when Name(d, x) exists for lanes of type T on the
// compiled target. All functions exist for float; all but Pow for double
// (double pow needs a log accurate to ~2^-64, i.e. double-double arithmetic;
// use std::pow). Double lanes need HWY_HAVE_FLOAT64 (true on all x86 targets).

namespace detail {
template <class T>
inline constexpr bool kIsF32 = std::is_same_v<T, float>;
template <class T>
inline constexpr bool kIsF64 = std::is_same_v<T, double> && HWY_HAVE_FLOAT64;
template <class T>
inline constexpr bool kIsF32OrF64 = kIsF32<T> || kIsF64<T>;
}  // namespace detail

template <class T> inline constexpr bool kHasExp = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasExp2 = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasExpm1 = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasLog = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasLog2 = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasLog1p = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasSin = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasCos = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasTan = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasTanh = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasSigmoid = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasSoftplus = detail::kIsF32OrF64<T>;
template <class T> inline constexpr bool kHasErf = detail::kIsF32OrF64<T>;
// Float only: computed through double lanes (needs HWY_HAVE_FLOAT64).
template <class T> inline constexpr bool kHasPow = detail::kIsF32<T> && HWY_HAVE_FLOAT64;

namespace detail {

#define KILN_SIMD_MATH_REQUIRE(trait, T)                                    \
  static_assert(trait<T>, "kiln::math: this function has no SIMD form for " \
                          "this lane type; use the scalar std:: path")

// Horner evaluation of c[0] + c[1] x + ... + c[N-1] x^(N-1).
template <class D, class V, class T, size_t N>
HWY_INLINE V Horner(D d, V x, const T (&c)[N]) {
  V r = hn::Set(d, c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) r = hn::MulAdd(r, x, hn::Set(d, c[i]));
  return r;
}

// x itself where x == +-0, else r (restores the sign of zero).
template <class D, class V>
HWY_INLINE V KeepZero(D d, V x, V r) {
  return hn::IfThenElse(hn::Eq(x, hn::Zero(d)), x, r);
}

// x itself where x is NaN (propagates the NaN), else r.
template <class V>
HWY_INLINE V KeepNaN(V x, V r) {
  return hn::IfThenElse(hn::IsNaN(x), x, r);
}

template <class D>
using VI32 = hn::Vec<hn::Rebind<int32_t, D>>;

// Truncating conversion to int32 lanes; the caller guarantees the values are
// integers well inside the int32 range (never NaN).
template <class D, class V>
HWY_INLINE VI32<D> ToInt32(D d, V v) {
  (void)d;
  if constexpr (sizeof(hn::TFromD<D>) == 4) {
    return hn::ConvertTo(hn::Rebind<int32_t, D>(), v);
  } else {
    return hn::DemoteTo(hn::Rebind<int32_t, D>(), v);
  }
}

// 2^n for integer n within the normal exponent range of the lane type.
template <class D>
HWY_INLINE hn::Vec<D> Pow2I(D d, VI32<D> n) {
  const hn::Rebind<int32_t, D> di32;
  if constexpr (sizeof(hn::TFromD<D>) == 4) {
    return hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n, hn::Set(di32, 127))));
  } else {
    const hn::Rebind<int64_t, D> di64;
    return hn::BitCast(
        d, hn::ShiftLeft<52>(hn::PromoteTo(di64, hn::Add(n, hn::Set(di32, 1023)))));
  }
}

// x * 2^n for |n| <= 2 * (max exponent): two exact scalings, so overflow gives
// inf and a subnormal result is rounded once.
template <class D, class V>
HWY_INLINE V LdExp(D d, V x, VI32<D> n) {
  const VI32<D> n1 = hn::ShiftRight<1>(n);
  return hn::Mul(hn::Mul(x, Pow2I(d, n1)), Pow2I(d, hn::Sub(n, n1)));
}

// Odd lanes of an integer-valued vector q (|q| < 2^24 for float).
template <class D, class V>
HWY_INLINE auto IsOdd(D d, V q) {
  using T = hn::TFromD<D>;
  const V half = hn::Set(d, T(0.5));
  const V two = hn::Set(d, T(2));
  return hn::Ne(hn::Mul(hn::Floor(hn::Mul(q, half)), two), q);
}

// ---- Logarithm core (FreeBSD/musl e_log style, our own vector code) -------
// For x > 0 finite (subnormals included): x = 2^k * (1 + f), 1 + f in
// [sqrt(2)/2, sqrt(2)). Garbage (but no UB) for other x; callers fix up.
template <class D, class V>
HWY_INLINE V LogReduce(D d, V x, V& k) {
  using T = hn::TFromD<D>;
  const hn::RebindToSigned<D> di;
  const hn::RebindToUnsigned<D> du;
  using TI = hn::TFromD<decltype(di)>;
  constexpr bool kF32 = sizeof(T) == 4;
  constexpr int kMantBits = kF32 ? 23 : 52;
  const T kMinNormal = kF32 ? T(1.17549435082228750797e-38) : T(2.2250738585072014e-308);
  const T kScale = kF32 ? T(33554432.0) : T(18014398509481984.0);  // 2^25, 2^54
  const T kScaleExp = kF32 ? T(25) : T(54);
  const TI kOne = kF32 ? TI(0x3F800000) : TI(0x3FF0000000000000LL);
  const TI kSqrtHalf = kF32 ? TI(0x3F3504F3) : TI(0x3FE6A09E667F3BCDLL);
  const TI kMantMask = kF32 ? TI(0x007FFFFF) : TI(0x000FFFFFFFFFFFFFLL);
  const TI kBias = kF32 ? TI(127) : TI(1023);

  const auto is_denormal = hn::Lt(x, hn::Set(d, kMinNormal));
  x = hn::IfThenElse(is_denormal, hn::Mul(x, hn::Set(d, kScale)), x);
  // Move the mantissa range to [sqrt(2)/2, sqrt(2)) by biasing the bits.
  const auto ix = hn::Add(hn::BitCast(di, x), hn::Set(di, TI(kOne - kSqrtHalf)));
  const auto e = hn::Sub(
      hn::BitCast(di, hn::ShiftRight<kMantBits>(hn::BitCast(du, ix))),
      hn::Set(di, kBias));
  const auto im = hn::Add(hn::And(ix, hn::Set(di, kMantMask)), hn::Set(di, kSqrtHalf));
  k = hn::Sub(hn::ConvertTo(d, e),
              hn::IfThenElseZero(is_denormal, hn::Set(d, kScaleExp)));
  return hn::Sub(hn::BitCast(d, im), hn::Set(d, T(1)));
}

// R(s^2) such that log(1 + f) = f - hfsq + s * (hfsq + R), s = f / (2 + f).
// Coefficients Lg1.. of FreeBSD's e_logf.c / e_log.c (also Highway's LogPoly).
template <class D, class V>
HWY_INLINE V LogR(D d, V s) {
  using T = hn::TFromD<D>;
  const V z = hn::Mul(s, s);
  const V w = hn::Mul(z, z);
  // R = z (Lg1 + w (Lg3 + ...)) + w (Lg2 + w (Lg4 + ...)).
  if constexpr (sizeof(T) == 4) {
    static constexpr float odd[] = {0.66666662693f, 0.28498786688f};
    static constexpr float even[] = {0.40000972152f, 0.24279078841f};
    return hn::Add(hn::Mul(z, Horner(d, w, odd)), hn::Mul(w, Horner(d, w, even)));
  } else {
    static constexpr double odd[] = {6.666666666666735130e-01, 2.857142874366239149e-01,
                                     1.818357216161805012e-01, 1.479819860511658591e-01};
    static constexpr double even[] = {3.999999999940941908e-01, 2.222219843214978396e-01,
                                      1.531383769920937332e-01};
    return hn::Add(hn::Mul(z, Horner(d, w, odd)), hn::Mul(w, Horner(d, w, even)));
  }
}

// log(2^k * (1 + f) + corr * 2^k * (1 + f)) ~= k ln2 + log1p(f) + corr.
template <class D, class V>
HWY_INLINE V LogFromParts(D d, V k, V f, V corr) {
  using T = hn::TFromD<D>;
  constexpr bool kF32 = sizeof(T) == 4;
  const V ln2_hi = hn::Set(d, kF32 ? T(6.9313812256e-01) : T(6.93147180369123816490e-01));
  const V ln2_lo = hn::Set(d, kF32 ? T(9.0580006145e-06) : T(1.90821492927058770002e-10));
  const V s = hn::Div(f, hn::Add(hn::Set(d, T(2)), f));
  const V hfsq = hn::Mul(hn::Set(d, T(0.5)), hn::Mul(f, f));
  const V R = LogR(d, s);
  // k*ln2_hi - ((hfsq - (s*(hfsq+R) + (k*ln2_lo + corr))) - f)
  const V lo = hn::MulAdd(k, ln2_lo, corr);
  const V t = hn::Sub(hfsq, hn::MulAdd(s, hn::Add(hfsq, R), lo));
  return hn::MulSub(k, ln2_hi, hn::Sub(t, f));
}

// ---- expm1 core -----------------------------------------------------------
// P(r) with e^r - 1 = r + r^2 P(r) on |r| <= ln2/2 * 1.0002. Own minimax fit
// (relative error of r + r^2 P: 0.06 eps float, 0.004 eps double).
template <class D, class V>
HWY_INLINE V Expm1Poly(D d, V r) {
  using T = hn::TFromD<D>;
  if constexpr (sizeof(T) == 4) {
    static constexpr float c[] = {0.5f, 0.166666358709f, 0.0416665114462f,
                                  0.00834150984883f, 0.00139305414632f,
                                  0.000150457577547f};
    return Horner(d, r, c);
  } else {
    static constexpr double c[] = {
        0.5,
        0.1666666666666667684371106,
        0.04166666666666669210927765,
        0.008333333333321740060695149,
        0.001388888888888316266306822,
        0.0001984126988536941767378441,
        0.0000248015873031281493645353,
        0.000002755724524222588990763792,
        0.0000002755730943933970661782675,
        2.510862088510314218657514e-8,
        2.089962689511110488557682e-9};
    return Horner(d, r, c);
  }
}

// expm1(x) for any non-NaN x (NaN gives garbage; callers fix up). Exact
// signs of zero are not preserved here.
template <class D, class V>
HWY_INLINE V Expm1Core(D d, V x) {
  using T = hn::TFromD<D>;
  constexpr bool kF32 = sizeof(T) == 4;
  // Below lo the result is -1 to working precision; above hi it is inf.
  const V lo = hn::Set(d, kF32 ? T(-30) : T(-60));
  const V hi = hn::Set(d, kF32 ? T(89) : T(710));
  const V xc = hn::Min(hn::Max(x, lo), hi);
  const V kLog2e = hn::Set(d, T(1.442695040888963407359924681));
  // Cody-Waite split of ln2: q * ln2_hi is exact for the q range used here.
  const V ln2_hi = hn::Set(d, kF32 ? T(6.9314575195e-01) : T(6.93147180369123816490e-01));
  const V ln2_lo = hn::Set(d, kF32 ? T(1.4286067653e-06) : T(1.90821492927058770002e-10));
  const V q = hn::Round(hn::Mul(xc, kLog2e));
  const V r = hn::NegMulAdd(q, ln2_lo, hn::NegMulAdd(q, ln2_hi, xc));
  // e^x - 1 = 2^q * (s + r + r^2 P(r)) with s = 1 - 2^-q, exact for the q
  // that matter (|q| <= 24 float, 53 double). s + r is split into a rounded
  // sum and its exact error (Fast2Sum: |s| >= 1/2 > |r| or s == 0), so the
  // bracket is rounded once, and the scaling by 2^q is exact.
  const VI32<D> qi = ToInt32(d, q);
  const V qs = hn::Min(q, hn::Set(d, kF32 ? T(30) : T(60)));
  const V s = hn::Sub(hn::Set(d, T(1)), Pow2I(d, hn::Neg(ToInt32(d, qs))));
  const V t = hn::Add(s, r);
  const V t_err = hn::Sub(r, hn::Sub(t, s));
  const V sum = hn::Add(t, hn::MulAdd(hn::Mul(r, r), Expm1Poly(d, r), t_err));
  return LdExp(d, sum, qi);
}

// ---- sin/cos kernels on |r| <= pi/4 * 1.01 (own minimax fits) ---------------
template <class D, class V>
HWY_INLINE V SinKernel(D d, V r, V z) {  // z = r*r
  using T = hn::TFromD<D>;
  if constexpr (sizeof(T) == 4) {
    static constexpr float c[] = {-0.166666671634f, 0.00833337847143f,
                                  -0.000198525624f, 2.82634505311e-6f};
    return hn::MulAdd(hn::Mul(r, z), Horner(d, z, c), r);
  } else {
    static constexpr double c[] = {
        -0.1666666666666666574148081,     0.008333333333333046988311565,
        -0.0001984126984097323335379942,  0.000002755731908165987812005249,
        -2.505207338406345080406834e-8,   1.605467551386651957901213e-10,
        -7.409667248696796229607911e-13};
    return hn::MulAdd(hn::Mul(r, z), Horner(d, z, c), r);
  }
}

template <class D, class V>
HWY_INLINE V CosKernel(D d, V z) {  // z = r*r
  using T = hn::TFromD<D>;
  V p;
  if constexpr (sizeof(T) == 4) {
    static constexpr float c[] = {0.0416666455567f, -0.00138872978278f,
                                  2.44300845225e-5f};
    p = Horner(d, z, c);
  } else {
    static constexpr double c[] = {
        0.04166666666666658108697519,    -0.001388888888887096972543644,
        0.00002480158728752797426858785, -0.0000002755731379157581526279292,
        2.087564749234250411052266e-9,   -1.135574416635422243429167e-11};
    p = Horner(d, z, c);
  }
  // 1 - z/2 + z^2 p, with the rounding error of 1 - z/2 added back (musl).
  const V one = hn::Set(d, T(1));
  const V hz = hn::Mul(hn::Set(d, T(0.5)), z);
  const V w = hn::Sub(one, hz);
  const V err = hn::Sub(hn::Sub(one, w), hz);  // exact
  return hn::Add(w, hn::MulAdd(hn::Mul(z, z), p, err));
}

// Reduction for sin/cos/tan: |x| = q * pi/2 + r, |r| <= pi/4 (+ rounding
// slack), q = round(|x| * 2/pi) as a float integer; non-finite lanes reduce
// as 0 (callers replace them with NaN). Accurate for |x| <= 39000 (q * p0
// exact, 4-part pi/2 constant: the split of pi used by Highway's Sin/Cos,
// halved).
template <class D, class V>
HWY_INLINE V TrigReduce(D d, V x, V& q) {
  using T = hn::TFromD<D>;
  constexpr bool kF32 = sizeof(T) == 4;
  const V ax = hn::Abs(hn::IfThenElseZero(hn::IsFinite(x), x));
  const V two_over_pi = hn::Set(d, T(0.6366197723675813430755351));
  q = hn::Floor(hn::MulAdd(ax, two_over_pi, hn::Set(d, T(0.5))));
  const V p0 = hn::Set(d, kF32 ? T(0.5 * 3.140625) : T(0.5 * 3.1415926218032836914));
  const V p1 =
      hn::Set(d, kF32 ? T(0.5 * 0.0009670257568359375) : T(0.5 * 3.1786509424591713469e-8));
  const V p2 =
      hn::Set(d, kF32 ? T(0.5 * 6.2771141529083251953e-7) : T(0.5 * 1.2246467864107188502e-16));
  const V p3 =
      hn::Set(d, kF32 ? T(0.5 * 1.2154201256553420762e-10) : T(0.5 * 1.2736634327021899816e-24));
  // p0, p1, p2 are short (float: <= 9 significant bits, double: <= 25), so
  // the products with q are exact and ax - q*p0 - q*p1 is exact. The
  // rounding error of r2 - q*p2 is recovered (TwoSum) and added back with
  // q*p3, so r is rounded essentially once, also near zeros of sin/cos.
  const V r2 = hn::NegMulAdd(q, p1, hn::NegMulAdd(q, p0, ax));
  const V b = hn::Mul(q, p2);
  const V r3 = hn::Sub(r2, b);
  const V bb = hn::Sub(r3, r2);
  const V err = hn::Sub(hn::Sub(r2, hn::Sub(r3, bb)), hn::Add(b, bb));
  return hn::Add(r3, hn::NegMulAdd(q, p3, err));
}

}  // namespace detail

// ===========================================================================
// Public functions
// ===========================================================================

/**
 * exp(x): wraps Highway's Exp (own special-value fix-ups).
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [-104, 89] (float) / [-746, 710] (double) + log
 *                   sweep of |x| from denorm_min
 *      Valid Range: all x. exp(NaN) = NaN, exp(-inf) = +0, exp(+inf) = +inf,
 *                   overflow to +inf above ln(max), gradual underflow to 0.
 */
template <class D, class V>
HWY_INLINE V Exp(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasExp, T);
  constexpr bool kF32 = sizeof(T) == 4;
  // Clamp so Highway's integer exponent arithmetic stays in range (and never
  // converts a NaN): below lo Highway returns 0; above hi we return inf.
  const V lo = hn::Set(d, kF32 ? T(-105) : T(-1001));
  const V hi = hn::Set(d, kF32 ? T(89) : T(710));
  const V kMaxLog = hn::Set(d, kF32 ? T(88.72283172607421875) : T(709.782712893384));
  const V r = hn::Exp(d, hn::Min(hn::Max(x, lo), hi));
  return detail::KeepNaN(x, hn::IfThenElse(hn::Gt(x, kMaxLog), hn::Inf(d), r));
}

/**
 * exp2(x) = 2^x: own range reduction x = n + r, |r| <= 1/2, minimax
 * polynomial for 2^r, exact scaling by 2^n (exact for integer x).
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [-151, 129] (float) / [-1076, 1025] (double) +
 *                   log sweep of |x|
 *      Valid Range: all x. exp2(NaN) = NaN, exp2(-inf) = +0, exp2(+inf) = +inf.
 */
template <class D, class V>
HWY_INLINE V Exp2(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasExp2, T);
  constexpr bool kF32 = sizeof(T) == 4;
  const V lo = hn::Set(d, kF32 ? T(-151) : T(-1076));  // 2^lo rounds to 0
  const V hi = hn::Set(d, kF32 ? T(129) : T(1025));    // 2^hi is inf
  const V xc = hn::Min(hn::Max(x, lo), hi);  // NaN -> hi, fixed below
  const V n = hn::Round(xc);
  const V r = hn::Sub(xc, n);  // exact, |r| <= 0.5
  V q;
  if constexpr (kF32) {
    static constexpr float c[] = {0.693147182465f,  0.240225940943f,
                                  0.0555036626756f, 0.00962544512004f,
                                  0.00133879273199f, 0.000133324909257f};
    q = detail::Horner(d, r, c);
  } else {
    static constexpr double c[] = {
        0.693147180559945286226764,      0.2402265069590999724269409,
        0.05550410866482376887054428,    0.009618129107670866581591973,
        0.001333355814589695003194447,   0.0001540353031468591352495801,
        0.0000152527343226628577871817,  0.000001321555042068805278088336,
        0.0000001017786077691534209048948, 7.031618071838916848922567e-9,
        4.484729101565416979090987e-10,  5.733201561841142260873013e-11};
    q = detail::Horner(d, r, c);
  }
  const V p = hn::MulAdd(r, q, hn::Set(d, T(1)));  // 2^r
  return detail::KeepNaN(x, detail::LdExp(d, p, detail::ToInt32(d, n)));
}

/**
 * expm1(x) = e^x - 1: own reduction x = q ln2 + r, e^x - 1 =
 * 2^q (expm1(r) + (1 - 2^-q)) with one rounding of the sum.
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [-20, 89] (float) / [-40, 710] (double) + log
 *                   sweep of |x|
 *      Valid Range: all x. expm1(NaN) = NaN, expm1(-inf) = -1,
 *                   expm1(+inf) = +inf, expm1(-0) = -0.
 */
template <class D, class V>
HWY_INLINE V Expm1(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasExpm1, T);
  return detail::KeepNaN(x, detail::KeepZero(d, x, detail::Expm1Core(d, x)));
}

namespace detail {
// r where x is positive and finite; log's special values elsewhere: -inf at +-0, inf at inf, NaN below
// zero and at NaN (shared by Log and Log2).
template <class D, class V>
HWY_INLINE V LogSpecials(D d, V x, V r) {
  const V zero = hn::Zero(d);
  const V inf = hn::Inf(d);
  const auto ok = hn::And(hn::Gt(x, zero), hn::Lt(x, inf));
  const V special = hn::IfThenElse(hn::Eq(x, zero), hn::Neg(inf),
                                   hn::IfThenElse(hn::Eq(x, inf), inf, hn::NaN(d)));
  return hn::IfThenElse(ok, r, special);
}
}  // namespace detail

/**
 * log(x): own vector code of FreeBSD's e_logf/e_log algorithm.
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [0.25, 4] + log sweep over [denorm_min, max]
 *      Valid Range: all x (subnormals included). log(+-0) = -inf,
 *                   log(x < 0) = NaN, log(inf) = inf, log(NaN) = NaN.
 */
template <class D, class V>
HWY_INLINE V Log(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasLog, T);
  V k;
  const V f = detail::LogReduce(d, x, k);
  const V r = detail::LogFromParts(d, k, f, hn::Zero(d));
  return detail::LogSpecials(d, x, r);
}

/**
 * log2(x): FreeBSD e_log2f/e_log2 algorithm (hi/lo split of log(1+f) times
 * a hi/lo split of 1/ln2); exact for powers of two.
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [0.25, 4] + log sweep over [denorm_min, max]
 *      Valid Range: all x. Special values as Log.
 */
template <class D, class V>
HWY_INLINE V Log2(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasLog2, T);
  constexpr bool kF32 = sizeof(T) == 4;
  const hn::RebindToUnsigned<D> du;
  using TU = hn::TFromD<decltype(du)>;
  V k;
  const V f = detail::LogReduce(d, x, k);
  const V s = hn::Div(f, hn::Add(hn::Set(d, T(2)), f));
  const V hfsq = hn::Mul(hn::Set(d, T(0.5)), hn::Mul(f, f));
  const V R = detail::LogR(d, s);
  // hi has few enough significant bits that hi * ivln2hi is exact.
  const TU kHiMask = kF32 ? TU(0xFFFFF000u) : TU(0xFFFFFFFF00000000ull);
  const V hi = hn::And(hn::Sub(f, hfsq), hn::BitCast(d, hn::Set(du, kHiMask)));
  const V lo = hn::MulAdd(s, hn::Add(hfsq, R), hn::Sub(hn::Sub(f, hi), hfsq));
  const V ivln2hi = hn::Set(d, kF32 ? T(1.4428710938e+00) : T(1.44269504072144627571e+00));
  const V ivln2lo = hn::Set(d, kF32 ? T(-1.76052911037e-04) : T(1.67517131648865118353e-10));
  const V val_hi = hn::Mul(hi, ivln2hi);
  V val_lo = hn::MulAdd(lo, ivln2hi, hn::Mul(hn::Add(lo, hi), ivln2lo));
  // k + val_hi with the rounding error carried into val_lo (|k| >= 1 or 0).
  const V w = hn::Add(k, val_hi);
  val_lo = hn::Add(val_lo, hn::Add(hn::Sub(k, w), val_hi));
  const V r = hn::Add(val_lo, w);
  return detail::LogSpecials(d, x, r);
}

/**
 * log1p(x) = log(1 + x): u = 1 + x rounded, the exact rounding error of that
 * sum (Fast2Sum) enters the log kernel as a first-order correction err/u.
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [-1, 4] + log sweeps over [denorm_min, max] and
 *                   -[denorm_min, 0.999]
 *      Valid Range: all x. log1p(-1) = -inf, log1p(x < -1) = NaN,
 *                   log1p(inf) = inf, log1p(+-0) = +-0, log1p(NaN) = NaN.
 */
template <class D, class V>
HWY_INLINE V Log1p(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasLog1p, T);
  const V one = hn::Set(d, T(1));
  const V u = hn::Add(one, x);
  // Exact rounding error of 1 + x: Fast2Sum with the larger operand first.
  const V err = hn::IfThenElse(hn::Le(hn::Abs(x), one), hn::Sub(x, hn::Sub(u, one)),
                               hn::Sub(one, hn::Sub(u, x)));
  V k;
  const V f = detail::LogReduce(d, u, k);
  const V r = detail::LogFromParts(d, k, f, hn::Div(err, u));
  const V m1 = hn::Neg(one);
  const V inf = hn::Inf(d);
  const auto ok = hn::And(hn::Gt(x, m1), hn::Lt(x, inf));
  const V special = hn::IfThenElse(hn::Eq(x, m1), hn::Neg(inf),
                                   hn::IfThenElse(hn::Eq(x, inf), inf, hn::NaN(d)));
  return hn::IfThenElse(ok, detail::KeepZero(d, x, r), special);
}

/**
 * sin(x): own reduction x = q pi/2 + r (4-part pi/2), |r| <= pi/4, and
 * minimax sin/cos kernels (relative error < 0.003 eps).
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double) on [-39000, 39000]
 *      Measured on: uniform [-39000, 39000], [-6.3, 6.3], log sweep of |x| up
 *                   to 39000, and the floats nearest k*pi/2
 *      Valid Range: [-39000, +39000]; for larger finite |x| the result is
 *                   unspecified (may be far off, inf or NaN: use std::sin).
 *                   sin(+-inf) = NaN, sin(NaN) = NaN, sin(-0) = -0.
 */
template <class D, class V>
HWY_INLINE V Sin(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasSin, T);
  const auto finite = hn::IsFinite(x);
  const V sign = hn::And(x, hn::SignBit(d));
  V q;
  const V r = detail::TrigReduce(d, x, q);
  const V z = hn::Mul(r, r);
  // q mod 4 = 0: sin r, 1: cos r, 2: -sin r, 3: -cos r.
  const V v = hn::IfThenElse(detail::IsOdd(d, q), detail::CosKernel(d, z),
                             detail::SinKernel(d, r, z));
  const auto neg = detail::IsOdd(d, hn::Floor(hn::Mul(q, hn::Set(d, T(0.5)))));
  const V res = hn::Xor(hn::IfThenElse(neg, hn::Neg(v), v), sign);
  return hn::IfThenElse(finite, res, hn::NaN(d));
}

/**
 * cos(x): same reduction and kernels as Sin.
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double) on [-39000, 39000]
 *      Measured on: as Sin
 *      Valid Range: [-39000, +39000] (see Sin); cos(+-inf) = NaN,
 *                   cos(NaN) = NaN.
 */
template <class D, class V>
HWY_INLINE V Cos(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasCos, T);
  const auto finite = hn::IsFinite(x);
  V q;
  const V r = detail::TrigReduce(d, x, q);
  const V z = hn::Mul(r, r);
  // q mod 4 = 0: cos r, 1: -sin r, 2: -cos r, 3: sin r.
  const V v = hn::IfThenElse(detail::IsOdd(d, q), detail::SinKernel(d, r, z),
                             detail::CosKernel(d, z));
  // Negative for q mod 4 in {1, 2}, i.e. where bit 0 xor bit 1 of q is set:
  // floor((q + 1) / 2) odd.
  const V h = hn::Floor(hn::Mul(hn::Add(q, hn::Set(d, T(1))), hn::Set(d, T(0.5))));
  const auto neg = detail::IsOdd(d, h);
  return hn::IfThenElse(finite, hn::IfThenElse(neg, hn::Neg(v), v), hn::NaN(d));
}

/**
 * tan(x): reduction as Sin, minimax tan kernel t(r) on |r| <= pi/4,
 * result t(r) (even quadrant) or -1/t(r) (odd quadrant).
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 2 (float, double) on [-39000, 39000]
 *      Measured on: as Sin
 *      Valid Range: [-39000, +39000] (beyond it unspecified, see Sin);
 *                   tan(+-inf) = NaN, tan(NaN) = NaN, tan(-0) = -0.
 */
template <class D, class V>
HWY_INLINE V Tan(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasTan, T);
  const auto finite = hn::IsFinite(x);
  const V sign = hn::And(x, hn::SignBit(d));
  V q;
  const V r = detail::TrigReduce(d, x, q);
  const V z = hn::Mul(r, r);
  const auto odd = detail::IsOdd(d, q);
  // tan(r) = r + r^3 T(r^2): own minimax fits, relative error 0.002 eps
  // (float), 0.001 eps (double).
  V c;
  if constexpr (sizeof(T) == 4) {
    static constexpr float k[] = {
        0.333333313465f, 0.133334338665f,   0.0539510436356f,  0.0220104977489f,
        0.0082329493016f, 0.00519732991233f, -0.000814820989035f, 0.00213558506221f};
    c = detail::Horner(d, z, k);
  } else {
    static constexpr double k[] = {
        0.333333333333333259318465,     0.1333333333333467651815596,
        0.05396825396739916153032723,   0.021869488563740917957956,
        0.008863234999172823688762257,  0.003592134698582620435519663,
        0.001455776709338478134767025,  0.0005903842633688160179347704,
        0.0002375168696141486833397355, 0.0001022968782995145088383221,
        0.00002598190497447283903880745, 0.00004003829106238170098316237,
        -0.00002498401664891870065207842, 0.00003080822496864787772173286,
        -0.00001488508477244627734340735, 0.000005009998732646300910605845};
    c = detail::Horner(d, z, k);
  }
  const V tr = hn::MulAdd(hn::Mul(r, z), c, r);
  // Odd quadrant: tan = -1 / tan(r).
  const V one = hn::Set(d, T(1));
  const V t = hn::Div(hn::IfThenElse(odd, hn::Neg(one), tr), hn::IfThenElse(odd, tr, one));
  return hn::IfThenElse(finite, hn::Xor(t, sign), hn::NaN(d));
}

/**
 * tanh(x). float: x + x^3 P(x^2) for |x| < 0.625 (Cephes' minimax
 * polynomial), else 1 - 2 / (exp(2|x|) + 1), which rounds to 1 beyond the
 * limit; double: e / (e + 2) with e = expm1(2|x|).
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 2 (float, double)
 *      Measured on: uniform [-20, 20] + log sweep of |x| up to 50
 *      Valid Range: all x. tanh(+-inf) = +-1, tanh(-0) = -0, tanh(NaN) = NaN.
 */
template <class D, class V>
HWY_INLINE V Tanh(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasTanh, T);
  constexpr bool kF32 = sizeof(T) == 4;
  const V sign = hn::And(x, hn::SignBit(d));
  const V ax = hn::Abs(x);
  // Above the limit 1 - tanh < eps/4: the correctly rounded result is 1.
  const V limit = hn::Set(d, kF32 ? T(9.1) : T(19.1));
  if constexpr (kF32) {
    // Fewer operations than the expm1 form (no Fast2Sum, no exact scaling): the polynomial covers
    // the small |x| where 1 - 2 / (e + 1) would cancel. Measured 1 ULP with a correctly rounded exp.
    static constexpr float c[] = {-3.33332819422e-1f, 1.33314422036e-1f, -5.37397155531e-2f, 2.06390887954e-2f,
                                  -5.70498872745e-3f};
    const V z = hn::Mul(x, x);
    const V small = hn::MulAdd(hn::Mul(detail::Horner(d, z, c), z), ax, ax);
    const V axc = hn::Min(ax, limit);  // keeps exp finite (NaN -> limit)
    const V one = hn::Set(d, T(1));
    const V e = hn::Exp(d, hn::Add(axc, axc));
    const V large = hn::Sub(one, hn::Div(hn::Set(d, T(2)), hn::Add(e, one)));
    const V r = hn::IfThenElse(hn::Lt(ax, hn::Set(d, T(0.625))), small, large);
    return detail::KeepNaN(x, hn::Or(r, sign));  // the sign restores -0 too
  } else {
    const V axc = hn::Min(ax, limit);  // keeps e finite (NaN -> limit)
    const V e = detail::Expm1Core(d, hn::Add(axc, axc));
    const V t = hn::Div(e, hn::Add(e, hn::Set(d, T(2))));
    const V r = hn::IfThenElse(hn::Ge(ax, limit), hn::Set(d, T(1)), t);
    return detail::KeepNaN(x, hn::Or(r, sign));
  }
}

/**
 * sigmoid(x) = 1 / (1 + exp(-x)), computed as 1/(1+e) for x >= 0 and
 * e/(1+e) for x < 0 with e = exp(-|x|): accurate (relative) for large |x|,
 * down to the subnormal results for x in [-104, -87] (float).
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 2 (float, double)
 *      Measured on: uniform [-110, 110] (float) / [-750, 750] (double) + log
 *                   sweep of |x|
 *      Valid Range: all x. sigmoid(-inf) = 0, sigmoid(+inf) = 1,
 *                   sigmoid(NaN) = NaN.
 */
template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasSigmoid, T);
  const V one = hn::Set(d, T(1));
  const V e = math::Exp(d, hn::Neg(hn::Abs(x)));
  const V num = hn::IfThenElse(hn::Ge(x, hn::Zero(d)), one, e);
  return detail::KeepNaN(x, hn::Div(num, hn::Add(one, e)));
}

/**
 * softplus(x) = log(1 + exp(x)), computed stably as
 * max(x, 0) + log1p(exp(-|x|)); returns x itself above PyTorch's threshold of
 * 20 (for both lane types, as PyTorch: in double that shortcut is off by up to
 * 2e-9 relative, and kiln keeps PyTorch's definition), and exp(x) (via log1p
 * of a tiny value) for very negative x.
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [-110, 110] (float) / [-750, 750] (double) + log
 *                   sweep of |x|
 *      Valid Range: all x. softplus(-inf) = 0, softplus(inf) = inf,
 *                   softplus(NaN) = NaN.
 */
template <class D, class V>
HWY_INLINE V Softplus(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasSoftplus, T);
  const V threshold = hn::Set(d, T(20));
  const V l = math::Log1p(d, math::Exp(d, hn::Neg(hn::Abs(x))));
  const V r = hn::Add(hn::Max(x, hn::Zero(d)), l);
  return detail::KeepNaN(x, hn::IfThenElse(hn::Gt(x, threshold), x, r));
}

/**
 * erf(x): own minimax fits. |x| < 1: x + x P(x^2); 1 <= |x| < limit:
 * 1 - exp(-x^2) R(|x|) with R ~ erfc(x) e^(x^2) a polynomial in |x| - c;
 * +-1 beyond limit (3.93 float, 5.93 double) where that is the correctly
 * rounded result.
 *
 * Valid Lane Types: float32, float64
 *        Max Error: ULP = 1 (float, double)
 *      Measured on: uniform [-6.5, 6.5] + log sweep of |x| up to 10
 *      Valid Range: all x. erf(+-inf) = +-1, erf(-0) = -0, erf(NaN) = NaN.
 */
template <class D, class V>
HWY_INLINE V Erf(D d, V x) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasErf, T);
  constexpr bool kF32 = sizeof(T) == 4;
  const V one = hn::Set(d, T(1));
  const V sign = hn::And(x, hn::SignBit(d));
  const V ax = hn::Abs(x);
  const V limit = hn::Set(d, kF32 ? T(3.93) : T(5.93));
  // Small: erf(x) = x + x * P(x^2).
  const V xs = hn::Min(ax, one);
  const V z = hn::Mul(xs, xs);
  V small;
  V big_poly;
  V center;
  const V xb = hn::Min(hn::Max(ax, one), limit);  // NaN -> limit
  if constexpr (kF32) {
    static constexpr float a[] = {0.128379166126f,  -0.376126259565f,
                                  0.112835787237f,  -0.0268533471972f,
                                  0.00518716219813f, -0.000799785309937f,
                                  7.80690388638e-5f};
    small = hn::MulAdd(xs, detail::Horner(d, z, a), xs);
    static constexpr float b[] = {
        0.210806339979f,   -0.0743493884802f,  0.0249292775989f,
        -0.00800101924688f, 0.00252013187855f,  -0.000647743348964f,
        0.000226892690989f, -0.00013349665096f, -5.67036076973e-5f,
        -2.78267943941e-5f};
    center = hn::Set(d, 2.5f);
    big_poly = detail::Horner(d, hn::Sub(xb, center), b);
  } else {
    static constexpr double a[] = {
        0.1283791670955125585606993,     -0.3761263890318334301987591,
        0.1128379167093695040202661,     -0.02686617064195914034163692,
        0.005223977596735884972034558,   -0.0008548325484997302582679257,
        0.0001205528049639444527476803,  -0.00001492446563125471249624393,
        0.000001644415036304882729418738, -0.0000001618398842163920378058663,
        1.361668052392483222110952e-8,   -7.607760878936256062885424e-10};
    small = hn::MulAdd(xs, detail::Horner(d, z, a), xs);
    static constexpr double b[] = {
        0.155293655608881087104578, -0.04132357783352595681503061,
        0.01066113319189405245213109, -0.002673074434008189739775396,
        0.000652686354785324144081593, -0.0001554688931244065943325372,
        0.00003618160643521297785201937, -0.00000823825663752761820190617,
        0.00000183702787543111134183787, -0.0000004014289114576237199609368,
        8.68271606949810688756274e-8, -1.78834724021261193004602e-8,
        3.508582379583563106652389e-9, -1.194921767014588196582621e-9,
        -3.652520080332254295395813e-11, 2.155874899421931556537083e-11,
        1.065805363038149291580682e-10, 4.46093606453833103591428e-11,
        3.409069238068080520085661e-12, -6.174146001197081013801064e-12,
        -3.266163086066783223765565e-12, -8.284389238890801173637455e-13,
        -1.11735968217458210368121e-13, -6.726056232714461075926133e-15};
    center = hn::Set(d, 3.5);
    big_poly = detail::Horner(d, hn::Sub(xb, center), b);
  }
  const V big = hn::NegMulAdd(math::Exp(d, hn::Neg(hn::Mul(xb, xb))), big_poly, one);
  V r = hn::IfThenElse(hn::Lt(ax, one), small, big);
  r = hn::IfThenElse(hn::Ge(ax, limit), one, r);
  return detail::KeepNaN(x, hn::Or(r, sign));
}

/**
 * pow(x, y) = x^y for float lanes: |x|^y = exp2(y log2|x|) evaluated in
 * double lanes (so it is accurate even near overflow), then rounded to
 * float; signs and special cases follow std::pow (C99 Annex F):
 * pow(x, +-0) = 1 for any x (even NaN), pow(1, y) = 1 for any y (even NaN),
 * pow(-1, +-inf) = 1, negative finite x with non-integer y gives NaN,
 * negative x with odd integer y gives the negated result, pow(+-0, y < 0) =
 * +-inf (sign for odd y), pow(x, +-inf) and pow(+-inf, y) the limits.
 *
 * Valid Lane Types: float32 (double: not available, see kHasPow)
 *        Max Error: ULP = 1 (0 measured: the double intermediate is
 *                   accurate to ~1e-14, so only the final rounding remains)
 *      Measured on: x log-uniform in +-2^[-20, 20] with y uniform in [-40,
 *                   40] (negative x: integer y), x near 1 with |y| up to 4e4,
 *                   small |y| with x in 2^[-120, 120]
 *      Valid Range: all x, y.
 */
template <class D, class V>
HWY_INLINE V Pow(D d, V x, V y) {
  using T = hn::TFromD<D>;
  KILN_SIMD_MATH_REQUIRE(kHasPow, T);
#if HWY_HAVE_FLOAT64
  constexpr size_t kMaxLanes = hn::MaxLanes(d);
  const hn::CappedTag<double, kMaxLanes> dd;
  const hn::Rebind<float, decltype(dd)> dfh;
  HWY_ALIGN float xs[kMaxLanes];
  HWY_ALIGN float ys[kMaxLanes];
  HWY_ALIGN float rs[kMaxLanes];
  hn::Store(hn::Abs(x), d, xs);
  hn::Store(y, d, ys);
  const size_t n = hn::Lanes(d);
  const size_t nh = hn::Lanes(dd);
  for (size_t i = 0; i < n; i += nh) {
    const auto xd = hn::PromoteTo(dd, hn::LoadU(dfh, xs + i));
    const auto yd = hn::PromoteTo(dd, hn::LoadU(dfh, ys + i));
    const auto rd = math::Exp2(dd, hn::Mul(yd, math::Log2(dd, xd)));
    // HWY_SCALAR's DemoteTo clamps out-of-range values (even inf) to
    // +-FLT_MAX: demote rd/2 as well and double it where it is >= 2^126,
    // which rounds (or overflows to inf) correctly on every target.
    const auto rf = hn::DemoteTo(dfh, rd);
    const auto rh = hn::DemoteTo(dfh, hn::Mul(rd, hn::Set(dd, 0.5)));
    const auto big = hn::Ge(rh, hn::Set(dfh, 8.507059173023461586584365e+37f));  // 2^126
    hn::StoreU(hn::IfThenElse(big, hn::Add(rh, rh), rf), dfh, rs + i);
  }
  V r = hn::Load(d, rs);
  // Special cases, in float lanes.
  const hn::RebindToSigned<D> di;
  const V zero = hn::Zero(d);
  const V one = hn::Set(d, 1.0f);
  const V yr = hn::Round(y);
  const auto y_int = hn::Eq(yr, y);  // +-inf count as (even) integers
  const auto y_odd = hn::And(y_int, detail::IsOdd(d, y));
  const auto x_signbit = hn::RebindMask(d, hn::Lt(hn::BitCast(di, x), hn::Zero(di)));
  r = hn::IfThenElse(hn::And(x_signbit, y_odd), hn::Neg(r), r);
  const auto neg_finite = hn::And(hn::Lt(x, zero), hn::Gt(x, hn::Neg(hn::Inf(d))));
  r = hn::IfThenElse(hn::AndNot(y_int, neg_finite), hn::NaN(d), r);
  const auto is_one = hn::Or(hn::Or(hn::Eq(y, zero), hn::Eq(x, one)),
                             hn::And(hn::Eq(x, hn::Neg(one)), hn::IsInf(y)));
  return hn::IfThenElse(is_one, one, r);
#else
  (void)d;
  (void)y;
  return x;
#endif
}

#undef KILN_SIMD_MATH_REQUIRE

}  // namespace math
}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();
