// Tests for kiln/cpu/gemm.hpp against a naive triple loop in double.
#include <kiln/cpu/gemm.hpp>
#include <kiln/cpu/gemm_tile.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_cpu_gemm {

namespace {

using kiln::cpu::gemm;
using kiln::cpu::gemm_batched;

enum class Layout { Row, Col, RowPad, ColPad, Strided, StridedT, Flipped, Broadcast };
constexpr Layout kOperandLayouts[] = {Layout::Row,     Layout::Col,      Layout::RowPad,  Layout::ColPad,
                                      Layout::Strided, Layout::StridedT, Layout::Flipped, Layout::Broadcast};
// C must not alias itself, so no Broadcast.
constexpr Layout kOutputLayouts[] = {Layout::Row,     Layout::Col,      Layout::RowPad,
                                     Layout::ColPad,  Layout::Strided,  Layout::StridedT, Layout::Flipped};

const char* name(Layout l) {
  constexpr const char* n[] = {"row", "col", "row-pad", "col-pad", "strided", "strided-t", "flipped", "broadcast"};
  return n[int(l)];
}

// "Not written" marker for padding and for uninitialized C: NaN for floats, a sentinel for integers.
template <class T>
T poison() {
  if constexpr (std::is_floating_point_v<T>)
    return std::numeric_limits<T>::quiet_NaN();
  else
    return T(-12345);
}
template <class T>
bool is_poison(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(v);
  else
    return v == poison<T>();
}

// A strided matrix inside a poisoned buffer: element (i, j) at buf[off + i * rs + j * cs].
template <class T>
struct Mat {
  int64_t rows = 0, cols = 0, rs = 0, cs = 0, off = 0;
  std::vector<T> buf;

  Mat(int64_t r, int64_t c, Layout l) : rows(r), cols(c) {
    switch (l) {
      case Layout::Row: rs = c, cs = 1; break;
      case Layout::Col: rs = 1, cs = r; break;
      case Layout::RowPad: rs = c + 3, cs = 1; break;
      case Layout::ColPad: rs = 1, cs = r + 2; break;
      case Layout::Strided: rs = 2, cs = 2 * r + 1; break;   // neither stride is 1: the copy path
      case Layout::StridedT: rs = 3 * c + 1, cs = 3; break;  // the same, other order
      case Layout::Flipped: rs = -c, cs = 1; break;          // rows reversed: negative row stride
      case Layout::Broadcast: rs = 0, cs = 1; break;         // every row the same
    }
    int64_t lo = 0, hi = 0;
    for (int64_t i : {int64_t(0), r - 1})
      for (int64_t j : {int64_t(0), c - 1}) {
        if (r == 0 || c == 0) continue;
        lo = std::min(lo, i * rs + j * cs);
        hi = std::max(hi, i * rs + j * cs);
      }
    off = -lo;
    buf.assign(std::size_t(hi - lo + 1), poison<T>());
  }
  T* data() { return buf.data() + off; }
  T& operator()(int64_t i, int64_t j) { return buf[std::size_t(off + i * rs + j * cs)]; }
  std::vector<bool> element_mask() const {  // which entries of buf hold matrix elements
    std::vector<bool> m(buf.size(), false);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) m[std::size_t(off + i * rs + j * cs)] = true;
    return m;
  }
};

template <class T>
void fill_random(Mat<T>& m, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1, 1);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) {
      if constexpr (std::is_floating_point_v<T>)
        m(i, j) = T(d(rng));
      else
        m(i, j) = T(std::lround(d(rng) * 20));
    }
}

template <class T>
constexpr double eps() {
  return std::is_floating_point_v<T> ? double(std::numeric_limits<T>::epsilon()) : 0.0;
}

// Compares C against alpha * A * B + beta * C0 computed in double, with a tolerance of
// (K + 2) * eps * (|alpha| sum_k |a||b| + |beta c0|). beta == 0 ignores C0 (it may be NaN).
// Also checks that C's padding still holds the poison. Returns "" or a report of the first mismatches.
template <class T>
std::string check(Mat<T>& A, Mat<T>& B, Mat<T>& C0, Mat<T>& C, double alpha, double beta) {
  const int64_t M = C.rows, N = C.cols, K = A.cols;
  std::ostringstream os;
  int bad = 0;
  double max_diff = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += double(A(i, k)) * double(B(k, j));
        mag += std::abs(double(A(i, k)) * double(B(k, j)));
      }
      double ref = alpha * s, bound = std::abs(alpha) * mag;
      if (beta != 0) ref += beta * double(C0(i, j)), bound += std::abs(beta * double(C0(i, j)));
      const double tol = double(K + 2) * eps<T>() * bound + 1e-30;
      const double got = double(C(i, j)), diff = std::abs(got - ref);
      if (!(diff <= tol)) {
        if (bad++ < 5) os << "C(" << i << "," << j << ") = " << got << ", expected " << ref << " (tol " << tol << ")\n";
        if (diff > max_diff || std::isnan(diff)) max_diff = diff;
      }
    }
  // Padding of C must be untouched (elements only are written).
  int touched = 0;
  const std::vector<bool> is_element = C.element_mask();
  for (std::size_t k = 0; k < C.buf.size(); ++k)
    if (!is_poison(C.buf[k]) && !is_element[k] && touched++ < 3) os << "padding buf[" << k << "] written\n";
  if (bad) os << bad << " of " << M * N << " elements differ, max difference " << max_diff << "\n";
  if (touched) os << touched << " padding elements written\n";
  return os.str();
}

template <class T>
std::string run_case(int64_t M, int64_t N, int64_t K, Layout la, Layout lb, Layout lc, T alpha, T beta,
                     std::mt19937& rng) {
  Mat<T> A(M, K, la), B(K, N, lb), C(M, N, lc);
  fill_random(A, rng);
  fill_random(B, rng);
  if (beta != T(0)) fill_random(C, rng);  // else C stays poisoned: beta == 0 must not read it
  Mat<T> C0 = C;
  gemm<T>(M, N, K, A.data(), A.rs, A.cs, B.data(), B.rs, B.cs, C.data(), C.rs, C.cs, alpha, beta);
  std::string r = check(A, B, C0, C, double(alpha), double(beta));
  if (!r.empty()) {
    std::ostringstream os;
    os << "M=" << M << " N=" << N << " K=" << K << " A " << name(la) << ", B " << name(lb) << ", C " << name(lc)
       << ", alpha " << alpha << ", beta " << beta << ":\n"
       << r;
    return os.str();
  }
  return r;
}

}  // namespace

TEST_CASE_TEMPLATE("gemm: square and odd sizes, contiguous", T, float, double) {
  std::mt19937 rng(1);
  const int64_t sizes[] = {1, 3, 17, 64, 129};
  for (int64_t M : sizes)
    for (int64_t N : sizes)
      for (int64_t K : sizes) {
        std::string r = run_case<T>(M, N, K, Layout::Row, Layout::Row, Layout::Row, T(1), T(0), rng);
        CHECK_MESSAGE(r.empty(), r);
      }
}

TEST_CASE_TEMPLATE("gemm: every layout of A, B and C (transposed, padded, strided, flipped, broadcast)", T, float,
                   double) {
  std::mt19937 rng(2);
  struct Size { int64_t M, N, K; };
  // Small ones go through Eigen's coefficient-based product (M+N+K < 20), the others through its GEMM.
  const Size sizes[] = {{3, 4, 5}, {17, 3, 64}, {5, 129, 7}, {1, 17, 3}, {3, 1, 17}, {64, 64, 1}, {33, 65, 40}};
  const std::pair<double, double> scalars[] = {{1, 0}, {0.5, -2}, {-1.5, 1}};
  int failures = 0;
  for (auto s : sizes)
    for (auto la : kOperandLayouts)
      for (auto lb : kOperandLayouts)
        for (auto lc : kOutputLayouts)
          for (auto [alpha, beta] : scalars) {
            std::string r = run_case<T>(s.M, s.N, s.K, la, lb, lc, T(alpha), T(beta), rng);
            if (!r.empty() && failures++ < 3) FAIL_CHECK(r);
          }
  CHECK(failures == 0);
}

TEST_CASE_TEMPLATE("gemm: integers through Eigen's generic product", T, int32_t, int64_t) {
  std::mt19937 rng(3);
  for (auto la : {Layout::Row, Layout::Col, Layout::Strided})
    for (auto lb : {Layout::Row, Layout::Col, Layout::Broadcast})
      for (auto lc : {Layout::Row, Layout::Col, Layout::Strided}) {
        std::string r = run_case<T>(17, 40, 33, la, lb, lc, T(2), T(0), rng);
        CHECK_MESSAGE(r.empty(), r);
        r = run_case<T>(17, 40, 33, la, lb, lc, T(1), T(-3), rng);
        CHECK_MESSAGE(r.empty(), r);
      }
}

TEST_CASE_TEMPLATE("gemm: empty dims", T, float, double) {
  std::mt19937 rng(4);
  // M = 0 or N = 0: nothing to do, nothing read or written (null pointers are fine).
  gemm<T>(0, 5, 7, nullptr, 7, 1, nullptr, 5, 1, nullptr, 5, 1);
  gemm<T>(5, 0, 7, nullptr, 7, 1, nullptr, 0, 1, nullptr, 0, 1);
  gemm<T>(0, 0, 0, nullptr, 0, 1, nullptr, 0, 1, nullptr, 0, 1, T(2), T(3));
  // K = 0: C = beta * C, which is zeros for beta = 0 even when C held NaN; A and B are never read.
  for (auto lc : kOutputLayouts) {
    for (T beta : {T(0), T(2)}) {
      Mat<T> C(6, 9, lc);
      if (beta != T(0)) fill_random(C, rng);
      Mat<T> C0 = C;
      gemm<T>(6, 9, 0, nullptr, 0, 1, nullptr, 9, 1, C.data(), C.rs, C.cs, T(1), beta);
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t j = 0; j < 9; ++j) CHECK(C(i, j) == (beta == T(0) ? T(0) : beta * C0(i, j)));
    }
  }
  // Batched with empty dims or an empty batch.
  gemm_batched<T>(0, 3, 3, 3, nullptr, 9, 3, 1, nullptr, 9, 3, 1, nullptr, 9, 3, 1);
  gemm_batched<T>(4, 0, 3, 3, nullptr, 9, 3, 1, nullptr, 9, 3, 1, nullptr, 9, 3, 1);
  std::vector<T> c(4 * 6, poison<T>());
  gemm_batched<T>(4, 2, 3, 0, nullptr, 0, 0, 1, nullptr, 0, 3, 1, c.data(), 6, 3, 1);
  for (T v : c) CHECK(v == T(0));
}

TEST_CASE_TEMPLATE("gemm: alpha = 0 reads neither A nor B; beta = 0 never reads C", T, float, double) {
  std::mt19937 rng(5);
  for (int64_t n : {4, 100}) {  // coefficient-based and GEMM paths
    Mat<T> A(n, n, Layout::Row), B(n, n, Layout::Col), C(n, n, Layout::Row);  // A, B, C all NaN
    gemm<T>(n, n, n, A.data(), A.rs, A.cs, B.data(), B.rs, B.cs, C.data(), C.rs, C.cs, T(0), T(0));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) CHECK(C(i, j) == T(0));
    fill_random(C, rng);
    Mat<T> C0 = C;
    gemm<T>(n, n, n, A.data(), A.rs, A.cs, B.data(), B.rs, B.cs, C.data(), C.rs, C.cs, T(0), T(-2));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) CHECK(C(i, j) == T(-2) * C0(i, j));
    // beta = 0 with NaN in C: the result has no NaN.
    Mat<T> A2(n, n, Layout::Row), B2(n, n, Layout::Row), C2(n, n, Layout::Col), C20 = C2;
    fill_random(A2, rng);
    fill_random(B2, rng);
    gemm<T>(n, n, n, A2.data(), A2.rs, A2.cs, B2.data(), B2.rs, B2.cs, C2.data(), C2.rs, C2.cs);
    std::string r = check(A2, B2, C20, C2, 1, 0);
    CHECK_MESSAGE(r.empty(), r);
  }
  // Batched, alpha = 0: a broadcast operand that would need the copy path is not read either.
  Mat<T> A(5, 6, Layout::Strided), B(6, 7, Layout::Row);  // all NaN
  std::vector<T> c(3 * 35, poison<T>());
  gemm_batched<T>(3, 5, 7, 6, A.data(), 0, A.rs, A.cs, B.data(), 0, B.rs, B.cs, c.data(), 35, 7, 1, T(0), T(0));
  for (T v : c) CHECK(v == T(0));
}

namespace {

// Batched: A, B, C are `batch` matrices each laid out like the given Mat, at batch strides of the Mat's
// buffer size (0 for a broadcast operand, which then has one matrix).
template <class T>
void batched_case(int64_t batch, int64_t M, int64_t N, int64_t K, Layout la, Layout lb, Layout lc, bool bcast_a,
                  bool bcast_b, bool accumulate, T alpha, T beta, std::mt19937& rng) {
  CAPTURE(batch);
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(K);
  CAPTURE(name(la));
  CAPTURE(name(lb));
  CAPTURE(name(lc));
  CAPTURE(bcast_a);
  CAPTURE(bcast_b);
  CAPTURE(accumulate);
  std::vector<Mat<T>> A, B, C;
  for (int64_t i = 0; i < (bcast_a ? 1 : batch); ++i) A.emplace_back(M, K, la), fill_random(A.back(), rng);
  for (int64_t i = 0; i < (bcast_b ? 1 : batch); ++i) B.emplace_back(K, N, lb), fill_random(B.back(), rng);
  for (int64_t i = 0; i < (accumulate ? 1 : batch); ++i) {
    C.emplace_back(M, N, lc);
    if (beta != T(0)) fill_random(C.back(), rng);
  }
  // Pack each operand's matrices into one buffer at a fixed batch stride.
  auto pack = [](std::vector<Mat<T>>& v, int64_t& stride) {
    stride = v.size() > 1 ? int64_t(v[0].buf.size()) : 0;
    std::vector<T> out;
    for (auto& m : v) out.insert(out.end(), m.buf.begin(), m.buf.end());
    return out;
  };
  int64_t as, bs, cs;
  std::vector<T> a = pack(A, as), b = pack(B, bs), c = pack(C, cs);
  gemm_batched<T>(batch, M, N, K, a.data() + A[0].off, as, A[0].rs, A[0].cs, b.data() + B[0].off, bs, B[0].rs,
                  B[0].cs, c.data() + C[0].off, cs, C[0].rs, C[0].cs, alpha, beta);
  if (accumulate) {  // C = alpha * sum_b A_b B_b + beta * C: the reference as one product with K' = batch * K
    Mat<T> Acat(M, batch * K, Layout::Row), Bcat(batch * K, N, Layout::Row);
    for (int64_t p = 0; p < batch; ++p)
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t i = 0; i < M; ++i) Acat(i, p * K + k) = A[bcast_a ? 0 : p](i, k);
        for (int64_t j = 0; j < N; ++j) Bcat(p * K + k, j) = B[bcast_b ? 0 : p](k, j);
      }
    Mat<T> got = C[0];
    std::copy(c.begin(), c.end(), got.buf.begin());
    std::string r = check(Acat, Bcat, C[0], got, double(alpha), double(beta));
    CHECK_MESSAGE(r.empty(), r);
    return;
  }
  for (int64_t p = 0; p < batch; ++p) {
    Mat<T> got = C[p];
    std::copy(c.begin() + p * cs, c.begin() + p * cs + int64_t(got.buf.size()), got.buf.begin());
    std::string r = check(A[bcast_a ? 0 : p], B[bcast_b ? 0 : p], C[p], got, double(alpha), double(beta));
    CHECK_MESSAGE(r.empty(), r);
  }
}

// Runs f once with OpenMP's thread count at 1 and once at 2 (the batch split and Eigen's own threading).
template <class F>
void with_threads(F&& f) {
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  for (int t : {1, 2}) {
    CAPTURE(t);
    omp_set_num_threads(t);
    f();
  }
  omp_set_num_threads(saved);
#else
  f();
#endif
}

}  // namespace

TEST_CASE_TEMPLATE("gemm_batched: broadcast A, strided operands, accumulation", T, float, double) {
  std::mt19937 rng(6);
  with_threads([&] {
    // Many small products (parallel over the batch), broadcast A (batch stride 0).
    batched_case<T>(7, 17, 9, 13, Layout::Row, Layout::Row, Layout::Row, true, false, false, T(1), T(0), rng);
    batched_case<T>(7, 17, 9, 13, Layout::Col, Layout::Col, Layout::Row, true, false, false, T(2), T(0.5), rng);
    // Broadcast operand that needs the copy path (copied once), transposed B, strided C.
    batched_case<T>(5, 20, 30, 10, Layout::Strided, Layout::Col, Layout::Strided, true, false, false, T(1), T(0),
                    rng);
    batched_case<T>(5, 20, 30, 10, Layout::Row, Layout::StridedT, Layout::ColPad, false, true, false, T(1), T(-1),
                    rng);
    batched_case<T>(4, 3, 4, 5, Layout::Flipped, Layout::Broadcast, Layout::Col, false, false, false, T(1), T(0),
                    rng);
    // Large products with a remainder (3 = 2 + 1 at 2 threads): the tail runs with Eigen's threading.
    batched_case<T>(3, 256, 256, 256, Layout::Row, Layout::Col, Layout::Row, false, false, false, T(1), T(0), rng);
    batched_case<T>(3, 256, 260, 257, Layout::Col, Layout::Row, Layout::Col, true, false, false, T(1), T(1), rng);
    // C batch stride 0 accumulates over the batch.
    batched_case<T>(6, 12, 14, 9, Layout::Row, Layout::Row, Layout::Row, false, false, true, T(1), T(0), rng);
    batched_case<T>(6, 12, 14, 9, Layout::Col, Layout::Strided, Layout::Strided, false, true, true, T(0.5), T(2),
                    rng);
    // batch 1 and batch 1 with broadcast.
    batched_case<T>(1, 64, 64, 64, Layout::Row, Layout::Row, Layout::Row, false, false, false, T(1), T(0), rng);
    batched_case<T>(1, 5, 6, 7, Layout::Row, Layout::Row, Layout::Row, true, true, false, T(1), T(0), rng);
  });
}

TEST_CASE("gemm: one product split across threads, by columns and by rows, uneven chunks") {
  std::mt19937 rng(7);
  with_threads([&] {
    // Row-major C is computed as C^T (280 x 300): split by columns.
    std::string r = run_case<float>(300, 280, 310, Layout::Row, Layout::Row, Layout::Row, 1.f, 0.f, rng);
    CHECK_MESSAGE(r.empty(), r);
    // Column-major C, M > N: split by rows; A needs the copy path first.
    r = run_case<double>(1001, 37, 70, Layout::Strided, Layout::Row, Layout::ColPad, 1.0, 1.0, rng);
    CHECK_MESSAGE(r.empty(), r);
    r = run_case<float>(37, 1001, 70, Layout::Col, Layout::StridedT, Layout::Col, 0.5f, 0.f, rng);
    CHECK_MESSAGE(r.empty(), r);
    // M > N but too few rows to split: split by columns instead, uneven (16 + 24).
    r = run_case<float>(80, 40, 100, Layout::Row, Layout::Col, Layout::Col, 1.f, 0.f, rng);
    CHECK_MESSAGE(r.empty(), r);
    // C with neither stride 1 (temporary), transposed operands.
    r = run_case<double>(333, 350, 64, Layout::Col, Layout::Col, Layout::Strided, -1.0, 2.0, rng);
    CHECK_MESSAGE(r.empty(), r);
  });
}

// Products with 2 to 12 columns (or rows) of C and long rows of A run in kiln/cpu/gemm_narrow.hpp's kernel
// instead of Eigen's GEMM (narrow_pays): every layout, row counts that are not a multiple of its 4-row block,
// K with a tail shorter than a vector, and the same bits for 1 and 2 threads.
TEST_CASE_TEMPLATE("gemm: few columns (or rows) of C through the narrow kernel", T, float, double) {
  std::mt19937 rng(8);
  struct Size { int64_t M, N, K; };
  // Every layout at 3 columns, and at 3 rows (the transposed product); K = 257 leaves a tail of one element.
  int failures = 0;
  for (auto s : {Size{61, 3, 257}, Size{3, 61, 257}})
    for (auto la : kOperandLayouts)
      for (auto lb : kOperandLayouts)
        for (auto lc : {Layout::Row, Layout::Col, Layout::Strided})
          for (auto [alpha, beta] : {std::pair<double, double>{1, 0}, {-0.5, 2}}) {
            std::string r = run_case<T>(s.M, s.N, s.K, la, lb, lc, T(alpha), T(beta), rng);
            if (!r.empty() && failures++ < 3) FAIL_CHECK(r);
          }
  CHECK(failures == 0);
  // 12 columns (three groups of 4), 2 and 4, long rows with tails, row counts that are not a multiple of 4.
  for (auto s : {Size{97, 12, 1001}, Size{301, 2, 263}, Size{258, 4, 300}}) {
    std::string r = run_case<T>(s.M, s.N, s.K, Layout::Row, Layout::Col, Layout::Row, T(1), T(0), rng);
    CHECK_MESSAGE(r.empty(), r);
    r = run_case<T>(s.M, s.N, s.K, Layout::RowPad, Layout::Row, Layout::Strided, T(0.5), T(-1), rng);
    CHECK_MESSAGE(r.empty(), r);
  }
#ifdef _OPENMP
  // Threads split the rows in whole blocks: the output does not depend on their number.
  const int saved = omp_get_max_threads();
  for (auto s : {Size{1003, 3, 2000}, Size{515, 9, 700}}) {
    CAPTURE(s.M);
    Mat<T> A(s.M, s.K, Layout::Row), B(s.K, s.N, Layout::Col);
    fill_random(A, rng);
    fill_random(B, rng);
    std::vector<std::vector<T>> out;
    for (int t : {1, 2}) {
      omp_set_num_threads(t);
      Mat<T> C(s.M, s.N, Layout::Row);
      gemm<T>(s.M, s.N, s.K, A.data(), A.rs, A.cs, B.data(), B.rs, B.cs, C.data(), C.rs, C.cs);
      out.push_back(C.buf);
    }
    CHECK(out[0] == out[1]);
  }
  omp_set_num_threads(saved);
#endif
}

// kiln/cpu/gemm_tile.hpp (flex_attention's in-place tile products): C = A B and C += A B against a double loop,
// A read as a tile and as a transposed one, padded row strides, row counts around its 6-row block and column
// counts of 1 to 5 vectors (the remainders after its 4-vector block), depths past its 128-step chunks; the
// padding of C stays untouched.
TEST_CASE_TEMPLATE("gemm_tile: C (+)= A B in place, every remainder of its register block", T, float, double) {
  namespace gt = kiln::HWY_NAMESPACE::gemm_tile;
  const int64_t lanes = int64_t(hwy::HWY_NAMESPACE::Lanes(hwy::HWY_NAMESPACE::ScalableTag<T>()));
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t M : {1, 5, 6, 7, 13, 45})
    for (int64_t vectors = 1; vectors <= 5; ++vectors)
      for (int64_t K : {0, 1, 17, 300})  // 300: three chunks of kDepth
        for (bool transposed : {false, true})
          for (bool add : {false, true}) {
            CAPTURE(M);
            CAPTURE(vectors);
            CAPTURE(K);
            CAPTURE(transposed);
            CAPTURE(add);
            const int64_t N = vectors * lanes, lda = (transposed ? M : K) + 3, ldb = N + 5, ldc = N + 2;
            std::vector<T> a(size_t((transposed ? K : M) * lda)), b(size_t(K * ldb)), c(size_t(M * ldc));
            for (auto* x : {&a, &b, &c})
              for (T& e : *x) e = T(u(rng));
            const std::vector<T> c0 = c;
            const gt::Operand<T> op = transposed ? gt::Operand<T>{a.data(), 1, lda} : gt::Operand<T>{a.data(), lda, 1};
            REQUIRE(gt::fits<T>(N));
            if (add) gt::multiply_add(M, N, K, op, b.data(), ldb, c.data(), ldc);
            else gt::multiply(M, N, K, op, b.data(), ldb, c.data(), ldc);
            int wrong = 0;
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < ldc; ++j) {
                double want = add || j >= N ? double(c0[size_t(i * ldc + j)]) : 0.0;
                if (j < N)
                  for (int64_t k = 0; k < K; ++k)
                    want += double(op.data[i * op.rs + k * op.cs]) * double(b[size_t(k * ldb + j)]);
                const double got = double(c[size_t(i * ldc + j)]);
                wrong += j < N ? std::abs(got - want) > 1e-5 * (1 + std::abs(want)) : got != want;
              }
            CHECK(wrong == 0);
          }
  if (lanes > 1) CHECK(!gt::fits<T>(lanes + 1));  // (HWY_SCALAR: every N fits)
  // transpose: every element, rows past a whole vector (the scalar tail), padding of dst untouched.
  for (int64_t rows : {int64_t(1), lanes, 2 * lanes + 3})
    for (int64_t cols : {1, 5, 64}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const int64_t lds = cols + 2, ldd = rows + 7;
      std::vector<T> src(size_t(rows * lds)), dst(size_t(cols * ldd), T(-7));
      for (T& e : src) e = T(u(rng));
      gt::transpose(rows, cols, src.data(), lds, dst.data(), ldd);
      int wrong = 0;
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t i = 0; i < ldd; ++i)
          wrong += dst[size_t(j * ldd + i)] != (i < rows ? src[size_t(i * lds + j)] : T(-7));
      CHECK(wrong == 0);
    }
  // padded_stride: whole vectors, never a multiple of 1 KiB.
  for (int64_t n : {1, 16, 128, 256, 257, 512}) {
    const int64_t s = gt::padded_stride<T>(n);
    CHECK(s >= n);
    CHECK(s % lanes == 0);
    CHECK(s * int64_t(sizeof(T)) % 1024 != 0);
  }
}

}  // namespace test_cpu_gemm
