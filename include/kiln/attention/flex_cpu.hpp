#pragma once
// The CPU kernels of flex_attention: tiled online softmax (FlashAttention-2's schedule) with the score and
// mask modifiers inlined, never materializing the Lq x Lkv matrix. A query tile of the block mask's
// q_block rows meets one key tile at a time: S = scale Q K^T, then per row the modifier, mask and running
// max/sum on Highway vectors along the keys, then O += P V. The products run in kiln/cpu/gemm_tile.hpp's
// kernel on the tiles where they lie (q, k and v mapped in place, bfloat16 rows converted; K and V transposed
// per key tile), or in Eigen's GEMM for a head dim that is not whole vectors. Tiles the block mask marks empty
// are skipped; full ones skip the mask. Accumulation is in float (double for double tensors). Threads: forward
// over batch x head x query tile, backward over batch x key/value head (the heads of a GQA group run in one
// thread, which owns dK and dV).
//
// Backward, per key tile and query tile, recomputes P = exp(S' - lse) from the saved log-sum-exp (S' the
// modified, masked score), then dV += P^T dO, dP = dO V^T, dS' = P (dP - delta) with
// delta = rowsum(dO * O) - dlse, the modifier's backward turns dS' into dS (and scatters into captured
// tensors' gradients), dQ += scale dS K, dK += scale dS^T Q.
//
// Dropout on the probabilities (FlashAttention-2's): the forward multiplies each tile of P by the mask after the
// row sums took it in full (so the lse is dropout's no-op one), and the backward regenerates the mask from the
// counters it was drawn from: dV += Pd^T dO with Pd = P * mask / (1 - p), and dS' = Pd dP - P delta.
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/attention/block_mask.hpp"
#include "kiln/core/generator.hpp"
#include "kiln/cpu/gemm.hpp"
#include "kiln/cpu/gemm_tile.hpp"
#include "kiln/cpu/parallel.hpp"
#include "kiln/tensor/softmax.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace kiln {
namespace HWY_NAMESPACE {
namespace flex {
namespace hn = hwy::HWY_NAMESPACE;
using attention::BlockMask;
using attention::BlockState;
using attention::Env;
using attention::Point;

// float for float and bfloat16, double for double.
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Rows of a [B, H, L, dim] tensor whose last dim is contiguous.
template <class T>
struct Rows {
  const T* data;
  int64_t sb, sh, sl;
  const T* row(int64_t b, int64_t h, int64_t l) const { return data + b * sb + h * sh + l * sl; }
};

struct Sizes {
  int64_t B, Hq, Hkv, Lq, Lkv, D, Dv;
  int64_t group() const { return Hq / Hkv; }
  // Threads for a pass: all of them once the dense FLOP count is worth a parallel region (below, the barrier
  // costs more than the work; on a busy machine, much more).
  int threads() const {
    const int64_t flops = 2 * B * Hq * Lq * Lkv * (D + Dv);
    return flops >= 16 * kParallelCostThreshold ? get_num_threads() : 1;
  }
};

template <class A>
using RowMajor = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class A>
using Tile = Eigen::Map<RowMajor<A>, 0, Eigen::OuterStride<>>;
template <class A>
Tile<A> tile(A* p, int64_t rows, int64_t cols, int64_t ld) {
  return Tile<A>(p, rows, cols, Eigen::OuterStride<>(ld));
}

template <class A>
using ConstTile = Eigen::Map<const RowMajor<A>, 0, Eigen::OuterStride<>>;

// C += A B in gemm_tile.hpp's kernel, which reads the tiles in place (Eigen's GEMM would pack both): A's
// element (i, k) at a.data[i * a.rs + k * a.cs], so a tile or its transpose; K the inner extent. The caller
// checks gemm_tile::fits for C's columns.
template <class A>
void add_product(Tile<A> C, gemm_tile::Operand<A> a, int64_t K, const ConstTile<A>& B) {
  gemm_tile::multiply_add(C.rows(), C.cols(), K, a, B.data(), B.outerStride(), C.data(), C.outerStride());
}

// Rows [l0, l0 + n) of (b, h) as a matrix: in place when T is the compute type, else converted into buf.
template <class T, class A>
ConstTile<A> operand(const Rows<T>& src, int64_t b, int64_t h, int64_t l0, int64_t n, int64_t cols, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>) {
    return ConstTile<A>(src.row(b, h, l0), n, cols, Eigen::OuterStride<>(src.sl));
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const T* s = src.row(b, h, l0 + i);
      for (int64_t c = 0; c < cols; ++c) buf[size_t(i * cols + c)] = A(s[c]);
    }
    return ConstTile<A>(buf.data(), n, cols, Eigen::OuterStride<>(cols));
  }
}

template <class A>
int64_t padded(int64_t n) {
  const hn::ScalableTag<A> d;
  const int64_t N = int64_t(hn::Lanes(d));
  return (n + N - 1) / N * N;
}

// A key tile's rows (c x cols) transposed into buf (cols x ldt, ldt = gemm_tile::padded_stride(block)), the columns
// from c to the next whole vector zero: the B operand of Q K^T (or dO V^T) over whole vectors of keys.
template <class A>
const A* transposed(const ConstTile<A>& t, std::vector<A>& buf, int64_t ldt) {
  gemm_tile::transpose(t.rows(), t.cols(), t.data(), t.outerStride(), buf.data(), ldt);
  for (int64_t j = 0; j < t.cols(); ++j)
    std::fill(buf.data() + j * ldt + t.rows(), buf.data() + j * ldt + padded<A>(t.rows()), A(0));
  return buf.data();
}

// S (r x whole vectors of c keys, row stride ld) = X Y^T for a query-side tile X (r x n) and the transposed key
// tile Y^T (n x ldt, from transposed).
template <class A>
void product_t(const ConstTile<A>& X, const A* yt, int64_t ldt, int64_t c, A* s, int64_t ld) {
  gemm_tile::multiply(X.rows(), padded<A>(c), X.cols(), {X.data(), X.outerStride(), 1}, yt, ldt, s, ld);
}

// Whether modify_row leaves a row as it is (q . k unscaled; exp_row then applies the scale): a full tile of
// whole vectors without a score modifier has nothing to mask or evaluate.
template <class S, class A>
bool keeps_raw(BlockState state, int64_t c) {
  const hn::ScalableTag<A> d;
  return std::is_same_v<S, attention::node::Score> && state == BlockState::Full && c % int64_t(hn::Lanes(d)) == 0;
}

// One row of a tile of q . k (`c` keys from k0, row stride padded to whole vectors), in place: times scale,
// the modifier, then the mask (partial tiles) and the keys past the tile's end as -inf; unchanged where
// keeps_raw. Returns the row's max (of the scaled, modified scores).
template <bool kPartial, class S, class M, class A>
HWY_INLINE A modify_row(A* s, int64_t c, A scale, int64_t b, int64_t h, int64_t q, int64_t k0, const S& score_mod,
                        const M& mask_mod, Env<A>& env) {
  const hn::ScalableTag<A> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto neg_inf = hn::Set(d, -std::numeric_limits<A>::infinity());
  const auto vscale = hn::Set(d, scale);
  auto vmax = neg_inf;
  if (keeps_raw<S, A>(kPartial ? BlockState::Partial : BlockState::Full, c)) {
    for (int64_t j = 0; j < c; j += N) vmax = hn::Max(vmax, hn::LoadU(d, s + j));
    return hn::GetLane(hn::MaxOfLanes(d, vmax)) * scale;
  }
  for (int64_t j = 0; j < c; j += N) {
    auto p = attention::detail::make_point(d, b, h, q, k0 + j, k0 + c);
    p.score = hn::Mul(hn::LoadU(d, s + j), vscale);
    if constexpr (kPartial) p.live = hn::And(p.live, mask_mod.value(d, p, env));
    auto x = p.score;
    if constexpr (!std::is_same_v<S, attention::node::Score>) x = score_mod.value(d, p, env);
    x = hn::IfThenElse(p.live, x, neg_inf);
    hn::StoreU(x, d, s + j);
    vmax = hn::Max(vmax, x);
  }
  return hn::GetLane(hn::MaxOfLanes(d, vmax));
}

// modify_row for a row of a tile in `state` (the mask evaluated only in partial tiles).
template <class S, class M, class A>
HWY_INLINE A modify_tile_row(BlockState state, A* s, int64_t c, A scale, int64_t b, int64_t h, int64_t q, int64_t k0,
                             const S& score_mod, const M& mask_mod, Env<A>& env) {
  return state == BlockState::Full ? modify_row<false>(s, c, scale, b, h, q, k0, score_mod, mask_mod, env)
                                   : modify_row<true>(s, c, scale, b, h, q, k0, score_mod, mask_mod, env);
}

// exp(s * scale - shift) over a padded row (shift finite), in place; returns the sum.
template <class A>
HWY_INLINE A exp_row(A* s, int64_t c, A scale, A shift) {
  const hn::ScalableTag<A> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vs = hn::Set(d, shift), vscale = hn::Set(d, scale);
  auto sum = hn::Zero(d);
  for (int64_t j = 0; j < c; j += N) {
    const auto e = softmax_detail::exp_nonpositive(d, hn::Min(hn::MulSub(hn::LoadU(d, s + j), vscale, vs), hn::Zero(d)));
    hn::StoreU(e, d, s + j);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// Dropout of the attention probabilities: element e of [B, Hq, Lq, Lkv] (row-major) is kept when
// bernoulli_(1 - p) would draw a 1 for it from counters reserved at `start` under `seed` (lane e % 4 of
// counter start + e / 4: core/generator.hpp), so a materialized softmax followed by dropout from the same
// generator state zeroes the same elements.
struct Dropout {
  double p = 0;
  uint64_t seed = 0, start = 0;
  bool active() const { return p > 0; }
};

// Multiplies row (b, h, q) of the probabilities, keys [k0, k0 + c), by the mask and 1 / (1 - p).
template <class A>
void apply_dropout(A* s, int64_t c, const Dropout& drop, const Sizes& g, int64_t b, int64_t h, int64_t q, int64_t k0) {
  const uint64_t e0 = ((uint64_t(b) * uint64_t(g.Hq) + uint64_t(h)) * uint64_t(g.Lq) + uint64_t(q)) * uint64_t(g.Lkv) +
                      uint64_t(k0);
  const double keep = 1 - drop.p;
  const A scale = A(1 / keep);
  const uint32_t threshold = philox::bernoulli_threshold(keep);
  philox::for_each_word_run(drop.seed, drop.start, e0, c, [&](int64_t j, const uint32_t* words, int64_t count) {
    A* row = s + j;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) row[i] = (words[i] >> 8) < threshold ? row[i] * scale : A(0);
  });
}

template <class A>
struct ForwardScratch {
  std::vector<A> q, k, kt, v, s, o, m, l, alpha;  // kt: K^T, D x ldt
  ForwardScratch(int64_t bq, int64_t bk, int64_t D, int64_t Dv, int64_t ld, int64_t ldt)
      : q(size_t(bq * D)), k(size_t(bk * D)), kt(size_t(D * ldt)), v(size_t(bk * Dv)), s(size_t(bq * ld)),
        o(size_t(bq * Dv)), m(size_t(bq)), l(size_t(bq)), alpha(size_t(bq)) {}
};

// out [B, Hq, Lq, Dv] and lse [B, Hq, Lq], contiguous. Returns false when a live lane read a captured
// tensor out of bounds.
template <class T, class S, class M>
bool forward(const Rows<T>& q, const Rows<T>& k, const Rows<T>& v, const Sizes& g, double scale, const S& score_mod,
             const BlockMask<M>& bm, const Dropout& drop, T* out, Acc<T>* lse) {
  using A = Acc<T>;
  const int64_t Bq = bm.q_block, Bk = bm.kv_block, nq = bm.q_blocks(), nk = bm.kv_blocks(), ld = padded<A>(Bk);
  const int64_t ldt = gemm_tile::padded_stride<A>(Bk), units = g.B * g.Hq * nq;
  bool bad_index = false;
#pragma omp parallel reduction(|| : bad_index) num_threads(g.threads()) if (units > 1 && g.threads() > 1)
  {
    ForwardScratch<A> w(Bq, Bk, g.D, g.Dv, ld, ldt);
    Env<A> env;
#pragma omp for schedule(dynamic)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t qb = u % nq, h = u / nq % g.Hq, b = u / (nq * g.Hq), hk = h / g.group();
      const int64_t q0 = qb * Bq, r = std::min(Bq, g.Lq - q0);
      const auto Q = operand(q, b, h, q0, r, g.D, w.q);
      std::fill(w.o.begin(), w.o.end(), A(0));
      std::fill(w.m.begin(), w.m.end(), -std::numeric_limits<A>::infinity());
      std::fill(w.l.begin(), w.l.end(), A(0));
      auto O = tile(w.o.data(), r, g.Dv, g.Dv);
      for (int64_t kb = 0; kb < nk; ++kb) {
        const BlockState state = bm.at(b, h, qb, kb);
        if (state == BlockState::Empty) continue;
        const int64_t k0 = kb * Bk, c = std::min(Bk, g.Lkv - k0);
        product_t(Q, transposed(operand(k, b, hk, k0, c, g.D, w.k), w.kt, ldt), ldt, c, w.s.data(), ld);
        for (int64_t i = 0; i < r; ++i) {
          A* s = w.s.data() + i * ld;
          const A mx = modify_tile_row(state, s, c, A(scale), b, h, q0 + i, k0, score_mod, bm.mask_mod, env);
          const A m_new = std::max(w.m[i], mx);
          if (m_new == -std::numeric_limits<A>::infinity()) {  // nothing live in this row yet
            std::fill(s, s + c, A(0));
            w.alpha[i] = 1;
            continue;
          }
          w.alpha[i] = m_new == w.m[i] ? A(1) : std::exp(w.m[i] - m_new);  // (exp(0): most rows after the first tiles)
          w.l[i] = w.l[i] * w.alpha[i] + exp_row(s, c, keeps_raw<S, A>(state, c) ? A(scale) : A(1), m_new);
          w.m[i] = m_new;
          if (drop.active()) apply_dropout(s, c, drop, g, b, h, q0 + i, k0);
        }
        for (int64_t i = 0; i < r; ++i)
          if (w.alpha[i] != A(1)) O.row(i) *= w.alpha[i];
        const auto V = operand(v, b, hk, k0, c, g.Dv, w.v);
        if (gemm_tile::fits<A>(g.Dv)) add_product(O, {w.s.data(), ld, 1}, c, V);
        else O.noalias() += tile(w.s.data(), r, c, ld) * V;
      }
      for (int64_t i = 0; i < r; ++i) {
        T* o = out + ((b * g.Hq + h) * g.Lq + q0 + i) * g.Dv;
        A& row_lse = lse[(b * g.Hq + h) * g.Lq + q0 + i];
        if (w.l[i] == A(0)) {  // every key masked: zeros, lse -inf (as PyTorch)
          std::fill(o, o + g.Dv, T(0));
          row_lse = -std::numeric_limits<A>::infinity();
          continue;
        }
        const A inv = A(1) / w.l[i];
        for (int64_t c = 0; c < g.Dv; ++c) o[c] = T(w.o[size_t(i * g.Dv + c)] * inv);
        row_lse = w.m[i] + std::log(w.l[i]);
      }
    }
    bad_index = bad_index || env.bad_index;
  }
  return !bad_index;
}

template <class A>
struct BackwardScratch {
  std::vector<A> q, dout, k, v, kt, vt, s, p, pd, dp, dq, dk, dv, delta;  // pd: P after dropout, when there is one
  BackwardScratch(int64_t bq, int64_t bk, const Sizes& g, int64_t ld, int64_t ldt, bool dropout)
      : q(size_t(bq * g.D)), dout(size_t(bq * g.Dv)), k(size_t(bk * g.D)), v(size_t(bk * g.Dv)),
        kt(size_t(g.D * ldt)), vt(size_t(g.Dv * ldt)), s(size_t(bq * ld)),
        p(size_t(bq * ld)), pd(dropout ? size_t(bq * ld) : 0), dp(size_t(bq * ld)), dq(size_t(g.Lq * g.D)),
        dk(size_t(g.Lkv * g.D)), dv(size_t(g.Lkv * g.Dv)), delta(size_t(g.Lq)) {}
};

// The gradients dq [B, Hq, Lq, D], dk [B, Hkv, Lkv, D], dv [B, Hkv, Lkv, Dv] (contiguous; null: not wanted)
// from dout (and dlse, null for none). captured_grads(thread) gives that thread's gradient buffer per captured
// tensor of score_mod (its Env::grad). Returns false when a live lane read a captured tensor out of bounds.
template <class T, class S, class M, class GradBuffers>
bool backward(const Rows<T>& q, const Rows<T>& k, const Rows<T>& v, const T* out, const Acc<T>* lse, const Rows<T>& dout,
              const Acc<T>* dlse, const Sizes& g, double scale, const S& score_mod, const BlockMask<M>& bm,
              const Dropout& drop, T* dq, T* dk, T* dv, GradBuffers&& captured_grads) {
  using A = Acc<T>;
  constexpr bool kIdentity = std::is_same_v<S, attention::node::Score>;
  const int64_t Bq = bm.q_block, Bk = bm.kv_block, nq = bm.q_blocks(), nk = bm.kv_blocks(), ld = padded<A>(Bk);
  const int64_t ldt = gemm_tile::padded_stride<A>(Bk), units = g.B * g.Hkv;
  bool bad_index = false;
#pragma omp parallel reduction(|| : bad_index) num_threads(g.threads()) if (units > 1 && g.threads() > 1)
  {
    BackwardScratch<A> w(Bq, Bk, g, ld, ldt, drop.active());
    Env<A> env;
#ifdef _OPENMP
    env.grad = captured_grads(omp_get_thread_num());
#else
    env.grad = captured_grads(0);
#endif
    const hn::ScalableTag<A> d;
    const int64_t N = int64_t(hn::Lanes(d));
    // dV's rows and dQ's, dK's: whole vectors, so gemm_tile.hpp's kernel takes the three products into them.
    const bool tile_rows = gemm_tile::fits<A>(g.Dv) && gemm_tile::fits<A>(g.D);
#pragma omp for schedule(dynamic)
    for (int64_t u = 0; u < units; ++u) {
      const int64_t hk = u % g.Hkv, b = u / g.Hkv;
      std::fill(w.dk.begin(), w.dk.end(), A(0));
      std::fill(w.dv.begin(), w.dv.end(), A(0));
      for (int64_t h = hk * g.group(); h < (hk + 1) * g.group(); ++h) {
        const int64_t bh = b * g.Hq + h;
        for (int64_t i = 0; i < g.Lq; ++i) {
          const T* o = out + (bh * g.Lq + i) * g.Dv;
          const T* go = dout.row(b, h, i);
          A acc = 0;
          for (int64_t c = 0; c < g.Dv; ++c) acc += A(o[c]) * A(go[c]);
          w.delta[size_t(i)] = acc - (dlse ? dlse[bh * g.Lq + i] : A(0));
        }
        std::fill(w.dq.begin(), w.dq.end(), A(0));
        for (int64_t kb = 0; kb < nk; ++kb) {
          const int64_t k0 = kb * Bk, c = std::min(Bk, g.Lkv - k0);
          const auto K = operand(k, b, hk, k0, c, g.D, w.k), V = operand(v, b, hk, k0, c, g.Dv, w.v);
          const A *kt = transposed(K, w.kt, ldt), *vt = transposed(V, w.vt, ldt);
          for (int64_t qb = 0; qb < nq; ++qb) {
            const BlockState state = bm.at(b, h, qb, kb);
            if (state == BlockState::Empty) continue;
            const int64_t q0 = qb * Bq, r = std::min(Bq, g.Lq - q0);
            const auto Q = operand(q, b, h, q0, r, g.D, w.q), dO = operand(dout, b, h, q0, r, g.Dv, w.dout);
            auto dP = tile(w.dp.data(), r, c, ld);
            product_t(Q, kt, ldt, c, w.s.data(), ld);
            // P from the saved lse; the raw scores stay in s for the modifier's backward.
            for (int64_t i = 0; i < r; ++i) {
              A* p = w.p.data() + i * ld;
              std::copy(w.s.data() + i * ld, w.s.data() + i * ld + c, p);
              const A row_lse = lse[bh * g.Lq + q0 + i];
              modify_tile_row(state, p, c, A(scale), b, h, q0 + i, k0, score_mod, bm.mask_mod, env);
              if (row_lse == -std::numeric_limits<A>::infinity()) std::fill(p, p + padded<A>(c), A(0));
              else exp_row(p, c, keeps_raw<S, A>(state, c) ? A(scale) : A(1), row_lse);
            }
            if (drop.active()) {
              std::copy(w.p.begin(), w.p.begin() + r * ld, w.pd.begin());
              for (int64_t i = 0; i < r; ++i) apply_dropout(w.pd.data() + i * ld, c, drop, g, b, h, q0 + i, k0);
            }
            A* p_used = drop.active() ? w.pd.data() : w.p.data();  // dV += P^T dO
            if (tile_rows) add_product(tile(w.dv.data() + k0 * g.Dv, c, g.Dv, g.Dv), {p_used, 1, ld}, r, dO);
            else tile(w.dv.data() + k0 * g.Dv, c, g.Dv, g.Dv).noalias() += tile(p_used, r, c, ld).transpose() * dO;
            product_t(dO, vt, ldt, c, w.dp.data(), ld);
            for (int64_t i = 0; i < r; ++i) {
              const A* p = w.p.data() + i * ld;
              const A* pd = drop.active() ? w.pd.data() + i * ld : nullptr;
              A* ds = w.dp.data() + i * ld;
              const auto delta = hn::Set(d, w.delta[size_t(q0 + i)]);
              for (int64_t j = 0; j < c; j += N) {
                const auto dpj = hn::LoadU(d, ds + j), pj = hn::LoadU(d, p + j);
                const auto dsm = pd ? hn::Sub(hn::Mul(hn::LoadU(d, pd + j), dpj), hn::Mul(pj, delta))
                                    : hn::Mul(pj, hn::Sub(dpj, delta));
                if constexpr (kIdentity) {
                  hn::StoreU(dsm, d, ds + j);
                } else {
                  auto pt = attention::detail::make_point(d, b, h, q0 + i, k0 + j, k0 + c);
                  pt.score = hn::Mul(hn::LoadU(d, w.s.data() + i * ld + j), hn::Set(d, A(scale)));
                  if (state == BlockState::Partial) pt.live = hn::And(pt.live, bm.mask_mod.value(d, pt, env));
                  auto dscore = hn::Zero(d);
                  score_mod.backward(d, pt, hn::IfThenElseZero(pt.live, dsm), env, dscore);
                  hn::StoreU(dscore, d, ds + j);
                }
              }
            }
            auto dQ = tile(w.dq.data() + q0 * g.D, r, g.D, g.D), dK = tile(w.dk.data() + k0 * g.D, c, g.D, g.D);
            if (tile_rows) {
              add_product(dQ, {w.dp.data(), ld, 1}, c, K);
              add_product(dK, {w.dp.data(), 1, ld}, r, Q);
            } else {
              dQ.noalias() += dP * K;
              dK.noalias() += dP.transpose() * Q;
            }
          }
        }
        if (dq)
          for (int64_t i = 0; i < g.Lq * g.D; ++i) dq[bh * g.Lq * g.D + i] = T(w.dq[size_t(i)] * A(scale));
      }
      const int64_t bhk = b * g.Hkv + hk;
      if (dk)
        for (int64_t i = 0; i < g.Lkv * g.D; ++i) dk[bhk * g.Lkv * g.D + i] = T(w.dk[size_t(i)] * A(scale));
      if (dv)
        for (int64_t i = 0; i < g.Lkv * g.Dv; ++i) dv[bhk * g.Lkv * g.Dv + i] = T(w.dv[size_t(i)]);
    }
    bad_index = bad_index || env.bad_index;
  }
  return !bad_index;
}

}  // namespace flex
}  // namespace HWY_NAMESPACE
}  // namespace kiln
HWY_AFTER_NAMESPACE();
