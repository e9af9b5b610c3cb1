#pragma once
// create_block_mask: which (query block, key block) tiles of the attention matrix a mask_mod leaves empty,
// partly masked or full, computed once per mask (as torch.nn.attention.flex_attention.create_block_mask).
// The kernels skip empty tiles and evaluate the mask only in partial ones: causal attention does about
// half the work of dense. A mask that reads neither b nor h is computed once and shared by every batch
// and head, whatever B and H are asked for.
#include <hwy/highway.h>

#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kiln/attention/modifier.hpp"
#include "kiln/cpu/parallel.hpp"

namespace kiln::attention {

enum class BlockState : uint8_t { Empty = 0, Partial = 1, Full = 2 };

template <class MaskMod>
struct BlockMask {
  explicit BlockMask(MaskMod m) : mask_mod(std::move(m)) {}
  MaskMod mask_mod;
  int64_t B = 1, H = 1;  // 1: the same for every batch / head
  int64_t Lq = 0, Lkv = 0, q_block = 128, kv_block = 128;
  std::vector<BlockState> state;  // [B][H][q blocks][kv blocks]

  int64_t q_blocks() const { return (Lq + q_block - 1) / q_block; }
  int64_t kv_blocks() const { return (Lkv + kv_block - 1) / kv_block; }
  BlockState at(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
    const int64_t bi = B == 1 ? 0 : b, hi = H == 1 ? 0 : h;
    return state[size_t(((bi * H + hi) * q_blocks() + qb) * kv_blocks() + kb)];
  }
  // The fraction of tiles that are computed (partial or full), over every batch and head stored.
  double density() const {
    int64_t kept = 0;
    for (BlockState s : state) kept += s != BlockState::Empty;
    return state.empty() ? 0.0 : double(kept) / double(state.size());
  }
};

namespace detail {

// The lanes of one query row against keys kv0 .. kv0 + N - 1: indices as values of the compute type, keys
// past the end clamped to the last one (a captured read stays in bounds) and not live.
template <class D>
HWY_INLINE Point<D> make_point(D d, int64_t b, int64_t h, int64_t q, int64_t kv0, int64_t Lkv) {
  using A = hn::TFromD<D>;
  const auto kv = hn::Iota(d, A(kv0));
  const auto last = hn::Set(d, A(Lkv - 1));
  return Point<D>{hn::Zero(d), hn::Set(d, A(b)), hn::Set(d, A(h)), hn::Set(d, A(q)), hn::Min(kv, last), hn::Le(kv, last)};
}

}  // namespace detail

// Blocks of q_block x kv_block (PyTorch's default 128): B and H may be 1 to share the mask across batches or
// heads (and are taken as 1 when the mask reads neither b nor h).
template <class F>
auto create_block_mask(const F& mask, int64_t B, int64_t H, int64_t Lq, int64_t Lkv, int64_t q_block = 128,
                       int64_t kv_block = 128) {
  using M = decltype(as_mask_mod(mask));
  static_assert(M::is_bool, "create_block_mask: mask_mod must give a boolean (a comparison, &, |, !)");
  check<std::invalid_argument>(B >= 1 && H >= 1 && Lq >= 0 && Lkv >= 0 && q_block >= 1 && kv_block >= 1,
                               "create_block_mask: B = ", B, ", H = ", H, ", Lq = ", Lq, ", Lkv = ", Lkv,
                               ", blocks ", q_block, " x ", kv_block, ": sizes must be positive");
  BlockMask<M> bm(as_mask_mod(mask));
  // The states are evaluated on the CPU: over host copies of the tensors the mask reads where they are on a CUDA
  // device (the block mask keeps the tensors themselves, for the kernels).
  M host_mask = bm.mask_mod;
  host_mask.each_captured([](auto& gather) { gather.table = gather.table.cpu(); });
  check_exact_in<float>(host_mask, {B, H, Lq, Lkv}, "create_block_mask");  // (evaluated in float below)
  bm.B = (M::uses & kB) ? B : 1;
  bm.H = (M::uses & kH) ? H : 1;
  bm.Lq = Lq;
  bm.Lkv = Lkv;
  bm.q_block = q_block;
  bm.kv_block = kv_block;
  const int64_t nq = bm.q_blocks(), nk = bm.kv_blocks(), tiles = bm.B * bm.H * nq * nk;
  bm.state.assign(size_t(tiles), BlockState::Empty);
  bool bad_index = false;
#pragma omp parallel for schedule(dynamic, 4) reduction(|| : bad_index) if (tiles > 1 && bm.B * bm.H * Lq * Lkv >= kParallelCostThreshold)
  for (int64_t t = 0; t < tiles; ++t) {
    const hn::ScalableTag<float> d;
    const int64_t N = int64_t(hn::Lanes(d));
    const int64_t kb = t % nk, qb = t / nk % nq, h = t / (nk * nq) % bm.H, b = t / (nk * nq * bm.H);
    const int64_t q0 = qb * q_block, q1 = std::min(Lq, q0 + q_block);
    const int64_t k0 = kb * kv_block, k1 = std::min(Lkv, k0 + kv_block);
    int64_t live = 0;
    Env<float> env;
    for (int64_t q = q0; q < q1; ++q)
      for (int64_t k = k0; k < k1; k += N) {
        auto p = detail::make_point(d, b, h, q, k, k1);
        live += int64_t(hn::CountTrue(d, hn::And(p.live, host_mask.value(d, p, env))));
      }
    bad_index = bad_index || env.bad_index;
    // Only a tile inside both sequences can be full: the kernels mask a tail tile's missing keys.
    const bool whole = q1 - q0 == q_block && k1 - k0 == kv_block;
    bm.state[size_t(t)] = live == 0 ? BlockState::Empty
                          : live == (q1 - q0) * (k1 - k0) && whole ? BlockState::Full
                                                                   : BlockState::Partial;
  }
  check<std::out_of_range>(!bad_index, "create_block_mask: the mask_mod reads a captured tensor out of its bounds or at a "
                                       "fractional index");
  return bm;
}

// No mask: every tile inside the sequences full, tail tiles partial. Tiles of 256 (measured: 5% faster than
// 128 for D = 64 at L = 1024, one thread; a mask's granularity does not matter here).
inline auto dense_block_mask(int64_t Lq, int64_t Lkv, int64_t q_block = 256, int64_t kv_block = 256) {
  BlockMask<node::True> bm(node::True{});
  bm.Lq = Lq;
  bm.Lkv = Lkv;
  bm.q_block = q_block;
  bm.kv_block = kv_block;
  const int64_t nq = bm.q_blocks(), nk = bm.kv_blocks();
  bm.state.assign(size_t(nq * nk), BlockState::Full);
  for (int64_t qb = 0; qb < nq; ++qb)
    for (int64_t kb = 0; kb < nk; ++kb)
      if ((qb + 1) * q_block > Lq || (kb + 1) * kv_block > Lkv) bm.state[size_t(qb * nk + kb)] = BlockState::Partial;
  return bm;
}

}  // namespace kiln::attention
