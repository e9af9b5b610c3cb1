// Random factories: the values follow the Philox mapping of core/generator.hpp (recomputed here from
// philox::block), seeds reproduce, ranges and moments hold, views are filled in row-major order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_random {

using namespace kiln;

namespace {
template <class T>
double mean_of(const Tensor<T>& t) {
  double s = 0;
  for (T v : t.to_vector()) s += double(compute_t<T>(v));
  return s / double(t.numel());
}
template <class T>
double var_of(const Tensor<T>& t) {
  const double m = mean_of(t);
  double s = 0;
  for (T v : t.to_vector()) s += (double(compute_t<T>(v)) - m) * (double(compute_t<T>(v)) - m);
  return s / double(t.numel() - 1);
}
}  // namespace

TEST_CASE("rand<float> gives the Philox words of its seed, in row-major order") {
  Generator g(1234);
  Tensor<float> a = rand({3, 5}, &g);
  REQUIRE(a.shape() == Shape{3, 5});
  const std::vector<float> v = a.to_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    const float expected = philox::to_float01(philox::block(1234, i / 4)[i % 4]);
    CHECK(v[i] == expected);
  }
  CHECK(g.offset() == 4);  // ceil(15 / 4) counters reserved
  Tensor<float> b = rand({3, 5}, &g);
  CHECK(b.to_vector() != v);  // the generator moved on
  Generator g2(1234);
  CHECK(rand({3, 5}, &g2).to_vector() == v);
}

TEST_CASE_TEMPLATE("uniform_ and bernoulli_ on a large tensor: every element from its counter, any thread count", T,
                   float, bfloat16) {
  // Past the parallel threshold, across many runs of words and chunks of threads, the last counter cut short.
  const int64_t n = 200003;
  const double low = -2, high = 3;
  auto expected_uniform = [&](int64_t i) {
    const double u = philox::to_float01(philox::block(42, uint64_t(i) / 4)[size_t(i % 4)]);
    const T v = T(low + u * (high - low));
    return double(compute_t<T>(v)) < high ? v : T(low);
  };
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    set_num_threads(threads);
    Generator g(42);
    const std::vector<T> u = uniform_(empty<T>({n}), low, high, &g).to_vector();
    CHECK(g.offset() == uint64_t((n + 3) / 4));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += !(u[size_t(i)] == expected_uniform(i));
    CHECK(wrong == 0);
    Generator g2(42);
    const std::vector<T> b = bernoulli_(empty<T>({n}), 0.3, &g2).to_vector();
    wrong = 0;
    for (int64_t i = 0; i < n; ++i)
      wrong += !(b[size_t(i)] == T(philox::bernoulli(philox::block(42, uint64_t(i) / 4)[size_t(i % 4)], 0.3) ? 1 : 0));
    CHECK(wrong == 0);
  }
  set_num_threads(saved);
}

TEST_CASE("randn and randint follow the documented mapping") {
  Generator g(99);
  const std::vector<float> n = randn({6}, &g).to_vector();
  for (size_t c = 0; c < 2; ++c) {
    const auto w = philox::block(99, c);
    const auto z0 = philox::box_muller(philox::to_float01(w[0]), philox::to_float01(w[1]));
    const auto z1 = philox::box_muller(philox::to_float01(w[2]), philox::to_float01(w[3]));
    const float expected[4] = {z0[0], z0[1], z1[0], z1[1]};
    for (size_t j = 0; j < 4 && c * 4 + j < n.size(); ++j) CHECK(n[c * 4 + j] == expected[j]);
  }
  Generator h(5);
  const std::vector<int64_t> r = randint(-10, 20, {5}, &h).to_vector();
  for (size_t i = 0; i < r.size(); ++i) {
    const auto w = philox::block(5, i / 2);
    const size_t lane = i % 2;
    const uint64_t x = (uint64_t(w[2 * lane + 1]) << 32) | w[2 * lane];
    CHECK(r[i] == -10 + int64_t(philox::mulhi64(x, 30)));
  }
}

TEST_CASE("kiln::manual_seed makes the default generator reproducible") {
  manual_seed(2024);
  const std::vector<float> a = rand({257}).to_vector();
  const std::vector<float> an = randn({33}).to_vector();
  manual_seed(2024);
  CHECK(rand({257}).to_vector() == a);
  CHECK(randn({33}).to_vector() == an);
  manual_seed(2025);
  CHECK(rand({257}).to_vector() != a);
  // The default generator is what a null pointer means.
  manual_seed(3);
  Generator g(3);
  CHECK(rand({10}).to_vector() == rand({10}, &g).to_vector());
}

TEST_CASE("values stay in range and have the right moments") {
  manual_seed(11);
  Tensor<float> u = rand({100000});
  const std::vector<float> uv = u.to_vector();
  CHECK(*std::min_element(uv.begin(), uv.end()) >= 0.0f);
  CHECK(*std::max_element(uv.begin(), uv.end()) < 1.0f);
  CHECK(mean_of(u) == doctest::Approx(0.5).epsilon(0.01));
  CHECK(var_of(u) == doctest::Approx(1.0 / 12).epsilon(0.02));

  Tensor<float> z = randn({100000});
  CHECK(std::fabs(mean_of(z)) < 0.02);
  CHECK(var_of(z) == doctest::Approx(1.0).epsilon(0.02));

  Tensor<float> nz = normal(3.0, 0.5, {50000});
  CHECK(mean_of(nz) == doctest::Approx(3.0).epsilon(0.01));
  CHECK(std::sqrt(var_of(nz)) == doctest::Approx(0.5).epsilon(0.03));

  Tensor<float> w = uniform_(empty({20000}), -2, 3);
  const std::vector<float> wv = w.to_vector();
  CHECK(*std::min_element(wv.begin(), wv.end()) >= -2.0f);
  CHECK(*std::max_element(wv.begin(), wv.end()) < 3.0f);
  CHECK(mean_of(w) == doctest::Approx(0.5).epsilon(0.05));

  Tensor<int64_t> r = randint(-3, 4, {5000});
  const std::vector<int64_t> rv = r.to_vector();
  CHECK(std::set<int64_t>(rv.begin(), rv.end()) == std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3});
  Tensor<int32_t> r32 = randint<int32_t>(7, {1000});
  for (int32_t x : r32.to_vector()) CHECK((x >= 0 && x < 7));
}

TEST_CASE("double and bfloat16 tensors") {
  Generator g(77);
  const std::vector<double> d = rand<double>({5}, &g).to_vector();
  for (size_t i = 0; i < d.size(); ++i) {
    const auto w = philox::block(77, i / 2);
    CHECK(d[i] == philox::to_double01(w[2 * (i % 2)], w[2 * (i % 2) + 1]));
  }
  manual_seed(8);
  CHECK(var_of(randn<double>({50000})) == doctest::Approx(1.0).epsilon(0.02));

  Generator gb(77);
  Tensor<bfloat16> b = rand<bfloat16>({4000}, &gb);
  const std::vector<bfloat16> bv = b.to_vector();
  for (size_t i = 0; i < bv.size(); ++i) {
    const float u = philox::to_float01(philox::block(77, i / 4)[i % 4]);
    const float rounded = float(bfloat16(u));
    CHECK(float(bv[i]) == (rounded < 1.0f ? rounded : 0.0f));  // a draw that rounds up to 1 becomes 0
    CHECK(float(bv[i]) >= 0.0f);
    CHECK(float(bv[i]) < 1.0f);
  }
  Tensor<bfloat16> bn = randn<bfloat16>({20000});
  CHECK(std::fabs(mean_of(bn)) < 0.03);
  CHECK(var_of(bn) == doctest::Approx(1.0).epsilon(0.03));
}

TEST_CASE("in-place fills write a view in row-major order and bump the version") {
  Tensor<float> t = zeros({4, 6});
  const uint64_t v0 = t.version();
  Generator g(42);
  uniform_(t.t(), 0, 1, &g);  // a transposed, non-contiguous view
  CHECK(t.version() > v0);
  Generator g2(42);
  const std::vector<float> ref = rand({6, 4}, &g2).to_vector();
  CHECK(t.t().contiguous().to_vector() == ref);

  Tensor<float> c = zeros({8});
  const uint64_t c0 = c.version();
  normal_(c, 0, 1);
  CHECK(c.version() > c0);
  CHECK(std::count(c.data_ptr(), c.data_ptr() + 8, 0.0f) == 0);

  // Only the view is written.
  Tensor<double> m = zeros<double>({3, 4});
  uniform_(m.select(1, 2), 5, 6);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      const double x = m.data_ptr()[i * 4 + j];
      if (j == 2) CHECK((x >= 5 && x < 6));
      else CHECK(x == 0);
    }
}

TEST_CASE("bernoulli, random_ on bool, randperm") {
  Tensor<float> p = tensor<float>({0, 1, 0, 1, 1, 0});
  CHECK(bernoulli(p).to_vector() == p.to_vector());
  manual_seed(5);
  CHECK(mean_of(bernoulli(full({40000}, 0.3f))) == doctest::Approx(0.3).epsilon(0.03));
  CHECK(mean_of(bernoulli_(empty<int32_t>({40000}), 0.25)) == doctest::Approx(0.25).epsilon(0.03));
  CHECK(mean_of(bernoulli(empty<double>({40000}), 0.75)) == doctest::Approx(0.75).epsilon(0.02));

  Tensor<bool> bits = random_(empty<bool>({2000}), 2);
  const int ones = int(std::count(bits.data_ptr(), bits.data_ptr() + 2000, true));
  CHECK((ones > 900 && ones < 1100));
  CHECK_THROWS_AS(random_(empty<bool>({2}), 0, 3), std::invalid_argument);

  Generator g(17);
  const std::vector<int64_t> perm = randperm(50, &g).to_vector();
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(50);
  for (int64_t i = 0; i < 50; ++i) iota[size_t(i)] = i;
  CHECK(sorted == iota);
  CHECK(perm != iota);
  Generator g2(17);
  CHECK(randperm(50, &g2).to_vector() == perm);
  CHECK(randperm(0).numel() == 0);
}

TEST_CASE("bad arguments throw") {
  CHECK_THROWS_AS(randint(5, 5, {3}), std::invalid_argument);
  CHECK_THROWS_AS(randint<int32_t>(0, int64_t(1) << 40, {3}), std::invalid_argument);
  CHECK_THROWS_AS(uniform_(empty({3}), 2, 1), std::invalid_argument);
  CHECK_THROWS_AS(normal_(empty({3}), 0, -1), std::invalid_argument);
  CHECK_THROWS_AS(bernoulli_(empty({3}), 1.5), std::invalid_argument);
  CHECK_THROWS_AS(randperm(-1), std::invalid_argument);
  CHECK(rand({0, 3}).numel() == 0);
}

TEST_CASE("multinomial: frequencies follow the weights; without replacement every draw differs") {
  Generator g(5);
  const Tensor<float> w = tensor<float>({{1, 0, 3, 4}, {0, 0, 0, 2}});  // not normalized
  const Tensor<int64_t> s = multinomial(w, 40000, true, &g);
  CHECK(s.shape() == Shape{2, 40000});
  std::array<int64_t, 4> counts{};
  for (int64_t i = 0; i < 40000; ++i) ++counts[size_t(s.data_ptr()[i])];
  CHECK(counts[1] == 0);
  CHECK(double(counts[0]) / 40000 == doctest::Approx(1.0 / 8).epsilon(0.05));  // 3 sigma is about 4% here
  CHECK(double(counts[2]) / 40000 == doctest::Approx(3.0 / 8).epsilon(0.02));
  CHECK(double(counts[3]) / 40000 == doctest::Approx(4.0 / 8).epsilon(0.02));
  CHECK(std::all_of(s.data_ptr() + 40000, s.data_ptr() + 80000, [](int64_t i) { return i == 3; }));
  const Tensor<int64_t> perm = multinomial(tensor<double>({0.1, 0.2, 0.3, 0.4}), 4, false, &g);
  std::vector<int64_t> sorted = perm.to_vector();
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == std::vector<int64_t>{0, 1, 2, 3});
  Generator a(9), b(9);
  CHECK(multinomial(w, 7, true, &a).to_vector() == multinomial(w, 7, true, &b).to_vector());
  CHECK_THROWS_AS(multinomial(tensor<float>({1, -1}), 1, true, &g), std::invalid_argument);
  CHECK_THROWS_AS(multinomial(tensor<float>({0, 0}), 1, true, &g), std::invalid_argument);
  CHECK_THROWS_AS(multinomial(tensor<float>({1, 1}), 3, false, &g), std::invalid_argument);
}

}  // namespace test_tensor_random
