// Tests for kiln/core/generator.hpp: Philox known answers, the documented element mapping, determinism across
// thread counts, and distribution statistics.
#include <kiln/core/generator.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <thread>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_core_generator {

using kiln::Generator;
using kiln::philox::Counter;
using kiln::philox::Key;

namespace {

// A bfloat16 stand-in: only explicit conversions from and to float, rounding to nearest even like a real one.
// Its 8-bit mantissa makes the "rounded up to high" case of fill_uniform frequent.
struct MockBf16 {
  std::uint16_t bits = 0;
  MockBf16() = default;
  explicit MockBf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    bits = static_cast<std::uint16_t>(u >> 16);
  }
  explicit operator float() const {
    const std::uint32_t u = std::uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class T>
double to_d(const T& x) {
  if constexpr (std::is_arithmetic_v<T>)
    return static_cast<double>(x);
  else
    return static_cast<double>(static_cast<float>(x));
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct Moments {
  double mean, var;
};
template <class T>
Moments moments(const std::vector<T>& v) {
  double s = 0, s2 = 0;
  for (const T& x : v) s += to_d(x);
  const double m = s / static_cast<double>(v.size());
  for (const T& x : v) s2 += (to_d(x) - m) * (to_d(x) - m);
  return {m, s2 / static_cast<double>(v.size() - 1)};
}

#ifdef _OPENMP
// Runs f() with t OpenMP threads and restores the previous setting.
template <class F>
void with_threads(int t, F f) {
  const int old = omp_get_max_threads();
  omp_set_num_threads(t);
  f();
  omp_set_num_threads(old);
}
#endif

} // namespace

// Random123's kat_vectors (tests/kat_vectors in github.com/DEShawResearch/random123; the same lines are in
// DEShawResearch/fs123 core123/ut/ut_philox.cpp): counter (4 words), key (2 words) -> output (4 words).
struct Kat {
  Counter ctr;
  Key key;
  Counter out;
};
constexpr Kat kKat10[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};
constexpr Kat kKat7[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
     {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
};

// philox4x32_10 is usable at compile time.
static_assert(kiln::philox::philox4x32_10(kKat10[2].ctr, kKat10[2].key) == kKat10[2].out);

TEST_CASE("philox4x32: Random123 known-answer vectors") {
  for (const Kat& k : kKat10) CHECK(kiln::philox::philox4x32_10(k.ctr, k.key) == k.out);
  for (const Kat& k : kKat10) CHECK(kiln::philox::philox4x32<10>(k.ctr, k.key) == k.out);
  // The 7-round vectors pin down the round/key-bump order independently of the round count.
  for (const Kat& k : kKat7) CHECK(kiln::philox::philox4x32<7>(k.ctr, k.key) == k.out);
}

TEST_CASE("philox: key and counter layout") {
  CHECK(kiln::philox::key_from_seed(0x299f31d0a4093822ull) == Key{0xa4093822, 0x299f31d0});
  CHECK(kiln::philox::make_counter(0x85a308d3243f6a88ull, 0x0370734413198a2eull) == kKat10[2].ctr);
  CHECK(kiln::philox::block(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull) == kKat10[2].out);
  CHECK(kiln::philox::block(0, 0) == kKat10[0].out);
}

TEST_CASE("philox: blocks and for_each_word_run (vectorized) equal block") {
  using namespace kiln::philox;
  // Seeds with both key words set; counters that carry into their high word inside a group.
  for (const std::uint64_t seed : {0x299f31d0a4093822ull, 0ull, ~0ull})
    for (const std::uint64_t first : {0ull, 0xFFFFFFF9ull, ~0ull - 20}) {
      std::uint32_t words[4][16], wide[4][kBlockWidth];  // one AVX-512 vector, and the fills' width
      blocks<16>(seed, first, words);
      blocks<kBlockWidth>(seed, first, wide);
      for (int i = 0; i < kBlockWidth; ++i) {
        const Counter w = block(seed, first + std::uint64_t(i));
        for (int j = 0; j < 4; ++j) {
          if (i < 16) REQUIRE(words[j][i] == w[j]);
          REQUIRE(wide[j][i] == w[j]);
        }
      }
    }
  // Element e = e0 + j takes lane e % 4 of counter start + e / 4: starts inside a counter and runs across groups.
  const std::uint64_t seed = 0x0123456789abcdefull, start = 0xFFFFFFF0ull;
  for (const std::uint64_t e0 : {0ull, 3ull, 61ull, 64ull})
    for (const std::int64_t n : {0, 1, 5, 64, 131, 300}) {
      std::vector<std::uint32_t> got(std::size_t(n), 0);
      std::int64_t next = 0;
      for_each_word_run(seed, start, e0, n, [&](std::int64_t j, const std::uint32_t* words, std::int64_t count) {
        REQUIRE(j == next);  // in order, no gaps
        REQUIRE(count >= 1);
        REQUIRE(count <= 4 * kBlockWidth);
        for (std::int64_t i = 0; i < count; ++i) got[std::size_t(j + i)] = words[i];
        next = j + count;
      });
      REQUIRE(next == n);
      for (std::int64_t j = 0; j < n; ++j) {
        const std::uint64_t e = e0 + std::uint64_t(j);
        REQUIRE(got[std::size_t(j)] == block(seed, start + e / 4)[e % 4]);
      }
    }
}

TEST_CASE("philox: bernoulli_threshold is bernoulli in integers") {
  using namespace kiln::philox;
  // Every 24-bit value x >> 8 near each threshold, and p at, between and beyond multiples of 2^-24.
  for (const double p : {0.0, 1.0, 0.5, 0.9, 0.1, 1.0 / 3, 0x1p-24, 0x1p-25, 1 - 0x1p-24, 1 - 0x1p-30, -0.5, 1.5}) {
    const std::uint32_t t = bernoulli_threshold(p);
    for (std::int64_t d = -3; d <= 3; ++d) {
      const std::int64_t top = std::int64_t(t) + d;
      if (top < 0 || top >= (1 << 24)) continue;
      for (const std::uint32_t low : {0u, 0x7Fu, 0xFFu}) {
        const std::uint32_t x = (std::uint32_t(top) << 8) | low;
        REQUIRE(bernoulli(x, p) == ((x >> 8) < t));
      }
    }
  }
}

TEST_CASE("fill: counters drawn 16 at a time match block across groups and the counter's high word") {
  using namespace kiln::philox;
  const std::uint64_t seed = 0xfedcba9876543210ull;
  Generator g(seed);
  g.set_offset(0xFFFFFFFAull);  // the counter's low word wraps inside the first group
  std::vector<float> f(16 * 4 * 3 + 7);
  kiln::fill_uniform(g, f.data(), std::int64_t(f.size()), 0.0, 1.0);
  for (std::size_t i = 0; i < f.size(); ++i) REQUIRE(f[i] == to_float01(block(seed, 0xFFFFFFFAull + i / 4)[i % 4]));
  std::vector<std::int64_t> r(16 * 2 + 3);
  const std::uint64_t at = g.offset();
  kiln::fill_randint(g, r.data(), std::int64_t(r.size()), 0, 1 << 20);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const Counter w = block(seed, at + i / 2);
    const std::uint64_t x = (std::uint64_t{w[2 * (i % 2) + 1]} << 32) | w[2 * (i % 2)];
    REQUIRE(r[i] == static_cast<std::int64_t>(mulhi64(x, 1 << 20)));
  }
}

TEST_CASE("philox: conversions to [0, 1) and mulhi64") {
  using namespace kiln::philox;
  CHECK(to_float01(0) == 0.0f);
  CHECK(to_float01(0xFF) == 0.0f); // low 8 bits are dropped
  CHECK(to_float01(0x100) == 0x1p-24f);
  CHECK(to_float01(0xFFFFFFFFu) == 1.0f - 0x1p-24f);
  CHECK(to_float01(0xFFFFFFFFu) < 1.0f);
  CHECK(to_double01(0, 0) == 0.0);
  CHECK(to_double01(0x7FF, 0) == 0.0); // low 11 bits are dropped
  CHECK(to_double01(0x800, 0) == 0x1p-53);
  CHECK(to_double01(0, 0x80000000u) == 0.5); // the second word is the high half
  CHECK(to_double01(0xFFFFFFFFu, 0xFFFFFFFFu) == 1.0 - 0x1p-53);
  CHECK(to_double01(0xFFFFFFFFu, 0xFFFFFFFFu) < 1.0);
  CHECK(mulhi64(1ull << 63, 4) == 2);
  CHECK(mulhi64(~0ull, ~0ull) == ~0ull - 1);
  CHECK(mulhi64(0x123456789abcdef0ull, 0x0fedcba987654321ull) == 0x0121fa00ad77d742ull);
  // Box-Muller never takes log(0): u1 = 0 gives r = 0, u1 just below 1 gives the largest finite radius.
  const auto z0 = box_muller(0.0f, 0.25f);
  CHECK(std::isfinite(z0[0]));
  CHECK(std::isfinite(z0[1]));
  const auto zmax = box_muller(to_float01(0xFFFFFFFFu), 0.0f);
  CHECK(zmax[0] == doctest::Approx(std::sqrt(2.0 * 24.0 * std::log(2.0))).epsilon(1e-5));
  const auto dmax = box_muller(to_double01(0xFFFFFFFFu, 0xFFFFFFFFu), 0.0);
  CHECK(dmax[0] == doctest::Approx(std::sqrt(2.0 * 53.0 * std::log(2.0))).epsilon(1e-12));
}

TEST_CASE("Generator: seed, offset, reserve, copy") {
  Generator g;
  CHECK(g.initial_seed() == 67280421310721ull);
  CHECK(g.offset() == 0);
  CHECK(g.reserve(5) == 0);
  CHECK(g.reserve(3) == 5);
  CHECK(g.offset() == 8);
  CHECK(g.reserve(0) == 8);
  const kiln::PhiloxState s = g.philox_state(2);
  CHECK(s.seed == 67280421310721ull);
  CHECK(s.counter == 8);
  CHECK(g.offset() == 10);

  Generator c = g; // snapshot
  CHECK(c.reserve(1) == 10);
  CHECK(g.offset() == 10);
  c = Generator(9);
  CHECK(c.initial_seed() == 9);
  CHECK(c.offset() == 0);

  g.set_offset(100);
  CHECK(g.reserve(1) == 100);
  g.manual_seed(42);
  CHECK(g.initial_seed() == 42);
  CHECK(g.offset() == 0); // manual_seed rewinds

  kiln::manual_seed(1234);
  CHECK(kiln::default_generator().initial_seed() == 1234);
  CHECK(kiln::default_generator().offset() == 0);
  CHECK(&kiln::default_generator() == &kiln::default_generator());
}

TEST_CASE("Generator: reserve is thread-safe") {
  Generator g(3);
  constexpr int kThreads = 4, kPer = 20000;
  std::vector<std::vector<std::uint64_t>> got(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPer; ++i) got[t].push_back(g.reserve(2));
    });
  for (auto& t : ts) t.join();
  std::set<std::uint64_t> all;
  for (const auto& v : got) all.insert(v.begin(), v.end());
  CHECK(all.size() == static_cast<std::size_t>(kThreads * kPer));
  CHECK(g.offset() == 2ull * kThreads * kPer);
  CHECK(*all.rbegin() == 2ull * (kThreads * kPer - 1));
  for (std::uint64_t x : all) REQUIRE(x % 2 == 0);
}

TEST_CASE("fill: element i is the documented function of (seed, start, i)") {
  using namespace kiln::philox;
  const std::uint64_t seed = 0x0123456789abcdefull;
  Generator g(seed);
  g.set_offset(7);

  std::vector<float> f(11);
  kiln::fill_uniform(g, f.data(), 11, 0.0, 1.0);
  CHECK(g.offset() == 7 + 3);
  for (std::size_t i = 0; i < f.size(); ++i) REQUIRE(f[i] == to_float01(block(seed, 7 + i / 4)[i % 4]));

  std::vector<double> d(5);
  kiln::fill_uniform(g, d.data(), 5, 0.0, 1.0);
  CHECK(g.offset() == 10 + 3);
  for (std::size_t i = 0; i < d.size(); ++i) {
    const Counter w = block(seed, 10 + i / 2);
    REQUIRE(d[i] == to_double01(w[2 * (i % 2)], w[2 * (i % 2) + 1]));
  }

  std::vector<float> nf(6);
  kiln::fill_normal(g, nf.data(), 6, 0.0, 1.0);
  CHECK(g.offset() == 13 + 2);
  for (std::size_t i = 0; i < nf.size(); ++i) {
    const Counter w = block(seed, 13 + i / 4);
    const std::size_t p = (i % 4) / 2;
    const auto z = box_muller(to_float01(w[2 * p]), to_float01(w[2 * p + 1]));
    REQUIRE(nf[i] == static_cast<float>(0.0 + 1.0 * static_cast<double>(z[i % 2])));
  }

  std::vector<double> nd(3);
  kiln::fill_normal(g, nd.data(), 3, 0.0, 1.0);
  CHECK(g.offset() == 15 + 2);
  for (std::size_t i = 0; i < nd.size(); ++i) {
    const Counter w = block(seed, 15 + i / 2);
    const auto z = box_muller(to_double01(w[0], w[1]), to_double01(w[2], w[3]));
    REQUIRE(nd[i] == z[i % 2]);
  }

  std::vector<std::int64_t> r(5);
  kiln::fill_randint(g, r.data(), 5, -1000, 1000);
  CHECK(g.offset() == 17 + 3);
  for (std::size_t i = 0; i < r.size(); ++i) {
    const Counter w = block(seed, 17 + i / 2);
    const std::uint64_t x = (std::uint64_t{w[2 * (i % 2) + 1]} << 32) | w[2 * (i % 2)];
    REQUIRE(r[i] == -1000 + static_cast<std::int64_t>(mulhi64(x, 2000)));
  }

  std::vector<std::int32_t> b(9);
  kiln::fill_bernoulli(g, b.data(), 9, 0.5);
  CHECK(g.offset() == 20 + 3);
  for (std::size_t i = 0; i < b.size(); ++i)
    REQUIRE(b[i] == (to_float01(block(seed, 20 + i / 4)[i % 4]) < 0.5f ? 1 : 0));

  // Seed 0, offset 0: the first float is the top 24 bits of Random123's first all-zero answer word.
  Generator z(0);
  float first = -1;
  kiln::fill_uniform(z, &first, 1, 0.0, 1.0);
  CHECK(first == static_cast<float>(0x6627e8d5u >> 8) * 0x1p-24f);
}

TEST_CASE("fill: same seed, same numbers; different seed, different numbers; offsets advance") {
  Generator a(5), b(5), c(6);
  std::vector<float> x(1000), y(1000), z(1000);
  kiln::fill_uniform(a, x.data(), 1000, 0.0, 1.0);
  kiln::fill_uniform(b, y.data(), 1000, 0.0, 1.0);
  kiln::fill_uniform(c, z.data(), 1000, 0.0, 1.0);
  CHECK(same_bits(x, y));
  CHECK(std::count_if(x.begin(), x.end(), [&, i = 0](float v) mutable { return v == z[i++]; }) < 5);

  // A second call continues the stream: two fills of 500 (a multiple of 4) equal one fill of 1000.
  std::vector<float> again(1000);
  kiln::fill_uniform(a, again.data(), 1000, 0.0, 1.0);
  CHECK_FALSE(same_bits(x, again));
  Generator d(5);
  kiln::fill_uniform(d, y.data(), 500, 0.0, 1.0);
  kiln::fill_uniform(d, y.data() + 500, 500, 0.0, 1.0);
  CHECK(same_bits(x, y));

  // Rewinding the offset replays; manual_seed replays from the start.
  a.set_offset(250);
  kiln::fill_uniform(a, y.data(), 1000, 0.0, 1.0);
  CHECK(same_bits(again, y));
  a.manual_seed(5);
  kiln::fill_uniform(a, y.data(), 1000, 0.0, 1.0);
  CHECK(same_bits(x, y));

  // The default generator follows kiln::manual_seed.
  kiln::manual_seed(5);
  kiln::fill_uniform(kiln::default_generator(), y.data(), 1000, 0.0, 1.0);
  CHECK(same_bits(x, y));
}

#ifdef _OPENMP
TEST_CASE_TEMPLATE("fill: bitwise identical for any thread count", T, float, double, MockBf16, std::int32_t,
                   std::int64_t) {
  constexpr std::int64_t n = 300001; // above the parallel threshold, not a multiple of 4
  auto run = [&](int threads) {
    std::vector<T> u(n), v(n), r(n), b(n);
    with_threads(threads, [&] {
      Generator g(77);
      if constexpr (!std::is_integral_v<T>) {
        kiln::fill_uniform(g, u.data(), n, -2.0, 3.0);
        kiln::fill_normal(g, v.data(), n, 1.0, 2.0);
      }
      kiln::fill_randint(g, r.data(), n, -50, 50);
      kiln::fill_bernoulli(g, b.data(), n, 0.25);
    });
    return std::vector<std::vector<T>>{u, v, r, b};
  };
  const auto one = run(1);
  for (int t : {2, 3, 4}) {
    CAPTURE(t);
    const auto many = run(t);
    for (std::size_t k = 0; k < one.size(); ++k) CHECK(same_bits(one[k], many[k]));
  }
}
#endif

TEST_CASE_TEMPLATE("fill_uniform: values lie in [low, high)", T, float, double, MockBf16) {
  const std::int64_t n = 1 << 20;
  std::vector<T> v(n);
  Generator g(11);
  for (const auto& range : {std::pair{0.0, 1.0}, std::pair{-2.0, 3.0}, std::pair{1.0, 2.0}, std::pair{-1.0, -0.5}}) {
    const double lo = range.first, hi = range.second; // not a structured binding: clang 14 cannot capture those
    CAPTURE(lo);
    CAPTURE(hi);
    kiln::fill_uniform(g, v.data(), n, lo, hi);
    const auto [mn, mx] = std::minmax_element(v.begin(), v.end(), [](const T& a, const T& b) { return to_d(a) < to_d(b); });
    CHECK(to_d(*mn) >= lo);
    CHECK(to_d(*mx) < hi);
  }
  // low == high is allowed and gives low.
  kiln::fill_uniform(g, v.data(), 10, 0.5, 0.5);
  for (int i = 0; i < 10; ++i) CHECK(to_d(v[static_cast<std::size_t>(i)]) == 0.5);
}

TEST_CASE("fill_uniform: a value rounded up to high becomes low") {
  // In bfloat16, [1, 2) has spacing 2^-7, so about 2^-8 of the draws round to 2.0 and must become 1.0: the value
  // 1.0 then has twice its own share (2^-7 in all), and 2.0 never appears.
  const std::int64_t n = 1 << 20;
  std::vector<MockBf16> v(n);
  Generator g(12);
  kiln::fill_uniform(g, v.data(), n, 1.0, 2.0);
  const auto ones = std::count_if(v.begin(), v.end(), [](MockBf16 x) { return static_cast<float>(x) == 1.0f; });
  const double p = 0x1p-7, se = std::sqrt(p * (1 - p) / n);
  CHECK(std::abs(static_cast<double>(ones) / n - p) < 5 * se);
}

TEST_CASE_TEMPLATE("fill_uniform: mean and variance of 1M values", T, float, double) {
  const std::int64_t n = 1000000;
  const double lo = -2, hi = 3, w = hi - lo;
  std::vector<T> v(n);
  Generator g(21);
  kiln::fill_uniform(g, v.data(), n, lo, hi);
  const Moments m = moments(v);
  const double var = w * w / 12, se_mean = std::sqrt(var / n);
  const double se_var = std::sqrt((std::pow(w, 4) / 80 - var * var) / n);
  CHECK(std::abs(m.mean - (lo + hi) / 2) < 5 * se_mean);
  CHECK(std::abs(m.var - var) < 5 * se_var);
}

TEST_CASE_TEMPLATE("fill_normal: mean and variance of 1M values", T, float, double) {
  const std::int64_t n = 1000000;
  const double mean = 1.5, sd = 2.0;
  std::vector<T> v(n);
  Generator g(31);
  kiln::fill_normal(g, v.data(), n, mean, sd);
  CHECK(std::all_of(v.begin(), v.end(), [](T x) { return std::isfinite(x); }));
  const Moments m = moments(v);
  CHECK(std::abs(m.mean - mean) < 5 * sd / std::sqrt(n));
  CHECK(std::abs(m.var - sd * sd) < 5 * std::sqrt(2.0) * sd * sd / std::sqrt(n));
  // The fraction within one standard deviation, 0.682689...
  const auto in1 = std::count_if(v.begin(), v.end(), [&](T x) { return std::abs(x - mean) < sd; });
  const double p1 = 0.6826894921370859;
  CHECK(std::abs(static_cast<double>(in1) / n - p1) < 5 * std::sqrt(p1 * (1 - p1) / n));
}

TEST_CASE("fill_normal: generic element type and std = 0") {
  std::vector<MockBf16> v(1000);
  Generator g(32);
  kiln::fill_normal(g, v.data(), 1000, 0.0, 1.0);
  CHECK(std::all_of(v.begin(), v.end(), [](MockBf16 x) { return std::isfinite(static_cast<float>(x)); }));
  std::vector<double> c(10);
  kiln::fill_normal(g, c.data(), 10, 4.0, 0.0);
  for (double x : c) CHECK(x == 4.0);
}

TEST_CASE_TEMPLATE("fill_randint: covers exactly [low, high) with chi-square-uniform frequencies", T, std::int32_t,
                   std::int64_t, float, double) {
  const std::int64_t n = 1000000, lo = -3, hi = 7, k = hi - lo;
  std::vector<T> v(n);
  Generator g(41);
  kiln::fill_randint(g, v.data(), n, lo, hi);
  std::vector<std::int64_t> count(k, 0);
  std::int64_t bad = 0; // non-integers or values outside [lo, hi)
  for (const T& x : v) {
    const auto i = static_cast<std::int64_t>(x);
    if (static_cast<T>(i) != x || i < lo || i >= hi)
      ++bad;
    else
      ++count[static_cast<std::size_t>(i - lo)];
  }
  REQUIRE(bad == 0);
  const double expect = static_cast<double>(n) / k;
  double chi2 = 0;
  for (std::int64_t c : count) {
    CHECK(c > 0);
    chi2 += (c - expect) * (c - expect) / expect;
  }
  // 9 degrees of freedom: P(chi2 > 27.9) = 0.001, P(chi2 > 45) < 1e-6.
  CHECK(chi2 < 45.0);
}

TEST_CASE("fill_randint: ranges of one value, 2^32 + 1 values and the whole int64 range") {
  Generator g(42);
  std::vector<std::int64_t> v(100000);
  kiln::fill_randint(g, v.data(), 100, 5, 6);
  for (int i = 0; i < 100; ++i) CHECK(v[static_cast<std::size_t>(i)] == 5);

  const std::int64_t lo = -(std::int64_t{1} << 31), hi = (std::int64_t{1} << 32) + 1;
  kiln::fill_randint(g, v.data(), static_cast<std::int64_t>(v.size()), lo, hi);
  CHECK(*std::min_element(v.begin(), v.end()) >= lo);
  CHECK(*std::max_element(v.begin(), v.end()) < hi);

  constexpr auto mn = std::numeric_limits<std::int64_t>::min(), mx = std::numeric_limits<std::int64_t>::max();
  kiln::fill_randint(g, v.data(), static_cast<std::int64_t>(v.size()), mn, mx);
  const auto neg = std::count_if(v.begin(), v.end(), [](std::int64_t x) { return x < 0; });
  const double se = std::sqrt(0.25 / static_cast<double>(v.size()));
  CHECK(std::abs(static_cast<double>(neg) / static_cast<double>(v.size()) - 0.5) < 5 * se);
  CHECK(std::count(v.begin(), v.end(), mx) == 0); // high is excluded (and would be a 2^-64 event anyway)

  std::vector<std::int32_t> w(100000);
  constexpr auto imn = std::numeric_limits<std::int32_t>::min(), imx = std::numeric_limits<std::int32_t>::max();
  kiln::fill_randint(g, w.data(), static_cast<std::int64_t>(w.size()), imn, std::int64_t{imx} + 1);
  CHECK(std::count_if(w.begin(), w.end(), [](std::int32_t x) { return x < 0; }) > 0);
  CHECK(std::count_if(w.begin(), w.end(), [](std::int32_t x) { return x > 0; }) > 0);
}

TEST_CASE_TEMPLATE("fill_bernoulli: frequency", T, float, double, std::int32_t, std::int64_t) {
  const std::int64_t n = 1000000;
  std::vector<T> v(n);
  Generator g(51);
  for (double p : {0.3, 0.001, 0.999}) {
    CAPTURE(p);
    kiln::fill_bernoulli(g, v.data(), n, p);
    const auto ones = std::count(v.begin(), v.end(), T(1));
    CHECK(std::count(v.begin(), v.end(), T(0)) + ones == n);
    CHECK(std::abs(static_cast<double>(ones) / n - p) < 5 * std::sqrt(p * (1 - p) / n));
  }
  kiln::fill_bernoulli(g, v.data(), n, 0.0);
  CHECK(std::count(v.begin(), v.end(), T(1)) == 0);
  kiln::fill_bernoulli(g, v.data(), n, 1.0);
  CHECK(std::count(v.begin(), v.end(), T(1)) == n);
}

TEST_CASE("fill: invalid arguments throw and do not advance the generator") {
  Generator g(61);
  std::vector<float> f(8);
  std::vector<std::int32_t> i(8);
  CHECK_THROWS_AS(kiln::fill_uniform(g, f.data(), 8, 1.0, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_uniform(g, f.data(), 8, 0.0, std::numeric_limits<double>::infinity()),
                  std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_uniform(g, f.data(), -1, 0.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_uniform<float>(g, nullptr, 8, 0.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_normal(g, f.data(), 8, 0.0, -1.0), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_normal(g, f.data(), 8, std::nan(""), 1.0), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_randint(g, i.data(), 8, 3, 3), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_randint(g, i.data(), 8, 0, (std::int64_t{1} << 31) + 1), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_randint(g, i.data(), 8, -(std::int64_t{1} << 31) - 1, 0), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_bernoulli(g, i.data(), 8, 1.5), std::invalid_argument);
  CHECK_THROWS_AS(kiln::fill_bernoulli(g, i.data(), 8, std::nan("")), std::invalid_argument);
  CHECK(g.offset() == 0);
  kiln::fill_uniform(g, f.data(), 0, 0.0, 1.0); // n = 0 reserves nothing
  CHECK(g.offset() == 0);
}

}  // namespace test_core_generator
