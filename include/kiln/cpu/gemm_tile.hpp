// kiln/cpu/gemm_tile.hpp: C = A B and C += A B for tiles that already sit in cache, without packing either
// operand (flex_attention's products, forward and backward: kiln/attention/flex_cpu.hpp).
//
// Eigen's GEMM copies A and B into packed panels on every call. For flex_attention's tiles (256 x 64 by
// 64 x 256, 256 x 256 by 256 x 64, a few hundred per head) that copy was 8% of the run, and the operands are
// small enough to be read where they are: B is row-major with contiguous rows, so a block of kRows rows x
// kVectors vectors of C keeps its sums in registers while each step of k loads the vectors of B's row k and
// broadcasts one element of A per row. A is read one element at a time, so it may have any strides (P or P^T
// alike); a B that is a transpose (K^T) is transposed first (transpose, a gather per vector). Measured on the
// development machine (one thread, float, peak 230 GFLOP/s): P V at 186-213 GFLOP/s against Eigen's 138-164;
// Q K^T at 160 (148-154 with K's transpose) against 128-132.
#pragma once

#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace gemm_tile {
namespace hn = hwy::HWY_NAMESPACE;

// Register block: MR rows x NV vectors of C, plus NV vectors of B and a broadcast of A, in 32 registers
// (AVX-512) or 16 (AVX2 and narrower).
#if HWY_TARGET <= HWY_AVX3
constexpr int kRows = 6, kVectors = 4;
#else
constexpr int kRows = 3, kVectors = 3;
#endif

// Strides of an operand in elements: element (i, j) at data[i * rs + j * cs].
template <class T>
struct Operand {
  const T* data;
  int64_t rs, cs;
};

// C rows [0, MR) x columns [0, NV vectors) = A rows [0, MR) x B (+ C when add), over K steps; B row-major (row
// stride ldb).
template <int MR, int NV, class T>
HWY_INLINE void block(Operand<T> a, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t K, bool add) {
  const hn::ScalableTag<T> d;
  const int64_t L = int64_t(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  V acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = add ? hn::LoadU(d, c + r * ldc + v * L) : hn::Zero(d);
  for (int64_t k = 0; k < K; ++k) {
    V vb[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) vb[v] = hn::LoadU(d, b + k * ldb + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const V va = hn::Set(d, a.data[r * a.rs + k * a.cs]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(va, vb[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) hn::StoreU(acc[r][v], d, c + r * ldc + v * L);
}

// The rows of C in blocks of kRows (the last ones one at a time) for one block of NV vectors of columns.
template <int NV, class T>
HWY_INLINE void column_block(int64_t M, int64_t K, Operand<T> a, const T* b, int64_t ldb, T* c, int64_t ldc, bool add) {
  int64_t i = 0;
  for (; i + kRows <= M; i += kRows)
    block<kRows, NV>({a.data + i * a.rs, a.rs, a.cs}, b, ldb, c + i * ldc, ldc, K, add);
  for (; i < M; ++i) block<1, NV>({a.data + i * a.rs, a.rs, a.cs}, b, ldb, c + i * ldc, ldc, K, add);
}

// Whether multiply takes N columns: whole vectors only (the caller uses Eigen otherwise).
template <class T>
bool fits(int64_t N) {
  const hn::ScalableTag<T> d;
  return N % int64_t(hn::Lanes(d)) == 0;
}

// C[M, N] = A[M, K] B[K, N] (+ C when add), B and C row-major with row strides ldb and ldc; fits<T>(N). K runs
// in chunks of kDepth steps, so that the rows of B a column block reads (kDepth x kVectors vectors, 32 KiB with
// AVX-512) stay in L1 while every row block of C passes over them: P V's B is 64 KiB, and reading it whole from
// L2 for each 6 rows ran at 161-166 GFLOP/s where chunks of 128 run at 186-213 (one core of the development
// machine, whose peak is 230). A row stride of B that is a multiple of 1 KiB maps its rows onto a quarter of L1's
// sets or fewer (Q K^T with K^T 256 floats wide ran 20% slower): callers pad it (padded_stride).
constexpr int64_t kDepth = 128;
template <class T>
void product(int64_t M, int64_t N, int64_t K, Operand<T> a, const T* b, int64_t ldb, T* c, int64_t ldc, bool add) {
  const hn::ScalableTag<T> d;
  const int64_t L = int64_t(hn::Lanes(d));
  for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kDepth) {  // once when K is 0: C = 0
    const int64_t depth = std::min(kDepth, K - k0);
    const bool add_chunk = add || k0 > 0;
    const Operand<T> ak{a.data + k0 * a.cs, a.rs, a.cs};
    const T* bk = b + k0 * ldb;
    int64_t j = 0;
    for (; j + kVectors * L <= N; j += kVectors * L)
      column_block<kVectors>(M, depth, ak, bk + j, ldb, c + j, ldc, add_chunk);
    switch ((N - j) / L) {  // the columns left: fewer than kVectors vectors
      case 3: column_block<3>(M, depth, ak, bk + j, ldb, c + j, ldc, add_chunk); break;
      case 2: column_block<2>(M, depth, ak, bk + j, ldb, c + j, ldc, add_chunk); break;
      case 1: column_block<1>(M, depth, ak, bk + j, ldb, c + j, ldc, add_chunk); break;
      default: break;
    }
  }
}
// C = A B and C += A B.
template <class T>
void multiply(int64_t M, int64_t N, int64_t K, Operand<T> a, const T* b, int64_t ldb, T* c, int64_t ldc) {
  product(M, N, K, a, b, ldb, c, ldc, false);
}
template <class T>
void multiply_add(int64_t M, int64_t N, int64_t K, Operand<T> a, const T* b, int64_t ldb, T* c, int64_t ldc) {
  product(M, N, K, a, b, ldb, c, ldc, true);
}

// A row stride for rows of n elements: whole vectors, and not a multiple of 1 KiB (see product).
template <class T>
int64_t padded_stride(int64_t n) {
  const hn::ScalableTag<T> d;
  const int64_t L = int64_t(hn::Lanes(d)), whole = (n + L - 1) / L * L;
  return whole * int64_t(sizeof(T)) % 1024 == 0 ? whole + L : whole;
}

// dst[j * ldd + i] = src[i * lds + j] for i < rows, j < cols: a tile's transpose, so that K^T is a B operand.
// Gathers down src's columns, a vector of rows at a time (the last rows one by one).
template <class T>
void transpose(int64_t rows, int64_t cols, const T* src, int64_t lds, T* dst, int64_t ldd) {
  const hn::ScalableTag<T> d;
  const hn::RebindToSigned<decltype(d)> di;
  using I = hn::TFromD<decltype(di)>;
  const int64_t L = int64_t(hn::Lanes(d));
  const auto offsets = hn::Mul(hn::Iota(di, I(0)), hn::Set(di, I(lds)));
  int64_t i = 0;
  for (; i + L <= rows; i += L)
    for (int64_t j = 0; j < cols; ++j) hn::StoreU(hn::GatherIndex(d, src + i * lds + j, offsets), d, dst + j * ldd + i);
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * ldd + i] = src[i * lds + j];
}

}  // namespace gemm_tile
}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();
