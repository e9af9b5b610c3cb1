// Lazy expressions: fusion (one allocation), broadcasting, views, value semantics, overlap,
// lifetime and version safety.
#include <doctest/doctest.h>

#include <cmath>

#include "kiln/kiln.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_expr_expressions {

using namespace kiln;

namespace {
Tensor<float> iota(const Shape& s, float start = 0, float step = 1) {
  Tensor<float> t = empty<float>(s);
  float* p = t.data_ptr();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = start + step * float(i);
  return t;
}
Tensor<float> make_temporary() { return iota({5, 7}, 3); }
}  // namespace

TEST_CASE("a fused expression performs exactly one storage allocation") {
  Tensor<float> a = iota({64, 33}, 0.1f, 0.01f), b = iota({64, 33}, 1, 0.02f), c = iota({64, 33}, -1, 0.03f);
  const MemoryStats before = memory_stats();
  Tensor<float> d = a * b + c * sin(a) - exp(b) / 2;
  const MemoryStats after = memory_stats();
  CHECK(after.allocations - before.allocations == 1);
  const float *pa = a.data_ptr(), *pb = b.data_ptr(), *pc = c.data_ptr(), *pd = d.data_ptr();
  for (int64_t i = 0; i < d.numel(); ++i) {
    const double ref = double(pa[i]) * pb[i] + double(pc[i]) * std::sin(double(pa[i])) - std::exp(double(pb[i])) / 2;
    CHECK(pd[i] == doctest::Approx(ref).epsilon(1e-5));
  }
}

TEST_CASE("rebinding in a loop is served by the caching allocator") {
  Tensor<float> h = iota({1000});
  h = h * 0.5f;  // warm the cache with this size class
  const MemoryStats before = memory_stats();
  for (int i = 0; i < 10; ++i) h = relu(h * 0.5f + 1);
  const MemoryStats after = memory_stats();
  CHECK(after.allocations - before.allocations == 10);
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.cache_hits - before.cache_hits == 10);
}

TEST_CASE("broadcasting follows NumPy rules and names the op when it fails") {
  Tensor<float> a = iota({3, 1, 5}), b = iota({4, 1}, 100);
  Tensor<float> c = a + b;
  REQUIRE(c.shape() == Shape{3, 4, 5});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) CHECK(c.data_ptr()[(i * 4 + j) * 5 + k] == float(i * 5 + k) + 100 + j);
  Tensor<float> bad = iota({4});
  CHECK_THROWS_WITH_AS((void)Tensor<float>(iota({2, 3}) + bad), "add: shapes [2, 3] and [4] cannot be broadcast",
                       ShapeError);
  CHECK_THROWS_AS((void)Tensor<float>(iota({2, 3}) * bad), std::invalid_argument);
}

TEST_CASE("expressions read non-contiguous views") {
  Tensor<float> a = iota({6, 9});
  Tensor<float> t = a.t() * 2;  // transposed read
  REQUIRE(t.shape() == Shape{9, 6});
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 6; ++j) CHECK(t.data_ptr()[i * 6 + j] == 2 * float(j * 9 + i));
  Tensor<float> s = a.slice(0, 0, 6, 2).slice(1, 1, 9, 3) + a.slice(0, 3, 6).slice(1, 0, 9, 3);  // strided [3,3] + [3,3]
  REQUIRE(s.shape() == Shape{3, 3});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) CHECK(s.data_ptr()[i * 3 + j] == float(2 * i * 9 + 1 + 3 * j) + float((3 + i) * 9 + 3 * j));
}

TEST_CASE("scalars convert to the tensor's dtype on either side") {
  Tensor<float> a = iota({5});
  Tensor<float> b = 2 * a + 1.5 - a / 2.0;
  for (int i = 0; i < 5; ++i) CHECK(b.data_ptr()[i] == doctest::Approx(2.0 * i + 1.5 - i / 2.0));
  Tensor<int32_t> n = (a * 3).to<int32_t>();
  Tensor<int32_t> m = n / 2 + 7;
  for (int i = 0; i < 5; ++i) CHECK(m.data_ptr()[i] == (3 * i) / 2 + 7);
}

TEST_CASE("integer division never has undefined behaviour") {
  Tensor<int32_t> a = tensor<int32_t>({7, -7, std::numeric_limits<int32_t>::min(), 5});
  Tensor<int32_t> b = tensor<int32_t>({2, 2, -1, 0});
  CHECK((Tensor<int32_t>(a / b).to_vector() == std::vector<int32_t>{3, -3, std::numeric_limits<int32_t>::min(), 0}));
}

TEST_CASE("comparisons give bool tensors; where selects") {
  Tensor<float> a = iota({10}, -4.5f);
  Tensor<bool> pos = a > 0;
  Tensor<float> r = where(pos & (a < 3), a, 0);
  for (int i = 0; i < 10; ++i) {
    const float x = -4.5f + float(i);
    CHECK(pos.data_ptr()[i] == (x > 0));
    CHECK(r.data_ptr()[i] == ((x > 0 && x < 3) ? x : 0));
  }
  Tensor<bool> inv = !pos;
  for (int i = 0; i < 10; ++i) CHECK(inv.data_ptr()[i] != pos.data_ptr()[i]);
}

TEST_CASE("copying a Tensor shares it; t = expr rebinds; views write through") {
  Tensor<float> a = iota({4, 4});
  Tensor<float> alias = a;
  CHECK(alias.data_ptr() == a.data_ptr());
  Tensor<float> saved = a;
  a = a * 2;  // rebinds a; saved still holds the old values
  CHECK(saved.data_ptr()[5] == 5);
  CHECK(a.data_ptr()[5] == 10);
  a.select(0, 1) = 7;  // writes through the view
  CHECK(a.data_ptr()[4] == 7);
  CHECK(a.data_ptr()[8] == 16);
  a.slice(1, 0, 2).copy_(saved.slice(1, 2, 4));
  CHECK(a.data_ptr()[0] == 2);
  CHECK(a.data_ptr()[1] == 3);
  CHECK(a.data_ptr()[2] == 4);
}

TEST_CASE("in-place forms are correct when destination and sources overlap") {
  Tensor<float> a = iota({5, 5});
  Tensor<float> ref = Tensor<float>(a.t() + a);
  a.copy_(a.t() + a);
  CHECK(a.to_vector() == ref.to_vector());
  Tensor<float> v = iota({10});
  v.slice(0, 1, 10).copy_(v.slice(0, 0, 9));  // shift right by one: needs a temporary
  CHECK((v.to_vector() == std::vector<float>{0, 0, 1, 2, 3, 4, 5, 6, 7, 8}));
  Tensor<float> w = iota({6});
  w += w;  // same layout: safe in place
  CHECK(w.data_ptr()[5] == 10);
}

// A run whose length is not a multiple of the vector recomputes its last full vector in place of staging the tail
// (cpu/stage.hpp), except where an output shares memory with an operand: there each element must still be updated
// exactly once.
TEST_CASE("every tail length: fresh outputs and in-place updates apply each element once") {
  const int64_t lanes = int64_t(simd_float_lanes());
  for (int64_t n = 1; n <= 3 * lanes + 1; ++n) {
    INFO("length ", n);
    Tensor<float> x = iota({n}, 1), y = iota({n}, 0.5f, 0.25f);
    const Tensor<float> fresh = Tensor<float>(x * y + 1);
    Tensor<float> doubled = x.clone();
    doubled += doubled;
    Tensor<float> m = x.clone(), p = y.clone();
    eval_all({&m, &p}, m * 0.5f + y, p - m);  // each output is also a leaf at its own position
    for (int64_t i = 0; i < n; ++i) {
      const float xi = 1 + float(i), yi = 0.5f + 0.25f * float(i);
      CHECK(fresh.data_ptr()[i] == xi * yi + 1);
      CHECK(doubled.data_ptr()[i] == 2 * xi);
      CHECK(m.data_ptr()[i] == xi * 0.5f + yi);
      CHECK(p.data_ptr()[i] == yi - xi);
    }
  }
}

TEST_CASE("an expression keeps its temporaries alive") {
  Tensor<float> a = iota({5, 7});
  auto e = a * 2 + make_temporary();  // the temporary dies at the end of this statement
  Tensor<float> r = e;
  for (int i = 0; i < 35; ++i) CHECK(r.data_ptr()[i] == 2 * float(i) + 3 + float(i));
}

TEST_CASE("evaluating an expression after a leaf was modified in place throws") {
  Tensor<float> a = iota({8});
  auto e = a * 3;
  a += 1;
  CHECK_THROWS_AS((void)Tensor<float>(e), StaleExpressionError);
  auto f = a * 3;  // built after the change: fine
  CHECK(Tensor<float>(f).data_ptr()[0] == 3);
  const uint64_t v = a.version();
  a.fill_(2);
  CHECK(a.version() == v + 1);
}

TEST_CASE("zero-size and size-1 dims") {
  Tensor<float> z = iota({0, 3});
  Tensor<float> r = z * 2 + 1;
  CHECK(r.shape() == Shape{0, 3});
  CHECK(r.numel() == 0);
  Tensor<float> one = iota({1, 1, 1}, 4);
  Tensor<float> s = one * iota({3, 1, 2});
  CHECK(s.shape() == Shape{3, 1, 2});
  CHECK(s.data_ptr()[5] == 20);
  Tensor<float> scalar = full<float>({}, 2.5f);
  CHECK(Tensor<float>(scalar * 2).item() == 5);
}

TEST_CASE("eval into a preallocated tensor and rvalue assignment to views") {
  Tensor<float> a = iota({3, 8}), out = zeros<float>({3, 8});
  eval(a * a, out);
  CHECK(out.data_ptr()[23] == 23 * 23);
  out[1] = a[0] + 100;
  CHECK(out.data_ptr()[8] == 100);
  CHECK(out.data_ptr()[15] == 107);
  CHECK_THROWS_AS(out.copy_(iota({4})), ShapeError);
}

TEST_CASE("bfloat16 storage rounds to nearest even and computes in float") {
  CHECK(bfloat16(1.0f).bits == 0x3f80);
  CHECK(float(bfloat16(1.00390625f)) == 1.0f);      // halfway: ties to even (down)
  CHECK(float(bfloat16(1.01171875f)) == 1.015625f);  // halfway: ties to even (up)
  CHECK(std::isnan(float(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  Tensor<float> a = iota({20}, 0.25f);
  Tensor<bfloat16> b = a.to<bfloat16>();
  Tensor<bfloat16> c = b * b + 1;
  for (int i = 0; i < 20; ++i) {
    const float x = float(bfloat16(0.25f + float(i)));
    CHECK(float(c.data_ptr()[i]) == float(bfloat16(x * x + 1)));
  }
}

namespace {
// A user's own op: x^2 + 1, with a Highway form, CUDA source and a derivative.
struct SquarePlusOne : ops::FloatOp {
  static constexpr std::string_view name = "square_plus_one";
  static constexpr int arity = 1;
  static constexpr ops::OpInfo info{.cost = 2};
  template <class T> static T scalar(T x) { return x * x + T(1); }
  template <class D, class V> static V simd(D d, V x) {
    namespace hn = hwy::HWY_NAMESPACE;
    return hn::MulAdd(x, x, hn::Set(d, hn::TFromD<D>(1)));
  }
  static constexpr std::string_view cuda = "($0 * $0 + 1)";
  static auto grad(auto x, auto, auto g) { return g * x * 2; }
};
// One without a SIMD form: runs on the scalar path through the same driver.
struct Cube : ops::FloatOp {
  static constexpr std::string_view name = "cube";
  static constexpr int arity = 1;
  static constexpr ops::OpInfo info{.cost = 2};
  template <class T> static T scalar(T x) { return x * x * x; }
  template <class L> static constexpr bool simd_for = false;
  static constexpr std::string_view cuda = "($0 * $0 * $0)";
  static auto grad(auto x, auto, auto g) { return g * x * x * 3; }
};
}  // namespace

TEST_CASE("a user's op struct fuses through kiln::map like a built-in op") {
  static_assert(ops::OpSpec<SquarePlusOne>);
  static_assert(ops::OpSpec<Cube>);
  Tensor<float> a = iota({37}, -2, 0.125f);
  auto e = map<SquarePlusOne>(a) * 2 + map<Cube>(a);
  static_assert(!cpu::is_simd_v<decltype(e)>);  // Cube has no SIMD form: the AND over the tree is false
  static_assert(cpu::is_simd_v<decltype(map<SquarePlusOne>(a) * 2)>);
  const MemoryStats before = memory_stats();
  Tensor<float> r = e;
  CHECK(memory_stats().allocations - before.allocations == 1);
  for (int i = 0; i < 37; ++i) {
    const float x = -2 + 0.125f * float(i);
    CHECK(r.data_ptr()[i] == doctest::Approx((x * x + 1) * 2 + x * x * x));
  }
  CHECK(SquarePlusOne::grad(3.0, 10.0, 1.0) == 6.0);
}

TEST_CASE("in-place writes refuse a destination whose elements share memory (an expanded view), as torch") {
  // torch: x.view(1, 4).expand(3, 4).add_(1) raises "unsupported operation: more than one element of the
  // written-to tensor refers to a single memory location"; so do sub_, mul_, div_, copy_, normal_, and
  // e[:, 0] = torch.ones(3). fill_, zero_ and e[:, 0] = 5 (one value everywhere) are allowed.
  Tensor<float> x = zeros<float>({4});
  Tensor<float> e = x.view({1, 4}).expand({3, 4});
  const uint64_t version = x.version();
  const char* message = "copy_: the destination of shape [3, 4] and strides [0, 1] has more than one element at a "
                        "single memory location (as an expanded view does); clone() it before writing in place";
  CHECK_THROWS_WITH_AS(e += 1.0f, message, std::logic_error);
  CHECK_THROWS_AS(e -= 1.0f, std::logic_error);
  CHECK_THROWS_AS(e *= 2.0f, std::logic_error);
  CHECK_THROWS_AS(e /= 2.0f, std::logic_error);
  CHECK_THROWS_WITH_AS(e.copy_(ones<float>({3, 4})), message, std::logic_error);
  CHECK_THROWS_AS(e.copy_(ones<float>({4})), std::logic_error);
  // A random fill is refused under its own name before it draws: the generator has not moved.
  const PhiloxState drawn_before = default_generator().state();
  CHECK_THROWS_WITH_AS(normal_(e), doctest::Contains("normal_: the destination of shape [3, 4]"), std::logic_error);
  CHECK_THROWS_WITH_AS(bernoulli_(e), doctest::Contains("bernoulli_: the destination"), std::logic_error);
  CHECK(default_generator().state().counter == drawn_before.counter);
  CHECK_THROWS_AS(e.select(1, 0) = ones<float>({3}), std::logic_error);
  CHECK_THROWS_AS(eval_all({&e}, e + 1.0f), std::logic_error);
  CHECK(x.to_vector() == std::vector<float>{0, 0, 0, 0});  // nothing was written
  CHECK(x.version() == version);

  e.fill_(1.0f);  // torch: x is [1, 1, 1, 1]
  CHECK(x.to_vector() == std::vector<float>{1, 1, 1, 1});
  e.select(1, 0) = 5.0f;
  CHECK(x.to_vector() == std::vector<float>{5, 1, 1, 1});
  e.zero_();
  CHECK(x.to_vector() == std::vector<float>{0, 0, 0, 0});
  e.select(0, 1) = iota({4});  // one row of the view: each element once; torch gives x = [0, 1, 2, 3]
  CHECK(x.to_vector() == std::vector<float>{0, 1, 2, 3});
  Tensor<float> once = x.view({1, 4}).expand({1, 4});  // stride 0 only where the size is 1
  once += 1.0f;
  CHECK(x.to_vector() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("copy_ from itself, or from a view of the same memory with the same layout, is a no-op, as torch") {
  // torch's copy_ returns at once when source and destination are the same data (same storage, offset, sizes,
  // strides, dtype), before its check for a destination whose elements share memory; the version still moves.
  Tensor<float> x = iota({4});
  Tensor<float> e = x.view({1, 4}).expand({3, 4});
  const uint64_t version = x.version();
  e.copy_(e);
  CHECK(x.version() > version);
  e.copy_(x.view({1, 4}).expand({3, 4}));  // another view object, the same layout
  CHECK(x.to_vector() == std::vector<float>{0, 1, 2, 3});
  x.copy_(x);
  x.t().copy_(x.t());
  CHECK(x.to_vector() == std::vector<float>{0, 1, 2, 3});
  // Other sources into an expanded view are still refused: another tensor, another layout, an expression of e.
  CHECK_THROWS_AS(e.copy_(iota({4}).view({1, 4}).expand({3, 4})), std::logic_error);
  CHECK_THROWS_AS(e.copy_(x), std::logic_error);
  CHECK_THROWS_AS(e.copy_(e * 1.0f), std::logic_error);
  // A tensor that requires grad is refused first, as torch's autograd check comes before the shortcut.
  Tensor<float> w = ones<float>({3});
  w.requires_grad_();
  CHECK_THROWS_WITH_AS(w.copy_(w), doctest::Contains("require grad"), std::logic_error);
}

}  // namespace test_expr_expressions
