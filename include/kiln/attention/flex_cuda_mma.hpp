#pragma once
// flex_attention's forward and backward kernels on tensor cores, for bfloat16 and float16 q, k, v whose head dims
// are multiples of 16 (attention/flex_cuda.hpp generates them in place of the CUDA-core ones when
// FlexKernelConfig::tensor_cores is set; the delta and store_dq kernels and the descriptor block are shared).
// FlashAttention-2's schedule, both products of each pass by mma.sync m16n8k16 with float accumulators (cuda/mma.hpp):
//   forward   a thread block per tile of block_q query rows, a warp per 16 rows; per tile of block_kv keys (K and V
//             in shared memory, 16-bit as stored) S = Q K^T into registers, then scale, score_mod and the mask (partial
//             tiles only) on each element where the accumulator fragment holds it, the online softmax's max and sum per
//             row (a row's elements lie in the four lanes of one group, combined by shuffles), and O += P V, P's
//             accumulator fragments rounded to 16 bits being the A fragments of the second product.
//   backward  a thread block per tile of block_kv keys, a warp per 16 keys; per 16 or 32 query rows S^T = K Q^T and
//             dP^T = V dO^T, then P^T, dS^T and the modifier's backward per element, dV += P^T dO and dK += dS^T Q
//             in registers, and dQ += dS K through dS in shared memory, added into the dq accumulator by atomics.
// Rounding P and dS to 16 bits before their products is FlashAttention's choice too: outputs stay within a 16-bit
// step of the CPU's (which multiplies in float), gradients with cancellation within about two.
//
// Fragments come from shared memory by ldmatrix. Not yet done (needs a GPU to tune): cp.async double buffering of
// the tiles, wgmma on sm_90.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kiln/core/dtype.hpp"

namespace kiln::attention::flex_cuda_detail {

// acc[n] += A B_n^T for n < rows / 8: A the warp's 16 x k_dim row-major tile at `a` (in shared memory, ld elements
// between rows), B_n rows n * 8 .. n * 8 + 7 of the tile `b` (same ld): 16 rows times `rows` rows, as Q K^T.
inline std::string rows_times_rows(const std::string& acc, const std::string& a, const std::string& b, const std::string& ld,
                                   const std::string& k_dim, const std::string& rows, const std::string& indent) {
  return "#pragma unroll\n" + indent + "for (int kk = 0; kk < " + k_dim + "; kk += 16) {\n" + indent + "  unsigned a[4];\n" +
         indent + "  kiln_a_fragment(a, " + a + " + kk, " + ld + ", lane);\n#pragma unroll\n" + indent +
         "  for (int n = 0; n < " + rows + " / 8; n += 2) {\n" + indent + "    unsigned bb[4];\n" + indent +
         "    kiln_b_fragments_nk(bb, " + b + " + n * 8 * " + ld + " + kk, " + ld + ", lane);\n" + indent + "    @MMA@(" +
         acc + "[n], a, bb);\n" + indent + "    @MMA@(" + acc + "[n + 1], a, bb + 2);\n" + indent + "  }\n" + indent + "}\n";
}

// acc[n] += A B_n for n < cols / 8 (the 16 x cols product of A, 16 x 16 in registers, and the 16 x cols row-major tile
// `b`, ld elements between rows), as P V.
inline std::string times_rows(const std::string& acc, const std::string& a, const std::string& b, const std::string& ld,
                              const std::string& cols, const std::string& indent) {
  return "#pragma unroll\n" + indent + "for (int n = 0; n < " + cols + " / 8; n += 2) {\n" + indent + "  unsigned bb[4];\n" +
         indent + "  kiln_b_fragments_kn(bb, " + b + " + n * 8, " + ld + ", lane);\n" + indent + "  @MMA@(" + acc + "[n], " +
         a + ", bb);\n" + indent + "  @MMA@(" + acc + "[n + 1], " + a + ", bb + 2);\n" + indent + "}\n";
}

// The tensor-core kernels' copy of tiles into shared memory: rows first .. first + count - 1 of (b, head) of a
// [B, H, L, cols] 16-bit tensor into dst (row stride ld), zeros from `limit`; 16 bytes at a time where the tensor and
// all its rows start 16-byte aligned. Every thread of the block (kThreads) takes part.
inline std::string load_rows_function() {
  return R"(  auto load_rows = [&](unsigned short* dst, int ld, int cols, int count, const void* src, const long long* stride,
                       long long b, long long head, long long first, long long limit) {
    const unsigned short* base = (const unsigned short*)src + b * stride[0] + head * stride[1];
    if ((unsigned long long)src % 16 == 0 && (stride[0] | stride[1] | stride[2]) % 8 == 0) {
      for (int e = tid; e < count * (cols / 8); e += kThreads) {
        const int i = e / (cols / 8), c = e % (cols / 8) * 8;
        kiln_u32x4 x = {0, 0, 0, 0};
        if (first + i < limit) x = *(const kiln_u32x4*)(base + (first + i) * stride[2] + c);
        *(kiln_u32x4*)(dst + i * ld + c) = x;
      }
    } else {
      for (int e = tid; e < count * cols; e += kThreads) {
        const int i = e / cols, c = e % cols;
        dst[i * ld + c] = first + i < limit ? base[(first + i) * stride[2] + c] : (unsigned short)0;
      }
    }
  };
)";
}

// The kernel body after the prologue (attention/flex_cuda.hpp: A, kiln_smem, neg_inf, tid, kiln_dropout), with
// `pair` the statements that set `allowed` and compute the modified score `score_var` of one (qi, kv) pair, and
// @-placeholders filled from flex_kernels' list plus @MMA@ and @PACK@ (cuda/mma.hpp's functions for T).
inline std::string mma_forward_body(const std::string& pair, const std::string& score_var) {
  return R"(  // 16-bit tiles as stored: Q [BR][QLD16], K [BC][QLD16], V [BC][VLD16] (rows padded by 8 elements: the lanes
  // of a fragment load then hit 32 different banks).
  unsigned short* const Qs = (unsigned short*)kiln_smem;
  unsigned short* const Ks = Qs + @BR@ * @QLD16@;
  unsigned short* const Vs = Ks + @BC@ * @QLD16@;
  const int kThreads = @BR@ * 2, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
)" + load_rows_function() + R"(  for (long long tile = blockIdx.x; tile < d.B * d.Hq * d.q_tiles; tile += gridDim.x) {
    // The last query tiles first: under a causal mask they see the most keys, and the GPU starts blocks in order, so
    // the light ones fill the tail of the launch.
    const long long qt = d.q_tiles - 1 - tile % d.q_tiles, h = tile / d.q_tiles % d.Hq, b = tile / (d.q_tiles * d.Hq);
    const long long hk = h / (d.Hq / d.Hkv), q0 = qt * @BR@;
    const long long mask_row = ((d.mask_B == 1 ? 0 : b) * d.mask_H + (d.mask_H == 1 ? 0 : h)) * d.mask_q_blocks + q0 / d.mask_q_block;
    const A pb = (A)b, ph = (A)h;
    const int r0 = warp * 16 + g;  // this lane's rows of the tile: r0 and r0 + 8
    const long long rows[2] = {q0 + r0, q0 + r0 + 8};
    __syncthreads();  // the previous tile's warps are done with the shared tiles
    load_rows(Qs, @QLD16@, @D@, @BR@, d.q, d.q_stride, b, h, q0, d.Lq);
    A m[2] = {neg_inf, neg_inf}, l[2] = {0, 0}, o[@DV@ / 8][4];
#pragma unroll
    for (int n = 0; n < @DV@ / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0;
    for (long long kt = 0; kt < d.kv_tiles; ++kt) {
      const long long k0 = kt * @BC@;
      const unsigned char state = d.mask[mask_row * d.mask_kv_blocks + k0 / d.mask_kv_block];
      if (state == 0) continue;
      __syncthreads();
      load_rows(Ks, @QLD16@, @D@, @BC@, d.k, d.k_stride, b, hk, k0, d.Lkv);
      load_rows(Vs, @VLD16@, @DV@, @BC@, d.v, d.v_stride, b, hk, k0, d.Lkv);
      __syncthreads();
      // S = Q K^T for the warp's 16 rows: BC / 8 accumulator tiles of 16 x 8 (K row-major is B column-major).
      A s[@BC@ / 8][4];
#pragma unroll
      for (int n = 0; n < @BC@ / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
)" + rows_times_rows("s", "Qs + warp * 16 * @QLD16@", "Ks", "@QLD16@", "@D@", "@BC@", "      ") + R"(      // The modifiers and the mask on each element where the fragment holds it: row rows[e / 2], key k0 + j.
      A tile_max[2] = {neg_inf, neg_inf};
#pragma unroll
      for (int n = 0; n < @BC@ / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = n * 8 + 2 * t + e % 2;
          const long long qi = rows[e / 2], kv = k0 + j;
          A x = neg_inf;
          if (qi < d.Lq && kv < d.Lkv) {
            const A score = s[n][e] * (A)d.scale, pq = (A)qi, pkv = (A)kv;
)" + pair + "            if (allowed) x = " + score_var + R"(;
          }
          s[n][e] = x;
          tile_max[e / 2] = fmax(tile_max[e / 2], x);
        }
      }
      // Online softmax per row; a row's elements are in the four lanes g * 4 .. g * 4 + 3.
      A m_new[2], alpha[2], part[2] = {0, 0};
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmax(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmax(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        m_new[r] = fmax(m[r], tile_max[r]);
        alpha[r] = m_new[r] == m[r] ? (A)1 : exp(m[r] - m_new[r]);
      }
#pragma unroll
      for (int n = 0; n < @BC@ / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = n * 8 + 2 * t + e % 2;
          const long long qi = rows[e / 2];
          const A p = m_new[e / 2] == neg_inf ? (A)0 : exp(s[n][e] - m_new[e / 2]);
          part[e / 2] += p;
          s[n][e] = @KEPT_P@;  // (the row sum takes p whole: the lse is dropout's no-op one)
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        part[r] += __shfl_xor_sync(0xffffffffu, part[r], 1);
        part[r] += __shfl_xor_sync(0xffffffffu, part[r], 2);
        l[r] = l[r] * alpha[r] + part[r];
        m[r] = m_new[r];
      }
#pragma unroll
      for (int n = 0; n < @DV@ / 8; ++n) {
        o[n][0] *= alpha[0], o[n][1] *= alpha[0];
        o[n][2] *= alpha[1], o[n][3] *= alpha[1];
      }
      // O += P V, 16 keys a step: the accumulator tiles 2 kk and 2 kk + 1 of P, rounded, are the A fragment.
#pragma unroll
      for (int kk = 0; kk < @BC@ / 16; ++kk) {
        const unsigned a[4] = {@PACK@(s[2 * kk][0], s[2 * kk][1]), @PACK@(s[2 * kk][2], s[2 * kk][3]),
                               @PACK@(s[2 * kk + 1][0], s[2 * kk + 1][1]), @PACK@(s[2 * kk + 1][2], s[2 * kk + 1][3])};
)" + times_rows("o", "a", "Vs + kk * 16 * @VLD16@", "@VLD16@", "@DV@", "        ") + R"(      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (rows[r] >= d.Lq) continue;
      const long long row = (b * d.Hq + h) * d.Lq + rows[r];
      const A inv = l[r] == (A)0 ? (A)0 : (A)1 / l[r];
      unsigned* const out = (unsigned*)((unsigned short*)d.out + row * @DV@ + 2 * t);
#pragma unroll
      for (int n = 0; n < @DV@ / 8; ++n) out[n * 4] = @PACK@(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      if (t == 0) ((A*)d.lse)[row] = l[r] == (A)0 ? neg_inf : m[r] + log(l[r]);
    }
  }
)";
}

// The backward kernel body after the prologue: a thread block per tile of BC keys of one (batch, key/value head),
// a warp per 16 keys; for every query head of the GQA group and every BRB query rows it computes S^T = K Q^T and
// dP^T = V dO^T by mma, then per element (where the fragment holds it: key keys[e / 2], query q0 + i) P^T from the
// saved lse, dS^T = P^T (dP^T - delta) and the modifier's backward (`pair`, `score_var`, `grad_code` as in
// flex_kernels), adds P^T dO to dV and dS^T Q to dK by mma (P^T and dS^T's accumulator fragments rounded to 16 bits
// are A fragments), and, through dS in shared memory, adds dS K to the dq accumulator by atomic adds. @DS_PRIME@ and
// @KEEP_PD@ are flex_kernels' (dropout), @TO16@ rounds a float to T.
inline std::string mma_backward_body(const std::string& pair, const std::string& score_var, const std::string& grad_code) {
  return R"(  // The saved statistics of BRB query rows (float), then 16-bit tiles: K [BC][QLD16], V [BC][VLD16], Q [BRB][QLD16],
  // dO [BRB][VLD16] and dS [BRB][SLD16] (rows padded by 8 elements).
  A* const lse_s = (A*)kiln_smem;
  A* const delta_s = lse_s + @BRB@;
  unsigned short* const Ks = (unsigned short*)(delta_s + @BRB@);
  unsigned short* const Vs = Ks + @BC@ * @QLD16@;
  unsigned short* const Qs = Vs + @BC@ * @VLD16@;
  unsigned short* const dOs = Qs + @BRB@ * @QLD16@;
  unsigned short* const dSs = dOs + @BRB@ * @VLD16@;
  const int kThreads = @BC@ * 2, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
)" + load_rows_function() + R"(  const long long group = d.Hq / d.Hkv;
  for (long long tile = blockIdx.x; tile < d.B * d.Hkv * d.kv_tiles; tile += gridDim.x) {
    const long long kt = tile % d.kv_tiles, hk = tile / d.kv_tiles % d.Hkv, b = tile / (d.kv_tiles * d.Hkv);
    const long long k0 = kt * @BC@;
    const int c0 = warp * 16 + g;  // this lane's keys of the tile: c0 and c0 + 8
    const long long keys[2] = {k0 + c0, k0 + c0 + 8};
    const A pb = (A)b;
    __syncthreads();  // the previous tile's warps are done with the shared tiles
    load_rows(Ks, @QLD16@, @D@, @BC@, d.k, d.k_stride, b, hk, k0, d.Lkv);
    load_rows(Vs, @VLD16@, @DV@, @BC@, d.v, d.v_stride, b, hk, k0, d.Lkv);
    A dk[@D@ / 8][4], dv[@DV@ / 8][4];
#pragma unroll
    for (int n = 0; n < @D@ / 8; ++n) dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0;
#pragma unroll
    for (int n = 0; n < @DV@ / 8; ++n) dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0;
    for (long long h = hk * group; h < (hk + 1) * group; ++h) {
      const A ph = (A)h;
      const long long mask_head = (d.mask_B == 1 ? 0 : b) * d.mask_H + (d.mask_H == 1 ? 0 : h), rows = (b * d.Hq + h) * d.Lq;
      for (long long q0 = 0; q0 < d.Lq; q0 += @BRB@) {
        const unsigned char state = d.mask[(mask_head * d.mask_q_blocks + q0 / d.mask_q_block) * d.mask_kv_blocks + k0 / d.mask_kv_block];
        if (state == 0) continue;
        __syncthreads();  // every warp is done with the last rows' Q, dO and dS
        load_rows(Qs, @QLD16@, @D@, @BRB@, d.q, d.q_stride, b, h, q0, d.Lq);
        load_rows(dOs, @VLD16@, @DV@, @BRB@, d.dout, d.dout_stride, b, h, q0, d.Lq);
        for (int i = tid; i < @BRB@; i += kThreads) {
          const bool in = q0 + i < d.Lq;
          lse_s[i] = in ? ((const A*)d.lse)[rows + q0 + i] : neg_inf;
          delta_s[i] = in ? ((const A*)d.delta)[rows + q0 + i] : (A)0;
        }
        __syncthreads();
        // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys: BRB / 8 accumulator tiles of 16 x 8 each.
        A st[@BRB@ / 8][4], dpt[@BRB@ / 8][4];
#pragma unroll
        for (int n = 0; n < @BRB@ / 8; ++n) {
          st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0;
          dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0;
        }
)" + rows_times_rows("st", "Ks + warp * 16 * @QLD16@", "Qs", "@QLD16@", "@D@", "@BRB@", "        ") +
         rows_times_rows("dpt", "Vs + warp * 16 * @VLD16@", "dOs", "@VLD16@", "@DV@", "@BRB@", "        ") + R"(        // P^T and dS^T element by element; dS also into shared memory, [query][key], for dQ.
#pragma unroll
        for (int n = 0; n < @BRB@ / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = n * 8 + 2 * t + e % 2;
            const long long qi = q0 + i, kv = keys[e / 2];
            A p = 0, ds = 0;
            if (kv < d.Lkv && qi < d.Lq && lse_s[i] != neg_inf) {
              const A score = st[n][e] * (A)d.scale, pq = (A)qi, pkv = (A)kv;
)" + pair + "              if (allowed) {\n                p = exp(" + score_var + R"( - lse_s[i]);
                const A dp = dpt[n][e];
                @DS_PRIME@
                A dscore = 0;
)" + grad_code + R"(                ds = dscore * (A)d.scale;@KEEP_PD@
              }
            }
            st[n][e] = p;
            dpt[n][e] = ds;
            dSs[i * @SLD16@ + c0 + 8 * (e / 2)] = @TO16@(ds);
          }
        }
        // dV += P^T dO and dK += dS^T Q, 16 queries a step.
#pragma unroll
        for (int kk = 0; kk < @BRB@ / 16; ++kk) {
          const unsigned pa[4] = {@PACK@(st[2 * kk][0], st[2 * kk][1]), @PACK@(st[2 * kk][2], st[2 * kk][3]),
                                  @PACK@(st[2 * kk + 1][0], st[2 * kk + 1][1]), @PACK@(st[2 * kk + 1][2], st[2 * kk + 1][3])};
          const unsigned sa[4] = {@PACK@(dpt[2 * kk][0], dpt[2 * kk][1]), @PACK@(dpt[2 * kk][2], dpt[2 * kk][3]),
                                  @PACK@(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]), @PACK@(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
)" + times_rows("dv", "pa", "dOs + kk * 16 * @VLD16@", "@VLD16@", "@DV@", "          ") +
         times_rows("dk", "sa", "Qs + kk * 16 * @QLD16@", "@QLD16@", "@D@", "          ") + R"(        }
        __syncthreads();  // dS is whole
        // dQ += dS K: the warps share the 16 x 16 tiles of this dQ tile, each added into the accumulator.
        for (int job = warp; job < @BRB@ / 16 * (@D@ / 16); job += @BC@ / 16) {
          const int rb = job / (@D@ / 16), c16 = job % (@D@ / 16);
          A acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
          for (int kk = 0; kk < @BC@ / 16; ++kk) {
            unsigned a[4], bb[4];
            kiln_a_fragment(a, dSs + rb * 16 * @SLD16@ + kk * 16, @SLD16@, lane);
            kiln_b_fragments_kn(bb, Ks + kk * 16 * @QLD16@ + c16 * 16, @QLD16@, lane);
            @MMA@(acc[0], a, bb);
            @MMA@(acc[1], a, bb + 2);
          }
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const long long qi = q0 + rb * 16 + g + 8 * (e % 4 / 2);
            const A x = acc[e / 4][e % 4];
            if (qi < d.Lq && x != (A)0) kiln_atomic_add(&((A*)d.dq_acc)[(rows + qi) * @D@ + c16 * 16 + e / 4 * 8 + 2 * t + e % 2], x);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (keys[r] >= d.Lkv) continue;
      const long long row = (b * d.Hkv + hk) * d.Lkv + keys[r];
      unsigned* const gk = (unsigned*)((unsigned short*)d.dk + row * @D@ + 2 * t);
      unsigned* const gv = (unsigned*)((unsigned short*)d.dv + row * @DV@ + 2 * t);
#pragma unroll
      for (int n = 0; n < @D@ / 8; ++n) gk[n * 4] = @PACK@(dk[n][2 * r], dk[n][2 * r + 1]);
#pragma unroll
      for (int n = 0; n < @DV@ / 8; ++n) gv[n * 4] = @PACK@(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
)";
}

// Query rows per step of the tensor-core backward: 32 for head dims up to 64, else 16 (its registers hold dK and dV
// of the warp's 16 keys, S^T and dP^T of these rows), never more than the forward's tile (which it then divides).
inline int mma_backward_rows(int64_t D, int64_t Dv, int block_q) { return std::max(D, Dv) <= 64 && block_q >= 32 ? 32 : 16; }

// cuda/mma.hpp's product and packing functions for 16-bit T.
template <class T>
constexpr const char* mma_function() {
  return std::is_same_v<T, bfloat16> ? "kiln_mma_bf16" : "kiln_mma_f16";
}
template <class T>
constexpr const char* pack_function() {
  return std::is_same_v<T, bfloat16> ? "kiln_pack_bf16" : "kiln_pack_f16";
}
template <class T>
constexpr const char* round_function() {
  return std::is_same_v<T, bfloat16> ? "kiln_float_to_bf16" : "kiln_float_to_half";
}

}  // namespace kiln::attention::flex_cuda_detail
