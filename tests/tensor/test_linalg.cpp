// matmul / mm / bmm / mv / dot against a naive loop for torch.matmul's shape cases: 1-D and 2-D
// operands, batches with broadcast batch dims, transposed and strided views, expressions, zero-size
// dims, float / double / int32, and errors that name the op and both shapes.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/tensor/linalg.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_tensor_linalg {

using namespace kiln;

namespace {

template <class T>
Tensor<T> random_tensor(const Shape& s, uint64_t seed) {
  Tensor<float> f = empty<float>(s);
  Generator gen(seed);
  if (f.numel() > 0) fill_uniform(gen, f.data_ptr(), f.numel(), -4.0, 4.0);
  if constexpr (std::is_integral_v<T>) return Tensor<float>(floor(f)).to<T>();
  else return f.to<T>();
}

template <class T>
std::vector<double> values_of(const Tensor<T>& t) {
  std::vector<double> out;
  for (const auto& v : t.to_vector()) out.push_back(double(v));
  return out;
}

// torch.matmul by its definition, in double, on row-major values.
std::vector<double> naive_matmul(const std::vector<double>& a, Shape sa, const std::vector<double>& b, Shape sb,
                                 Shape& out_shape) {
  const bool va = sa.size() == 1, vb = sb.size() == 1;
  if (va) sa.insert(0, 1);
  if (vb) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba, bb;
  for (int i = 0; i + 2 < sa.size(); ++i) ba.push_back(sa[i]);
  for (int i = 0; i + 2 < sb.size(); ++i) bb.push_back(sb[i]);
  const Shape batch = broadcast_shapes(ba, bb, "test");
  const int64_t nb = numel_of(batch);
  std::vector<double> c(size_t(nb * M * N));
  auto offset = [&](const Shape& own, int64_t flat) {  // broadcast batch index -> own batch index
    int64_t o = 0, scale = 1;
    for (int i = batch.size() - 1; i >= 0; --i) {
      const int64_t idx = flat % batch[i];
      flat /= batch[i];
      const int j = i - (batch.size() - own.size());
      if (j >= 0) {
        o += (own[j] == 1 ? 0 : idx) * scale;
        scale *= own[j];
      }
    }
    return o;
  };
  for (int64_t q = 0; q < nb; ++q) {
    const int64_t oa = offset(ba, q) * M * K, ob = offset(bb, q) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        long double s = 0;
        for (int64_t k = 0; k < K; ++k) s += (long double)a[size_t(oa + i * K + k)] * b[size_t(ob + k * N + j)];
        c[size_t((q * M + i) * N + j)] = double(s);
      }
  }
  out_shape = batch;
  if (!va) out_shape.push_back(M);
  if (!vb) out_shape.push_back(N);
  return c;
}

template <class T>
void check_matmul(const Tensor<T>& a, const Tensor<T>& b, const std::string& what) {
  Shape expected;
  const auto ref = naive_matmul(values_of(a), a.shape(), values_of(b), b.shape(), expected);
  const Tensor<T> c = matmul(a, b);
  REQUIRE_MESSAGE(c.shape() == expected, what, ": got shape ", c.shape(), ", expected ", expected);
  const auto got = values_of(c);
  // The rounding bound of a K-term dot product: K * eps * sum |a_ik| |b_kj| (integers: exact).
  auto abs_of = [](std::vector<double> v) {
    for (double& x : v) x = std::abs(x);
    return v;
  };
  Shape unused;
  const auto mag = naive_matmul(abs_of(values_of(a)), a.shape(), abs_of(values_of(b)), b.shape(), unused);
  const double K = double(a.size(-1));
  const double eps = std::is_integral_v<T> ? 0.0 : double(std::numeric_limits<T>::epsilon());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(got[i] - ref[i]) > K * eps * mag[i] && bad++ == 0) first = i;
  CHECK_MESSAGE(bad == 0, what, ": ", bad, " of ", got.size(), " values differ; first at ", first, ": got ",
                bad ? got[first] : 0.0, ", expected ", bad ? ref[first] : 0.0);
}

}  // namespace

TEST_CASE("matmul follows torch.matmul's shape rules") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5}, {5}},                    // dot
      {{3, 5}, {5}},                 // matrix x vector
      {{5}, {5, 4}},                 // vector x matrix
      {{3, 5}, {5, 4}},              // matrix x matrix
      {{1, 1}, {1, 1}},
      {{7, 3, 5}, {7, 5, 4}},        // batched
      {{7, 3, 5}, {5, 4}},           // batch x shared matrix (folded into one product)
      {{3, 5}, {7, 5, 4}},           // shared matrix x batch
      {{5}, {7, 5, 4}},              // vector x batch
      {{7, 3, 5}, {5}},              // batch x vector
      {{2, 1, 3, 5}, {6, 5, 4}},     // broadcast batch dims
      {{2, 6, 3, 5}, {1, 6, 5, 4}},
      {{1, 3, 5}, {4, 1, 5, 2}},
      {{2, 3, 1, 5}, {3, 5, 1}},
      {{3, 0}, {0, 4}},              // K = 0: zeros
      {{0, 5}, {5, 4}},              // M = 0
      {{3, 5}, {5, 0}},
      {{0, 3, 5}, {5, 4}},           // empty batch
      {{0}, {0}},
  };
  uint64_t seed = 1;
  for (const auto& [sa, sb] : cases) {
    const std::string what = detail::cat(sa, " x ", sb);
    check_matmul(random_tensor<float>(sa, seed), random_tensor<float>(sb, seed + 1), what + " float");
    check_matmul(random_tensor<double>(sa, seed), random_tensor<double>(sb, seed + 1), what + " double");
    check_matmul(random_tensor<int32_t>(sa, seed), random_tensor<int32_t>(sb, seed + 1), what + " int32");
    seed += 2;
  }
  CHECK(matmul(tensor<float>({1, 2, 3}), tensor<float>({4, 5, 6})).dim() == 0);
  CHECK(matmul(tensor<float>({1, 2, 3}), tensor<float>({4, 5, 6})).item() == 32);
  CHECK(matmul(empty<float>({3, 0}), empty<float>({0, 4})).to_vector() == std::vector<float>(12, 0.0f));
}

TEST_CASE("matmul reads transposed and strided views and materializes expressions") {
  const Tensor<float> a = random_tensor<float>({6, 40, 30}, 3), b = random_tensor<float>({6, 50, 40}, 4);
  check_matmul<float>(a.transpose(1, 2), b.transpose(1, 2), "both transposed");          // [6,30,40] x [6,40,50]
  check_matmul<float>(a.permute({0, 2, 1}).select(0, 2), a.select(0, 1), "select of permute");
  check_matmul<float>(a.slice(2, 0, 30, 3), b.slice(1, 0, 50, 5).transpose(1, 2).slice(1, 0, 40, 4),
                      "non-unit strides in both dims (copied)");
  check_matmul<float>(a.slice(0, 0, 6, 2), random_tensor<float>({30, 7}, 5).t().t(), "batch stride 2");
  check_matmul<float>(a.select(0, 0).t().unsqueeze(0).expand({4, 30, 40}), random_tensor<float>({4, 40, 7}, 10),
                      "expanded (stride 0) batch");
  const Tensor<float> x = random_tensor<float>({8, 16}, 6), y = random_tensor<float>({16, 5}, 7);
  const Tensor<float> viaexpr = matmul(x * 2.0f, y + 1.0f);
  Shape s;
  const auto ref = naive_matmul(values_of(Tensor<float>(x * 2.0f)), x.shape(), values_of(Tensor<float>(y + 1.0f)),
                                y.shape(), s);
  const auto got = values_of(viaexpr);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-5));
  // A larger product that Eigen threads.
  check_matmul<float>(random_tensor<float>({300, 257}, 8), random_tensor<float>({257, 301}, 9).t().contiguous().t(),
                      "300x257x301 with a column-major B");
}

TEST_CASE("mm, bmm, mv and dot") {
  const Tensor<double> a = random_tensor<double>({4, 6}, 1), b = random_tensor<double>({6, 3}, 2);
  Shape s;
  const auto ref = naive_matmul(values_of(a), a.shape(), values_of(b), b.shape(), s);
  const auto got = values_of(mm(a, b));
  for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]));
  const Tensor<float> p = random_tensor<float>({5, 4, 6}, 3), q = random_tensor<float>({5, 6, 2}, 4);
  CHECK(bmm(p, q).shape() == Shape{5, 4, 2});
  const auto rb = naive_matmul(values_of(p), p.shape(), values_of(q), q.shape(), s);
  const auto gb = values_of(bmm(p, q.transpose(1, 2).contiguous().transpose(1, 2)));
  for (size_t i = 0; i < rb.size(); ++i) CHECK(gb[i] == doctest::Approx(rb[i]).epsilon(1e-5));
  CHECK(mv(a, tensor<double>({1, 0, 0, 0, 0, 0})).to_vector() == a.select(1, 0).to_vector());
  CHECK(dot(tensor<int64_t>({1, 2, 3}), tensor<int64_t>({4, 5, 6})).item() == 32);
}

TEST_CASE("matmul errors name the op and both shapes") {
  const Tensor<float> a = empty<float>({2, 3}), b = empty<float>({4, 5});
  CHECK_THROWS_WITH_AS(matmul(a, b), "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)", ShapeError);
  CHECK_THROWS_WITH_AS(matmul(empty<float>({3}), empty<float>({4})),
                       "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)", ShapeError);
  CHECK_THROWS_WITH_AS(matmul(empty<float>({2, 2, 3}), empty<float>({3, 3, 4})),
                       "matmul: shapes [2, 2, 3] and [3, 3, 4] cannot be multiplied: batch dims [2] and [3] cannot be "
                       "broadcast",
                       ShapeError);
  CHECK_THROWS_WITH_AS(matmul(empty<float>({}), b),
                       "matmul: both arguments need at least 1 dim, got shapes [] and [4, 5]", ShapeError);
  CHECK_THROWS_WITH_AS(mm(empty<float>({2, 3, 4}), b), "mm: expects 2-D tensors, got shapes [2, 3, 4] and [4, 5]",
                       ShapeError);
  CHECK_THROWS_WITH_AS(mm(a, b), "mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)", ShapeError);
  CHECK_THROWS_WITH_AS(bmm(empty<float>({2, 3, 4}), empty<float>({3, 4, 5})),
                       "bmm: shapes [2, 3, 4] and [3, 4, 5] have different batch sizes (2 != 3)", ShapeError);
  CHECK_THROWS_WITH_AS(bmm(empty<float>({2, 3, 4}), empty<float>({2, 5, 5})),
                       "bmm: shapes [2, 3, 4] and [2, 5, 5] cannot be multiplied (4 != 5)", ShapeError);
  CHECK_THROWS_AS(mv(a, empty<float>({4})), ShapeError);
  CHECK_THROWS_AS(dot(empty<float>({3}), empty<float>({2, 3})), ShapeError);
  CHECK_THROWS_AS(matmul(a, b), std::invalid_argument);
}

}  // namespace test_tensor_linalg
