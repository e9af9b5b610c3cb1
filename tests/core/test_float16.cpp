// float16 conversions against a float64 reference, over all 65536 bit patterns: decoding (normals,
// subnormals, signed zeros, infinities, NaN), encoding of every half value, of every midpoint between
// neighbours (ties to even) and of the floats just beside it, overflow to inf, underflow to zero, and a sweep
// of a million float bit patterns rounded by an independent nearest-even search.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kiln/core/dtype.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_core_float16 {

using kiln::float16;

namespace {

// The value of half bit pattern h, from the IEEE 754 binary16 definition, in double.
double reference_value(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0x1f) v = m == 0 ? INFINITY : NAN;
  else if (e == 0) v = std::ldexp(double(m), -24);
  else v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return sign ? -v : v;
}

// Round-to-nearest-even onto the halves by search over the finite non-negative half values (index = bits).
// A NaN keeps its sign and the top 10 bits of its payload, quieted (x86's F16C conversion).
uint16_t reference_round(float f, const std::vector<double>& positive) {
  const double x = std::abs(double(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return sign | 0x7e00 | ((std::bit_cast<uint32_t>(f) >> 13) & 0x3ff);
  // Past the largest half, 65504, by half its spacing (65520) or more: inf.
  if (x >= 65520.0) return sign | 0x7c00;
  const auto hi = std::lower_bound(positive.begin(), positive.end(), x);
  if (*hi == x) return sign | uint16_t(hi - positive.begin());
  const auto lo = hi - 1;
  const double dlo = x - *lo, dhi = *hi - x;
  uint16_t bits = uint16_t((dlo < dhi ? lo : hi) - positive.begin());
  if (dlo == dhi) bits = uint16_t(lo - positive.begin()) % 2 == 0 ? uint16_t(lo - positive.begin()) : uint16_t(hi - positive.begin());
  return sign | bits;
}

}  // namespace

TEST_CASE("float16 -> float is exact for all 65536 bit patterns") {
  int64_t bad = 0, nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    const double ref = reference_value(h);
    const float f = float16::from_bits(h);
    if (std::isnan(ref)) {  // quiet, with the sign and the payload in the top mantissa bits
      const uint32_t u = std::bit_cast<uint32_t>(f);
      nans += std::isnan(f) && std::signbit(f) == bool(h & 0x8000) && (u & 0x400000u) &&
              ((u >> 13) & 0x1ff) == (h & 0x1ffu) && (u & 0x1fffu) == 0;
      continue;
    }
    bad += !(double(f) == ref && std::signbit(f) == std::signbit(ref));
  }
  CHECK(bad == 0);
  CHECK(nans == 2 * 1023);
  CHECK(float(float16::from_bits(0x0001)) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(float(float16::from_bits(0x03ff)) == std::ldexp(1023.0f, -24));  // largest subnormal
  CHECK(float(float16::from_bits(0x7bff)) == 65504.0f);
  CHECK(float(float16::from_bits(0xfc00)) == -INFINITY);
  CHECK(std::signbit(float(float16::from_bits(0x8000))));
}

TEST_CASE("float -> float16 rounds to nearest even: every half value, midpoint and its neighbours") {
  int64_t exact = 0, ties = 0, below = 0, above = 0;
  for (uint16_t h = 0; h < 0x7c00; ++h) {  // finite non-negative halves
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
      const float v = float(reference_value(uint16_t(h | sign)));
      exact += float16(v).bits != (h | sign);
      if (h == 0x7bff) continue;
      // The midpoint to the next half is exact in float (12 significant bits).
      const double mid = (reference_value(h) + reference_value(uint16_t(h + 1))) / 2;
      const float m = float(sign ? -mid : mid);
      REQUIRE(double(std::abs(m)) == mid);
      const uint16_t even = (h % 2 == 0 ? h : uint16_t(h + 1)) | sign;
      ties += float16(m).bits != even;
      below += float16(std::nextafter(m, 0.0f)).bits != (h | sign);
      above += float16(std::nextafter(m, sign ? -INFINITY : INFINITY)).bits != ((h + 1) | sign);
    }
  }
  CHECK(exact == 0);
  CHECK(ties == 0);
  CHECK(below == 0);
  CHECK(above == 0);
}

TEST_CASE("float -> float16: overflow, underflow, infinities and NaN") {
  CHECK(float16(65504.0f).bits == 0x7bff);
  CHECK(float16(std::nextafter(65520.0f, 0.0f)).bits == 0x7bff);
  CHECK(float16(65520.0f).bits == 0x7c00);  // the tie past the largest half goes to the even "next": inf
  CHECK(float16(-1e10f).bits == 0xfc00);
  CHECK(float16(3.4e38f).bits == 0x7c00);
  CHECK(float16(INFINITY).bits == 0x7c00);
  CHECK(float16(-INFINITY).bits == 0xfc00);
  CHECK(float16(std::ldexp(1.0f, -25)).bits == 0x0000);  // half the smallest subnormal: a tie, to even 0
  CHECK(float16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits == 0x0001);
  CHECK(float16(-std::ldexp(1.0f, -26)).bits == 0x8000);
  CHECK(float16(1e-45f).bits == 0x0000);  // a float subnormal
  CHECK(float16(-0.0f).bits == 0x8000);
  CHECK(float16(std::nextafter(std::ldexp(1.0f, -14), 0.0f)).bits == 0x0400);  // rounds up into the normals
  CHECK(float16(NAN).bits == 0x7e00);
  CHECK(float16(-NAN).bits == 0xfe00);
  CHECK(float16(std::numeric_limits<float>::signaling_NaN()).bits == 0x7f00);  // float's sNaN 0x7fa00000, quieted
  CHECK(float16(std::bit_cast<float>(0xffc02000u)).bits == 0xfe01);             // sign and payload kept
  CHECK(std::bit_cast<uint32_t>(float(float16::from_bits(0x7c01))) == 0x7fc02000u);  // a half sNaN comes out quiet
  static_assert(float16(1.0f).bits == 0x3c00 && float(float16::from_bits(0xc000)) == -2.0f);  // constexpr
}

TEST_CASE("float -> float16 over a million float bit patterns matches a nearest-even search") {
  std::vector<double> positive;
  for (uint16_t h = 0; h < 0x7c00; ++h) positive.push_back(reference_value(h));
  positive.push_back(INFINITY);
  int64_t mismatches = 0, first = -1;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const float f = std::bit_cast<float>(uint32_t(u));
    const uint16_t got = float16(f).bits, want = reference_round(f, positive);
    if (got != want) {
      if (first < 0) first = int64_t(u);
      ++mismatches;
    }
  }
  CAPTURE(first);
  CHECK(mismatches == 0);
}

}  // namespace test_core_float16
