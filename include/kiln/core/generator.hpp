// kiln/core/generator.hpp: counter-based random numbers (Philox4x32-10).
//
// Philox4x32-10 is a pure function of a 128-bit counter and a 64-bit key (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC'11; the Random123 library). It is the generator behind curand's Philox4_32_10 and
// PyTorch's CUDA generator, with their layout: key = the seed split into two words (low word first), counter
// words 0-1 = a 64-bit counter index, words 2-3 = a 64-bit stream (subsequence) id, 0 for now. So
// philox::block(seed, c, s) is the first four outputs of PyTorch's at::Philox4_32_10(seed, s, c) and of curand
// after curand_init(seed, s, 4 * c) (curand counts its offset in 32-bit values).
//
// A Generator holds only (seed, offset): offset is the index of the next unused counter. Each fill first reserves
// the counters it needs, so element i of a random tensor is a pure function of (seed, first counter, i); filling
// is parallel and its result never depends on the number of threads. The mapping below is part of the API: a GPU
// kernel reproduces it.
//
//   k     = values per counter: uniform and normal 4 (float-like T) or 2 (double); randint 2; bernoulli 4
//   start = gen.reserve(ceil(n / k))
//   w     = philox4x32_10({lo32(c), hi32(c), 0, 0}, {lo32(seed), hi32(seed)}),  c = start + i / k (mod 2^64)
//   element i takes lane i % k of w, as each fill_* documents.
//
// The raw words and the [0, 1) uniforms are bitwise identical on every platform. What follows them (the affine map
// of fill_uniform, log/sin/cos of fill_normal) is IEEE arithmetic and libm, so another compiler or device agrees up
// to the ulps its libm differs by (and a GPU kernel must avoid FMA contraction to match the affine map bitwise).
// On one machine and build, results are bitwise the same for any thread count.
#pragma once

#include <hwy/highway.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numbers>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace kiln {

namespace philox {

using Counter = std::array<std::uint32_t, 4>;
using Key = std::array<std::uint32_t, 2>;

inline constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // round multipliers
inline constexpr std::uint32_t kBump0 = 0x9E3779B9u, kBump1 = 0xBB67AE85u; // Weyl key increments

// Philox4x32 with R rounds, as Random123's philox4x32_R: round 1 uses the key as given, and the key is bumped
// before each later round.
template <int R>
constexpr Counter philox4x32(Counter c, Key k) noexcept {
  for (int r = 0; r < R; ++r) {
    if (r > 0) {
      k[0] += kBump0;
      k[1] += kBump1;
    }
    const std::uint64_t p0 = std::uint64_t{kMul0} * c[0];
    const std::uint64_t p1 = std::uint64_t{kMul1} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
  }
  return c;
}

constexpr Counter philox4x32_10(Counter counter, Key key) noexcept { return philox4x32<10>(counter, key); }

constexpr Key key_from_seed(std::uint64_t seed) noexcept {
  return {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
}

constexpr Counter make_counter(std::uint64_t index, std::uint64_t stream = 0) noexcept {
  return {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
          static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)};
}

// The four random words of counter `index` under `seed`.
constexpr Counter block(std::uint64_t seed, std::uint64_t index, std::uint64_t stream = 0) noexcept {
  return philox4x32_10(make_counter(index, stream), key_from_seed(seed));
}

}  // namespace philox
}  // namespace kiln

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace philox_lanes {
namespace hn = hwy::HWY_NAMESPACE;

// lo and hi: the low and high words of the 64-bit products a * b, lane by lane. MulEven multiplies the even
// lanes; the odd ones are shifted down into even places first (b_odd: b so shifted, once per call of blocks).
template <class D, class V>
HWY_INLINE void multiply_wide(D d, V a, V b, V b_odd, V& lo, V& hi) {
  const hn::Repartition<std::uint64_t, D> d64;
  const auto even = hn::MulEven(a, b);
  const auto odd = hn::MulEven(hn::BitCast(d, hn::ShiftRight<32>(hn::BitCast(d64, a))), b_odd);
  lo = hn::OddEven(hn::BitCast(d, hn::ShiftLeft<32>(odd)), hn::BitCast(d, even));
  hi = hn::OddEven(hn::BitCast(d, odd), hn::BitCast(d, hn::ShiftRight<32>(even)));
}

// philox::blocks on Highway vectors, one lane per counter: all W / lanes vectors go through a round together,
// so that one vector's multiplies wait on their latency while the others' run.
template <int W>
HWY_INLINE void blocks(std::uint64_t seed, std::uint64_t first, std::uint32_t (&words)[4][W]) {
  const hn::ScalableTag<std::uint32_t> d;
  constexpr int L = int(hn::MaxLanes(d)), kVectors = W / L;
  static_assert(W % L == 0, "philox::blocks: W must be a multiple of the vector's lanes");
  using V = hn::Vec<decltype(d)>;
  const hn::Repartition<std::uint64_t, decltype(d)> d64;
  const V m0 = hn::Set(d, philox::kMul0), m1 = hn::Set(d, philox::kMul1);
  const V m0_odd = hn::BitCast(d, hn::ShiftRight<32>(hn::BitCast(d64, m0)));
  const V m1_odd = hn::BitCast(d, hn::ShiftRight<32>(hn::BitCast(d64, m1)));
  V c0[kVectors], c1[kVectors], c2[kVectors], c3[kVectors];
  for (int v = 0; v < kVectors; ++v) {  // counters first + v L + lane, carried into the high word
    const std::uint64_t base = first + std::uint64_t(v * L);
    const V low = hn::Set(d, std::uint32_t(base));
    c0[v] = hn::Add(low, hn::Iota(d, 0));
    c1[v] = hn::Add(hn::Set(d, std::uint32_t(base >> 32)), hn::IfThenElseZero(hn::Lt(c0[v], low), hn::Set(d, 1u)));
    c2[v] = c3[v] = hn::Zero(d);
  }
  std::uint32_t k0 = std::uint32_t(seed), k1 = std::uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const V key0 = hn::Set(d, k0), key1 = hn::Set(d, k1);
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v) {
      V lo0, hi0, lo1, hi1;
      multiply_wide(d, c0[v], m0, m0_odd, lo0, hi0);
      multiply_wide(d, c2[v], m1, m1_odd, lo1, hi1);
      c0[v] = hn::Xor(hn::Xor(hi1, c1[v]), key0);
      c2[v] = hn::Xor(hn::Xor(hi0, c3[v]), key1);
      c1[v] = lo1;
      c3[v] = lo0;
    }
    k0 += philox::kBump0;
    k1 += philox::kBump1;
  }
  for (int v = 0; v < kVectors; ++v) {
    hn::StoreU(c0[v], d, words[0] + v * L);
    hn::StoreU(c1[v], d, words[1] + v * L);
    hn::StoreU(c2[v], d, words[2] + v * L);
    hn::StoreU(c3[v], d, words[3] + v * L);
  }
}

}  // namespace philox_lanes
}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();

namespace kiln {
namespace philox {

// Counters drawn together by the fills (a multiple of every target's lanes): two AVX-512 vectors, whose rounds
// interleave (one alone waits on its multiplies: 1.9 ns per counter against 1.6 for two).
inline constexpr int kBlockWidth = 32;

// The words of the W counters first, first + 1, ...: words[j][i] is word j of block(seed, first + i). The same
// rounds as philox4x32 on Highway vectors, one lane per counter (philox_lanes::blocks): 1.6 ns per counter with
// AVX-512 on the development machine, against 4.0 for the loop GCC vectorized by itself that it replaces.
// HWY_SCALAR (no 64-bit products of lane pairs) calls block() per counter.
template <int W>
inline void blocks(std::uint64_t seed, std::uint64_t first, std::uint32_t (&words)[4][W]) noexcept {
#if HWY_TARGET != HWY_SCALAR
  kiln::HWY_NAMESPACE::philox_lanes::blocks<W>(seed, first, words);
#else
  for (int i = 0; i < W; ++i) {
    const Counter w = block(seed, first + static_cast<std::uint64_t>(i));
    for (int j = 0; j < 4; ++j) words[j][i] = w[j];
  }
#endif
}

// The words of elements e0 .. e0 + n - 1, where element e takes lane e % 4 of counter start + e / 4 (the layout
// of the k = 4 fills, fill_bernoulli's): f(j, words, count) gets the words of elements e0 + j .. e0 + j + count - 1
// in order, in runs of at most 4 kBlockWidth (the counters blocks() draws together).
template <class F>
inline void for_each_word_run(std::uint64_t seed, std::uint64_t start, std::uint64_t e0, std::int64_t n, F&& f) {
  constexpr int W = kBlockWidth;
  std::int64_t j = 0;
  for (std::uint64_t c = e0 / 4; j < n; c += W) {
    std::uint32_t words[4][W], run[4 * W];
    blocks<W>(seed, start + c, words);
    for (int i = 0; i < W; ++i)
      for (int lane = 0; lane < 4; ++lane) run[4 * i + lane] = words[lane][i];
    const auto skip = static_cast<std::int64_t>(e0 + static_cast<std::uint64_t>(j) - 4 * c);  // first run only
    const std::int64_t count = std::min<std::int64_t>(4 * W - skip, n - j);
    f(j, run + skip, count);
    j += count;
  }
}

// Top 24 bits -> float in [0, 1): every value is exact, the largest is 1 - 2^-24.
constexpr float to_float01(std::uint32_t x) noexcept { return static_cast<float>(x >> 8) * 0x1p-24f; }

// A Bernoulli draw from one word: 1 with probability p (compared in double, so P(1) is p rounded up to a
// multiple of 2^-24). fill_bernoulli's rule, and fused attention dropout's (attention/flex_cpu.hpp).
constexpr bool bernoulli(std::uint32_t x, double p) noexcept { return static_cast<double>(to_float01(x)) < p; }

// bernoulli() in integers, for vector loops: bernoulli(x, p) == (x >> 8) < bernoulli_threshold(p) for every word x
// (x >> 8 is an integer, and p * 2^24 is exact).
constexpr std::uint32_t bernoulli_threshold(double p) noexcept {
  const double t = p * 0x1p24;
  if (!(t > 0)) return 0;
  if (t >= 0x1p24) return 1u << 24;
  const auto whole = static_cast<std::uint32_t>(t);
  return static_cast<double>(whole) < t ? whole + 1 : whole;
}

// Two words -> 64 bits (hi:lo) -> top 53 bits -> double in [0, 1), exact, the largest is 1 - 2^-53.
constexpr double to_double01(std::uint32_t lo, std::uint32_t hi) noexcept {
  return static_cast<double>(((std::uint64_t{hi} << 32) | lo) >> 11) * 0x1p-53;
}

// High 64 bits of a 64x64-bit product (CUDA: __umul64hi).
constexpr std::uint64_t mulhi64(std::uint64_t a, std::uint64_t b) noexcept {
#ifdef __SIZEOF_INT128__
  __extension__ using u128 = unsigned __int128;
  return static_cast<std::uint64_t>((static_cast<u128>(a) * b) >> 64);
#else
  const std::uint64_t al = a & 0xFFFFFFFFu, ah = a >> 32, bl = b & 0xFFFFFFFFu, bh = b >> 32;
  const std::uint64_t mid = ah * bl + ((al * bl) >> 32);
  return ah * bh + (mid >> 32) + ((al * bh + (mid & 0xFFFFFFFFu)) >> 32);
#endif
}

// Box-Muller on two uniforms in [0, 1), in F's precision: {r cos t, r sin t} with r = sqrt(-2 log(1 - u1)) and
// t = 2 pi u2. 1 - u1 lies in (0, 1], so the log is finite; |z| <= sqrt(2 * 24 ln 2) ~ 5.77 for float inputs
// (a tail mass of ~1e-8 is cut) and ~ 8.57 for double.
template <class F>
inline std::array<F, 2> box_muller(F u1, F u2) noexcept {
  const F r = std::sqrt(F(-2) * std::log(F(1) - u1));
  const F t = F(2) * std::numbers::pi_v<F> * u2;
  return {r * std::cos(t), r * std::sin(t)};
}

} // namespace philox

// A counter reservation: the seed and the first of the reserved counters, read together under one lock.
struct PhiloxState {
  std::uint64_t seed;
  std::uint64_t counter;
};

class Generator {
public:
  static constexpr std::uint64_t default_seed = 67280421310721ull; // PyTorch's default seed

  explicit Generator(std::uint64_t seed = default_seed) noexcept : seed_(seed) {}
  // Copies snapshot the state (like torch's Generator.clone()); the copy then advances independently.
  Generator(const Generator& other) {
    const PhiloxState s = other.state();
    seed_ = s.seed;
    offset_ = s.counter;
  }
  Generator& operator=(const Generator& other) {
    if (this != &other) {
      std::scoped_lock lock(mu_, other.mu_);
      seed_ = other.seed_;
      offset_ = other.offset_;
    }
    return *this;
  }

  // Sets the seed and rewinds the offset to 0, as torch's manual_seed does for its Philox generator.
  void manual_seed(std::uint64_t seed) {
    std::lock_guard lock(mu_);
    seed_ = seed;
    offset_ = 0;
  }
  std::uint64_t initial_seed() const { return state().seed; }
  // Index of the next unused 128-bit counter (not a count of values).
  std::uint64_t offset() const { return state().counter; }
  void set_offset(std::uint64_t offset) {
    std::lock_guard lock(mu_);
    offset_ = offset;
  }
  // Reserves n 128-bit counters and returns the index of the first. Thread-safe.
  std::uint64_t reserve(std::uint64_t n_counters) { return philox_state(n_counters).counter; }
  // Same, returning the seed too, read under the same lock (a concurrent manual_seed cannot split the pair).
  PhiloxState philox_state(std::uint64_t n_counters) {
    std::lock_guard lock(mu_);
    const PhiloxState s{seed_, offset_};
    offset_ += n_counters;
    return s;
  }
  PhiloxState state() const {
    std::lock_guard lock(mu_);
    return {seed_, offset_};
  }

private:
  mutable std::mutex mu_;
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

inline Generator& default_generator() {
  static Generator g;
  return g;
}

// Seeds the default generator, like torch::manual_seed.
inline void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

namespace detail {

inline constexpr std::int64_t kRandomParallelThreshold = 65536; // elements; below this one thread fills

inline void check_fill_args(const char* op, const void* out, std::int64_t n) {
  if (n < 0) throw std::invalid_argument(std::string(op) + ": negative element count " + std::to_string(n));
  if (n > 0 && out == nullptr) throw std::invalid_argument(std::string(op) + ": null output pointer");
}

// Reserves ceil(n / K) counters, then for each counter c writes make(w) (K values) to out[c*K, c*K + K), the
// last block cut at n. Each value depends only on its counter, so any split over threads gives the same bits.
template <std::size_t K, class T, class Make>
void fill_blocks(Generator& gen, T* out, std::int64_t n, Make make) {
  constexpr auto k = static_cast<std::int64_t>(K);
  const std::int64_t n_counters = n / k + (n % k != 0);
  const PhiloxState st = gen.philox_state(static_cast<std::uint64_t>(n_counters));
  constexpr int W = philox::kBlockWidth;
  const std::int64_t groups = n_counters / W + (n_counters % W != 0);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > kRandomParallelThreshold)
#endif
  for (std::int64_t group = 0; group < groups; ++group) {
    std::uint32_t words[4][W];
    philox::blocks<W>(st.seed, st.counter + static_cast<std::uint64_t>(group * W), words);
    for (std::int64_t c = group * W; c < std::min(n_counters, group * W + W); ++c) {
      const auto i = static_cast<std::size_t>(c - group * W);
      const std::array<T, K> v = make(philox::Counter{words[0][i], words[1][i], words[2][i], words[3][i]});
      const std::int64_t i0 = c * k;
      const std::int64_t count = std::min(k, n - i0);
      for (std::int64_t j = 0; j < count; ++j) out[i0 + j] = v[static_cast<std::size_t>(j)];
    }
  }
}

// fill_blocks<4> for a make that maps each word to its element on its own (element i = put(lane i % 4 of counter
// start + i / 4)): the words come in runs (philox::for_each_word_run) and put runs over each in a loop the
// compiler vectorizes, where fill_blocks' per-counter arrays kept uniform_ at 8 ns per counter, 5 times Philox's
// own cost (bench_elementwise's Uniform_Kiln). Chunks of whole runs go to the threads, so any split gives the
// same bits.
template <class T, class Put>
void fill_words(Generator& gen, T* out, std::int64_t n, Put put) {
  const std::int64_t n_counters = n / 4 + (n % 4 != 0);
  const PhiloxState st = gen.philox_state(static_cast<std::uint64_t>(n_counters));
  constexpr std::int64_t chunk = 4 * philox::kBlockWidth * 64;  // elements per task
  const std::int64_t chunks = n / chunk + (n % chunk != 0);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (n > kRandomParallelThreshold)
#endif
  for (std::int64_t t = 0; t < chunks; ++t) {
    T* dst = out + t * chunk;
    philox::for_each_word_run(st.seed, st.counter, static_cast<std::uint64_t>(t * chunk), std::min(chunk, n - t * chunk),
                              [&](std::int64_t j, const std::uint32_t* words, std::int64_t count) {
#ifdef _OPENMP
#pragma omp simd
#endif
                                for (std::int64_t i = 0; i < count; ++i) dst[j + i] = put(words[i]);
                              });
  }
}

// double and wider take the 53-bit path (2 values per counter); float, bfloat16, half take the 24-bit one (4).
template <class T>
inline constexpr bool wide_float = std::is_floating_point_v<T> && (sizeof(T) > sizeof(float));

template <class T>
double as_double(const T& x) {
  if constexpr (std::is_arithmetic_v<T>)
    return static_cast<double>(x);
  else
    return static_cast<double>(static_cast<float>(x)); // bfloat16, half: explicit conversion to float
}

} // namespace detail

// Uniform in [low, high). Float-like T: k = 4, element lane j: u = to_float01(w[j]); double: k = 2, lane j:
// u = to_double01(w[2j], w[2j+1]). The value is static_cast<T>(low + u * (high - low)), computed in double; if
// rounding to T reaches high, the element becomes static_cast<T>(low) (PyTorch's rule, which a kernel can copy).
template <class T>
void fill_uniform(Generator& gen, T* out, std::int64_t n, double low, double high) {
  static_assert(!std::is_integral_v<T>, "kiln: fill_uniform needs a floating-point element type; use fill_randint");
  detail::check_fill_args("fill_uniform", out, n);
  if (!(low <= high) || !std::isfinite(high - low))
    throw std::invalid_argument("fill_uniform: expected finite low <= high, got [" + std::to_string(low) + ", " +
                                std::to_string(high) + ")");
  const double range = high - low;
  // Both sides of the select computed before it: a conversion (or a read of the capture) inside it kept
  // fill_words' loop scalar.
  const T low_t = static_cast<T>(low);
  const auto put = [=](double u) {
    const T v = static_cast<T>(low + u * range), fallback = low_t;
    return detail::as_double(v) < high ? v : fallback;
  };
  if constexpr (detail::wide_float<T>) {
    detail::fill_blocks<2>(gen, out, n, [=](const philox::Counter& w) {
      return std::array<T, 2>{put(philox::to_double01(w[0], w[1])), put(philox::to_double01(w[2], w[3]))};
    });
  } else {
    detail::fill_words(gen, out, n, [=](std::uint32_t w) { return put(philox::to_float01(w)); });
  }
}

// Normal(mean, std). Float-like T: k = 4, Box-Muller in float on (to_float01(w[0]), to_float01(w[1])) gives lanes
// 0 (cos), 1 (sin), and on words 2, 3 lanes 2, 3. Double: k = 2, Box-Muller in double on
// (to_double01(w[0], w[1]), to_double01(w[2], w[3])) gives lanes 0 (cos), 1 (sin). Then
// static_cast<T>(mean + std * z), computed in double.
template <class T>
void fill_normal(Generator& gen, T* out, std::int64_t n, double mean, double std) {
  static_assert(!std::is_integral_v<T>, "kiln: fill_normal needs a floating-point element type");
  detail::check_fill_args("fill_normal", out, n);
  if (!std::isfinite(mean) || !std::isfinite(std) || !(std >= 0))
    throw std::invalid_argument("fill_normal: expected finite mean and std >= 0, got mean " + std::to_string(mean) +
                                ", std " + std::to_string(std));
  const auto put = [=](double z) { return static_cast<T>(mean + std * z); };
  if constexpr (detail::wide_float<T>) {
    detail::fill_blocks<2>(gen, out, n, [=](const philox::Counter& w) {
      const auto z = philox::box_muller(philox::to_double01(w[0], w[1]), philox::to_double01(w[2], w[3]));
      return std::array<T, 2>{put(z[0]), put(z[1])};
    });
  } else {
    detail::fill_blocks<4>(gen, out, n, [=](const philox::Counter& w) {
      const auto a = philox::box_muller(philox::to_float01(w[0]), philox::to_float01(w[1]));
      const auto b = philox::box_muller(philox::to_float01(w[2]), philox::to_float01(w[3]));
      return std::array<T, 4>{put(a[0]), put(a[1]), put(b[0]), put(b[1])};
    });
  }
}

// Integers in [low, high), any T. k = 2; lane j: x = (w[2j+1] << 32) | w[2j], value = low + mulhi64(x, high - low)
// (Lemire's multiply-shift without the rejection step, so no loop and a fixed number of draws per element). Each
// value's probability is within 1 / 2^64 of 1 / (high - low) in absolute terms, i.e. a relative bias below
// (high - low) / 2^64: under 2^-32 for ranges up to 2^32; the full int64 range is allowed.
template <class T>
void fill_randint(Generator& gen, T* out, std::int64_t n, std::int64_t low, std::int64_t high) {
  detail::check_fill_args("fill_randint", out, n);
  if (!(low < high))
    throw std::invalid_argument("fill_randint: expected low < high, got [" + std::to_string(low) + ", " +
                                std::to_string(high) + ")");
  if constexpr (std::is_integral_v<T>) {
    // (Compared as int64 rather than with std::cmp_less, which rejects bool.)
    using Limits = std::numeric_limits<T>;
    if (low < static_cast<std::int64_t>(Limits::min()) || high - 1 > static_cast<std::int64_t>(Limits::max()))
      throw std::invalid_argument("fill_randint: range [" + std::to_string(low) + ", " + std::to_string(high) +
                                  ") does not fit the element type");
  }
  const std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  const auto put = [=](std::uint32_t lo, std::uint32_t hi) {
    const std::uint64_t x = (std::uint64_t{hi} << 32) | lo;
    return static_cast<T>(static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + philox::mulhi64(x, range)));
  };
  detail::fill_blocks<2>(gen, out, n, [=](const philox::Counter& w) {
    return std::array<T, 2>{put(w[0], w[1]), put(w[2], w[3])};
  });
}

// 1 with probability p, else 0. k = 4; lane j: to_float01(w[j]) < p, compared in double (so P(1) is p rounded up
// to a multiple of 2^-24).
template <class T>
void fill_bernoulli(Generator& gen, T* out, std::int64_t n, double p) {
  detail::check_fill_args("fill_bernoulli", out, n);
  if (!(p >= 0 && p <= 1)) throw std::invalid_argument("fill_bernoulli: expected 0 <= p <= 1, got " + std::to_string(p));
  const std::uint32_t threshold = philox::bernoulli_threshold(p);  // bernoulli(x, p) in integers
  detail::fill_words(gen, out, n, [=](std::uint32_t x) { return static_cast<T>((x >> 8) < threshold ? 1 : 0); });
}

} // namespace kiln
