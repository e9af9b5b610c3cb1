// kiln/cpu/gemm_narrow.hpp: products whose C has only a few columns (or rows): a small batch through a large
// matrix, as a linear layer serving a few requests at once.
//
// Eigen's GEMM packs all of A into blocks for every call and then runs its kernel over one partial panel of
// columns, so a product with two columns costs several matrix-vector products: the 6272 -> 512 linear layer of
// the Fashion-MNIST CNN took 0.61 ms for one input (Eigen's GEMV) and 2.3 ms for two or for eight, on one
// thread. This kernel reads a row-major A once, in place: C(i, j) = dot(A row i, B column j), 4 rows of A
// against up to 4 columns of B with the sums in registers, the 4 rows reused from cache for each group of 4
// columns. The caller (kiln/cpu/gemm.hpp, narrow_product) splits rows across threads in blocks of 4, and each
// output's sum runs in the same order in every block: results do not depend on the thread count.
// A column-major A (a layer's backward, dx = dy W) stays with Eigen: read with a stride of a whole column per
// multiply-add, it ran slower than Eigen's packed kernel (0.6x).
#pragma once

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace gemm_narrow {
namespace hn = hwy::HWY_NAMESPACE;

// out[r][c] = sum_k a[r][k] * b[c * ldb + k] for 4 rows of A and C columns of B, each unit-stride in k. A block
// at the last rows of C repeats its last row (the repeats are not stored), so rows need no other instantiation.
template <int C, class T>
HWY_INLINE void dot_4xC(const T* const a[4], const T* b, int64_t ldb, int64_t K, T out[4][4]) {
  const hn::ScalableTag<T> d;
  const int64_t L = int64_t(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  V acc[4][C];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = hn::Zero(d);
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    V vb[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) vb[c] = hn::LoadU(d, b + c * ldb + k);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const V va = hn::LoadU(d, a[r] + k);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = hn::MulAdd(va, vb[c], acc[r][c]);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < C; ++c) {
      T s = hn::GetLane(hn::SumOfLanes(d, acc[r][c]));
      for (int64_t t = k; t < K; ++t) s += a[r][t] * b[c * ldb + t];
      out[r][c] = s;
    }
}

// C rows [r0, r1): a row-major (element (i, k) at a[i * lda + k]), b column-major (element (k, j) at
// b[j * ldb + k]); store(i, j, value) writes one output.
template <class T, class Store>
void dot_rows(const T* a, int64_t lda, const T* b, int64_t ldb, int64_t N, int64_t K, int64_t r0, int64_t r1,
              Store&& store) {
  T out[4][4];
  for (int64_t i = r0; i < r1; i += 4) {
    const T* rows[4];
    for (int r = 0; r < 4; ++r) rows[r] = a + std::min(i + r, r1 - 1) * lda;
    const int64_t row_count = std::min<int64_t>(4, r1 - i);
    for (int64_t j = 0; j < N; j += 4) {
      auto block = [&](auto c_count) {
        constexpr int C = decltype(c_count)::value;
        dot_4xC<C>(rows, b + j * ldb, ldb, K, out);
        for (int64_t r = 0; r < row_count; ++r)
          for (int c = 0; c < C; ++c) store(i + r, j + c, out[r][c]);
      };
      switch (std::min<int64_t>(4, N - j)) {
        case 1: block(std::integral_constant<int, 1>()); break;
        case 2: block(std::integral_constant<int, 2>()); break;
        case 3: block(std::integral_constant<int, 3>()); break;
        default: block(std::integral_constant<int, 4>());
      }
    }
  }
}

}  // namespace gemm_narrow
}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();
