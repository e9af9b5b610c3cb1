// kiln/cpu/gemm.hpp: matrix products on raw strided memory, through Eigen's GEMM (and kiln's own kernel for
// products with a few columns: kiln/cpu/gemm_narrow.hpp).
//
// This is the layer under matmul/mm/bmm: the Tensor layer passes data pointers and strides (in elements),
// nothing here knows about tensors. Kept out of the headers that elementwise users include (Eigen's product
// is the most expensive thing kiln compiles).
//
//   gemm(M, N, K, A, a_rs, a_cs, B, b_rs, b_cs, C, c_rs, c_cs, alpha = 1, beta = 0)
//       C[M,N] = alpha * A[M,K] * B[K,N] + beta * C
//   gemm_batched(batch, M, N, K, A, a_bs, a_rs, a_cs, B, b_bs, b_rs, b_cs, C, c_bs, c_rs, c_cs, alpha, beta)
//       the same for each b in [0, batch) with X_b = X + b * x_bs (strides in tensor order: batch, row, col).
//       A batch stride of 0 broadcasts that operand over the batch. c_bs == 0 with batch > 1 accumulates:
//       C = alpha * sum_b A_b B_b + beta * C (what the gradient of a broadcast bmm operand needs).
//
// Semantics shared by both:
//   - T is float or double (Eigen's vectorized GEMM); int32_t / int64_t work through Eigen's generic kernel.
//   - beta == 0 never reads C, so C may be uninitialized (NaN); alpha == 0 never reads A or B (BLAS rules).
//   - An operand with unit stride in one dim is mapped without a copy: row-major when its col stride is 1,
//     column-major when its row stride is 1, so transposed views cost nothing. A dim of extent 1 has no
//     meaningful stride and is ignored. Only an operand with neither stride 1 (or a zero/negative stride on a
//     dim of extent > 1: broadcast, flip) is first copied into a contiguous temporary.
//   - C is written in place unless neither of its strides is 1; then the product goes through a temporary
//     and is copied back. C must not overlap A or B, and distinct elements of C must not alias (unchecked).
//   - Threads: OpenMP, as many as Eigen::nbThreads() (omp_get_max_threads() unless the program called
//     Eigen::setNbThreads); one product is split across them, a batch is split by products (see below).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <utility>

// GCC 12.2 with Eigen 3.4's AVX-512 GEMM kernels: about 200 -Wmaybe-uninitialized (-O2, 270 at -O3) and 72
// -Wuninitialized (-O2) false positives per TU on the _mm512_undefined_* idiom, plus 3 -Wunused-variable in
// Eigen's PacketMath.h under -Wall. Silenced around the include only: GCC applies the diagnostic state of the
// source location, so the kernels instantiated later from these headers stay quiet while kiln's code and the
// user's keep every warning.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include "kiln/cpu/gemm_narrow.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kiln::cpu {

namespace detail::gemm {

// A strided matrix view: element (i, j) lives at data[i * rs + j * cs].
template <class T>
struct View {
  T* data;
  int64_t rows, cols, rs, cs;
};

// Owns the contiguous copy of an operand that could not be mapped (std::unique_ptr<T[]>(new T[n]) leaves
// arithmetic types uninitialized, unlike std::vector, so the copy is the only pass over the memory).
template <class T>
using Buffer = std::unique_ptr<std::remove_const_t<T>[]>;

// Unit-stride in the row (row-major) or column (column-major) direction; extent-1 dims do not count.
template <class T> inline bool row_major(const View<T>& v) {
  return (v.cols <= 1 || v.cs == 1) && (v.rows <= 1 || v.rs > 0);
}
template <class T> inline bool col_major(const View<T>& v) {
  return (v.rows <= 1 || v.rs == 1) && (v.cols <= 1 || v.cs > 0);
}

// A contiguous column-major copy of v in buf.
template <class T>
inline View<const T> column_major_copy(View<const T> v, Buffer<const T>& buf) {
  buf.reset(new std::remove_const_t<T>[v.rows * v.cols]);
  auto* out = buf.get();
  for (int64_t j = 0; j < v.cols; ++j)
    for (int64_t i = 0; i < v.rows; ++i) *out++ = v.data[i * v.rs + j * v.cs];
  return {buf.get(), v.rows, v.cols, 1, std::max<int64_t>(v.rows, 1)};
}

// Returns a view of v that is row- or column-major with positive outer stride, copying into buf only when
// v is neither. The copy reads along v's smaller stride and writes in that order.
template <class T>
inline View<const T> mappable(View<const T> v, Buffer<const T>& buf) {
  if (row_major(v)) return {v.data, v.rows, v.cols, v.rows <= 1 ? std::max<int64_t>(v.cols, 1) : v.rs, 1};
  if (col_major(v)) return {v.data, v.rows, v.cols, 1, v.cols <= 1 ? std::max<int64_t>(v.rows, 1) : v.cs};
  if (std::abs(v.cs) >= std::abs(v.rs)) return column_major_copy(v, buf);
  buf.reset(new std::remove_const_t<T>[v.rows * v.cols]);
  auto* out = buf.get();
  for (int64_t i = 0; i < v.rows; ++i)
    for (int64_t j = 0; j < v.cols; ++j) *out++ = v.data[i * v.rs + j * v.cs];
  return {buf.get(), v.rows, v.cols, v.cols, 1};
}

// Map<const float, ...> maps read-only memory as Eigen::Map<const Matrix<float, ...>>.
template <class T, int Order>
using Map = Eigen::Map<std::conditional_t<std::is_const_v<T>,
                                          const Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Order>,
                                          Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>>,
                       Eigen::Unaligned, Eigen::OuterStride<>>;

// Calls f with an Eigen::Map of a mappable view. Two storage orders per operand and C always column-major
// (see product()) keep this at four instantiations of Eigen's GEMM per T.
template <class T, class F>
inline void with_map(const View<T>& v, F&& f) {
  if (v.cs == 1)
    f(Map<T, Eigen::RowMajor>(v.data, v.rows, v.cols, Eigen::OuterStride<>(v.rs)));
  else
    f(Map<T, Eigen::ColMajor>(v.data, v.rows, v.cols, Eigen::OuterStride<>(v.cs)));
}

// c = beta * c for a column-major C; beta == 0 writes zeros without reading.
template <class T>
inline void scale(Map<T, Eigen::ColMajor>& c, T beta) {
  if (beta == T(0))
    c.setZero();
  else if (beta != T(1))
    c *= beta;
}

// Eigen::nbThreads() is omp_get_max_threads() unless the program called Eigen::setNbThreads (1 without OpenMP).
inline int max_threads() { return Eigen::nbThreads(); }

// Threads a product or a batch may use: none more inside a parallel region (the caller's, or ours).
inline int available_threads() {
#ifdef _OPENMP
  return omp_in_parallel() ? 1 : max_threads();
#else
  return 1;
#endif
}

// The transpose of v: the same memory with rows and columns swapped, which costs nothing.
template <class T>
inline View<T> transposed(const View<T>& v) {
  return {v.data, v.cols, v.rows, v.cs, v.rs};
}

// Runs f(lo, hi) for each of `threads` chunks of [0, dim), one per OpenMP thread: equal shares with inner edges
// rounded down to a multiple of grain (empty chunks are skipped).
template <class F>
inline void split_across_threads(int64_t dim, int64_t grain, int threads, F&& f) {
  auto edge = [&](int p) { return p == threads ? dim : dim * p / threads / grain * grain; };
#ifdef _OPENMP
#pragma omp parallel for schedule(static, 1) num_threads(threads)
#endif
  for (int p = 0; p < threads; ++p) {
    const int64_t lo = edge(p), hi = edge(p + 1);
    if (hi > lo) f(lo, hi);
  }
}

// Threading of one product. Eigen's own threading splits a product across threads that then share packed
// panels and wait on one another (busy-waiting on atomics); kiln instead splits C into one block of columns
// (or rows) per thread and runs Eigen's single-threaded product on each, with no synchronization but the
// final join. Measured on 2 AVX-512 cores (Zen 4 EPYC), sgemm, interleaved runs: 2048^3 192-199 vs
// 179-190 GFLOP/s, 1024^3 194-199 vs 179-210 (Eigen's threading is bimodal there), 128^3 186 vs 155,
// 64^3 132 vs 88, 48^3 81 vs 61 (one thread: 81). The price, each thread packing all of the operand it
// does not split, is O(1/N) of the work. Block edges are multiples
// of Eigen's register blocks (rows: 48 = 3 packets of 16 floats or 2 x 3 packets of 8 doubles; columns:
// 8 = 2 x its nr of 4) so no thread gets a ragged micro-panel in the middle of C.
// Threads start at Eigen's own threshold, 50000 multiply-adds per thread, so that every product Eigen would
// thread is split by kiln instead (the split tied one thread at 48^3, where Eigen's threading lost 25%,
// and won from 64^3 on). Only a product whose C is too small to split (fewer than 16 columns and 96 rows)
// is left to Eigen.
constexpr double kMinWorkPerThread = 50000;

// C (column-major, unit row stride, positive col stride) = alpha * A * B + beta * C through Eigen, a and b
// mappable. Inside kiln's parallel regions Eigen sees omp_get_num_threads() > 1 and stays single-threaded.
template <class T>
inline void product_serial(const View<const T>& a, const View<const T>& b, T* C, int64_t M, int64_t N,
                           int64_t c_cs, T alpha, T beta) {
  Map<T, Eigen::ColMajor> c(C, M, N, Eigen::OuterStride<>(c_cs));
  with_map(a, [&](const auto& am) {
    with_map(b, [&](const auto& bm) {
      // noalias: C never overlaps A or B, so Eigen must not evaluate into a temporary first.
      // With beta == 0 the '=' form runs setZero() then accumulates: C is written, never read.
      if (beta == T(0)) {
        c.noalias() = alpha * am * bm;
      } else {
        scale(c, beta);
        c.noalias() += alpha * am * bm;
      }
    });
  });
}

// Whether a product with N columns of C (and a row-major A) runs faster in gemm_narrow.hpp's kernel than in
// Eigen. Measured on the development machine (float, 1 and 2 threads, A from 64 x 64 to 1024 x 1024 and
// 512 x 6272): one column is Eigen's matrix-vector product, as fast; 2 to 4 columns win at every size (1.3 to
// 3.9x on one thread; a tie at 64 x 64 by 64 x 4); up to 12 columns win once K >= 256 and A has 64K elements
// (1.4 to 2.5x at 8 columns), and lose on shorter rows, where the per-output reduction is not amortized
// (784 x 128 by 128 x 12: 0.73x). At 16 columns Eigen ties or wins. bench/bench_gemm.cpp's *_linear cases
// and docs/performance.md have the linear layers.
inline bool narrow_pays(int64_t M, int64_t N, int64_t K) {
  return N >= 2 && (N <= 4 || (N <= 12 && K >= 256 && M * K >= 65536));
}

// C (element (i, j) at C[i * c_rs + j * c_cs]) = alpha * A * B + beta * C through gemm_narrow.hpp when
// narrow_pays for C or, transposing the product, for C^T, T is float or double, and the operand read by
// rows is row-major; false, with C untouched, otherwise. a and b are mappable().
template <class T>
inline bool narrow_product(View<const T> a, View<const T> b, T* C, int64_t c_rs, int64_t c_cs, T alpha, T beta) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    return false;
  } else {
    namespace nk = kiln::HWY_NAMESPACE::gemm_narrow;
    const int64_t M = a.rows, N = b.cols, K = a.cols;
    if (!narrow_pays(M, N, K)) {
      // C^T = B^T A^T: the few rows of C become its few columns.
      if (!narrow_pays(N, M, K)) return false;
      return narrow_product<T>(transposed(b), transposed(a), C, c_cs, c_rs, alpha, beta);
    }
    if (!(a.cs == 1 || K <= 1)) return false;
    // The kernel reads B's columns as vectors: copied into a column-major K x N buffer unless they are.
    Buffer<const T> bbuf;
    if (!(b.rs == 1 || K <= 1)) b = column_major_copy(b, bbuf);
    auto store = [&](int64_t i, int64_t j, T v) {
      T& y = C[i * c_rs + j * c_cs];
      y = beta == T(0) ? alpha * v : alpha * v + beta * y;
    };
    auto rows = [&](int64_t r0, int64_t r1) {
      nk::dot_rows(a.data, a.rs, b.data, b.cs, N, K, r0, r1, store);
    };
    // Threads take whole blocks of 4 rows, so each row goes through the same kernel for any thread count.
    const double work = double(M) * double(N) * double(K);
    const int threads = int(std::min<double>({double(available_threads()), work / kMinWorkPerThread, double((M + 3) / 4)}));
    if (threads <= 1)
      rows(0, M);
    else
      split_across_threads(M, 4, threads, rows);
    return true;
  }
}

// C (column-major, unit row stride, positive col stride) = alpha * A * B + beta * C, split across threads
// as explained at kMinWorkPerThread.
template <class T>
inline void product(View<const T> a, View<const T> b, T* C, int64_t M, int64_t N, int64_t c_cs, T alpha,
                    T beta) {
  const int64_t K = a.cols;
  if (K == 0 || alpha == T(0)) {
    Map<T, Eigen::ColMajor> c(C, M, N, Eigen::OuterStride<>(c_cs));
    return scale(c, beta);
  }
  Buffer<const T> abuf, bbuf;
  a = mappable(a, abuf);
  b = mappable(b, bbuf);
  if (narrow_product(a, b, C, 1, c_cs, alpha, beta)) return;
  const double work = double(M) * double(N) * double(K);
  int threads = int(std::min<double>(available_threads(), work / kMinWorkPerThread));
  // Split the larger dim of C (the operand every thread packs in full is then the smaller one), unless it
  // is too short to split and the other one is not.
  const bool by_cols = (N >= M && N >= 2 * 8) || M < 2 * 48;
  const int64_t dim = by_cols ? N : M, grain = by_cols ? 8 : 48;
  threads = int(std::min<int64_t>(threads, dim / grain));
  if (threads <= 1) return product_serial(a, b, C, M, N, c_cs, alpha, beta);
  Eigen::initParallel();
  split_across_threads(dim, grain, threads, [&](int64_t lo, int64_t hi) {
    const int64_t n = hi - lo;
    if (by_cols) {
      View<const T> bp{b.data + lo * b.cs, b.rows, n, b.rs, b.cs};
      product_serial(a, bp, C + lo * c_cs, M, n, c_cs, alpha, beta);
    } else {
      View<const T> ap{a.data + lo * a.rs, n, a.cols, a.rs, a.cs};
      product_serial(ap, b, C + lo, n, N, c_cs, alpha, beta);
    }
  });
}

template <class T>
inline void gemm(int64_t M, int64_t N, View<const T> a, View<const T> b, View<T> c, T alpha,
                 T beta) {
  if (M <= 0 || N <= 0) return;
  // Eigen's kernels want a column-major destination. A row-major C is the column-major C^T = B^T A^T:
  // swap the operands and each view's strides, which costs nothing.
  const bool c_col = (c.rows <= 1 || c.rs == 1) && (c.cols <= 1 || c.cs > 0);
  const bool c_row = (c.cols <= 1 || c.cs == 1) && (c.rows <= 1 || c.rs > 0);
  if (!c_col && c_row) {
    std::swap(M, N);
    std::swap(a, b);
    a = transposed(a);
    b = transposed(b);
    c = transposed(c);
  }
  if (c_col || c_row) {
    const int64_t c_cs = c.cols <= 1 ? M : c.cs;
    return product(a, b, c.data, M, N, c_cs, alpha, beta);
  }
  // Neither stride of C is 1: compute into a column-major temporary and copy back.
  Buffer<T> tmp(new T[M * N]);
  if (beta != T(0))
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < M; ++i) tmp[i + j * M] = c.data[i * c.rs + j * c.cs];
  product(a, b, tmp.get(), M, N, M, alpha, beta);
  for (int64_t j = 0; j < N; ++j)
    for (int64_t i = 0; i < M; ++i) c.data[i * c.rs + j * c.cs] = tmp[i + j * M];
}

}  // namespace detail::gemm

// C[M,N] = alpha * A[M,K] * B[K,N] + beta * C, all strides in elements. See the top of this file.
template <class T>
inline void gemm(int64_t M, int64_t N, int64_t K,                          //
                 const T* A, int64_t a_row_stride, int64_t a_col_stride,  //
                 const T* B, int64_t b_row_stride, int64_t b_col_stride,  //
                 T* C, int64_t c_row_stride, int64_t c_col_stride,        //
                 T alpha = T(1), T beta = T(0)) {
  static_assert(std::is_arithmetic_v<T>, "kiln: gemm needs an arithmetic element type");
  detail::gemm::gemm<T>(M, N, {A, M, K, a_row_stride, a_col_stride}, {B, K, N, b_row_stride, b_col_stride},
                        {C, M, N, c_row_stride, c_col_stride}, alpha, beta);
}

// For b in [0, batch): C_b = alpha * A_b * B_b + beta * C_b with X_b = X + b * x_batch_stride.
// x_batch_stride == 0 broadcasts A or B; c_batch_stride == 0 (batch > 1) accumulates over the batch.
template <class T>
inline void gemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K,                          //
                         const T* A, int64_t a_batch_stride, int64_t a_row_stride, int64_t a_col_stride,  //
                         const T* B, int64_t b_batch_stride, int64_t b_row_stride, int64_t b_col_stride,  //
                         T* C, int64_t c_batch_stride, int64_t c_row_stride, int64_t c_col_stride,        //
                         T alpha = T(1), T beta = T(0)) {
  static_assert(std::is_arithmetic_v<T>, "kiln: gemm_batched needs an arithmetic element type");
  namespace g = detail::gemm;
  if (batch <= 0 || M <= 0 || N <= 0) return;
  g::View<const T> a{A, M, K, a_row_stride, a_col_stride}, b{B, K, N, b_row_stride, b_col_stride};
  g::View<T> c{C, M, N, c_row_stride, c_col_stride};

  // A broadcast operand that needs the copy path is copied once here, not once per batch entry.
  g::Buffer<const T> abuf, bbuf;
  const bool reads_ab = K > 0 && alpha != T(0);
  if (a_batch_stride == 0 && reads_ab) a = g::mappable(a, abuf);
  if (b_batch_stride == 0 && reads_ab) b = g::mappable(b, bbuf);
  auto one = [&](int64_t i, T beta_i) {
    g::View<const T> ai = a, bi = b;
    g::View<T> ci = c;
    ai.data += i * a_batch_stride;
    bi.data += i * b_batch_stride;
    ci.data += i * c_batch_stride;
    g::gemm<T>(M, N, ai, bi, ci, alpha, beta_i);
  };

  if (c_batch_stride == 0) {  // accumulate into one C: serial over the batch, each product threaded
    for (int64_t i = 0; i < batch; ++i) one(i, i == 0 ? beta : T(1));
    return;
  }

  // Threading. Whole products on different threads need no synchronization at all and keep every thread
  // on Eigen's single-threaded kernel, so whenever there is more than one product the batch is split across
  // threads (each product then runs single-threaded: product() sees it is inside a parallel region). For
  // small products this is the only threading that pays: one 32^3 product is too small to split. The one
  // exception is a large product in the remainder batch % threads: given to a single thread, it would
  // leave the others idle for a whole large product, so these run one by one afterwards, each split across
  // all threads by product(). "Large" is kBig multiply-adds (128^3: about 40 us on one core, where the
  // split of one product reaches 1.8x on 2 cores); small remainders stay in the parallel loop, where the
  // imbalance is at most one small product.
  constexpr double kBig = 128.0 * 128.0 * 128.0;
  const int threads = g::available_threads();
  const bool big = double(M) * double(N) * double(K) >= kBig;
  const int64_t bulk = (threads > 1 && batch > 1) ? (big ? batch - batch % threads : batch) : 0;
  if (bulk > 1) {
    Eigen::initParallel();  // Eigen's cache-size and thread-count statics, set before the threads start
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(int(std::min<int64_t>(threads, bulk)))
#endif
    for (int64_t i = 0; i < bulk; ++i) one(i, beta);
  }
  for (int64_t i = bulk > 1 ? bulk : 0; i < batch; ++i) one(i, beta);
}

}  // namespace kiln::cpu
