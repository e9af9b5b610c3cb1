#pragma once
// flex_attention's GPU kernels, generated as CUDA C++ with the score and mask modifiers inlined
// (attention/modifier_cuda.hpp) and compiled by NVRTC like every other generated kernel (cuda/nvrtc.hpp,
// cuda/kernel_cache.hpp: the source is the cache key). The schedule is the CPU's (attention/flex_cpu.hpp),
// FlashAttention-2's, with the same semantics: the score is (q . k) * scale, then score_mod, then the mask
// (evaluated only in tiles the block mask marks partial; tiles marked empty are skipped), softmax with fp32
// accumulation (double for double tensors); a row with every key masked gives zeros and lse -inf.
//
// Four kernels, one descriptor block (the same words for all four):
//   forward   one thread block per query tile of block_q rows of one (batch, head), threads_per_row threads per
//             row; per key tile of block_kv keys (in shared memory) S = scale Q K^T, modifiers, online softmax,
//             O += P V; writes out and lse.
//   delta     per query row, delta = rowsum(dO * O) - dlse (the backward's correction term).
//   backward  one thread block per key tile of one (batch, key/value head), threads_per_row threads per key; for
//             every query head of the GQA group and every query tile it recomputes P = exp(S' - lse), then
//             dV += P^T dO, dS' = P (dP - delta), the modifier's backward (dS, and atomic adds into captured
//             tensors' gradients), dK += scale dS^T Q in registers, dQ += scale dS K as atomic adds into an
//             accumulator of the compute type.
//   store_dq  the accumulator converted to the tensors' dtype (launch it for bfloat16 and float16 only; for
//             float and double the accumulator can be dq itself).
// With FlexKernelConfig::dropout, the forward and the backward drop probabilities by the CPU kernels' mask (Philox
// counters from the descriptor's seed and start: the same elements as attention/flex_cpu.hpp drops).
//
// The products run on CUDA cores (FMA from shared memory; a thread keeps its keys' dot products and its output
// columns in registers, so each q element and probability is read once per thread), but for bfloat16 and float16
// with FlexKernelConfig::tensor_cores, whose forward and backward run on tensor cores (mma.sync,
// attention/flex_cuda_mma.hpp). See docs/attention.md for the H200's figures. What is checked without one
// (tests/cuda_null/test_flex_kernels.cpp): every kernel compiles through NVRTC for sm_80 and sm_90 without register
// spills, and the same source run on the host (a thread per CUDA thread, barriers for __syncthreads, the warp's
// lanes exchanging their fragments for mma.sync) gives the CPU kernels' outputs and gradients.
#include <string>
#include <utility>
#include <vector>

#include "kiln/attention/block_mask.hpp"
#include "kiln/attention/flex_cuda_mma.hpp"
#include "kiln/attention/modifier_cuda.hpp"
#include "kiln/core/generator.hpp"
#include "kiln/cuda/descriptor.hpp"
#include "kiln/cuda/mma.hpp"

namespace kiln::attention {

// The generated kernels' shape: head dims are compile-time constants of the source, and the tiles must divide
// the block mask's (a kernel tile then lies inside one mask tile and shares its state).
struct FlexKernelConfig {
  int64_t D = 64, Dv = 64;
  int block_q = 32;          // query rows per step
  int block_kv = 32;         // keys per step
  int threads_per_row = 4;   // threads sharing a query row (forward) or a key (backward)
  std::string entry = "kiln_flex";
  bool dropout = false;      // kernels that drop probabilities (FlexBuffers' dropout_p, seed and start)
  // The forward and backward on tensor cores (attention/flex_cuda_mma.hpp): bfloat16 and float16 only, D, Dv and
  // both tiles multiples of 16, a warp per 16 query rows (forward) or keys (backward), threads_per_row unused;
  // sm_80 and later.
  bool tensor_cores = false;

  int forward_threads() const { return tensor_cores ? block_q * 2 : block_q * threads_per_row; }
  int backward_threads() const { return tensor_cores ? block_kv * 2 : block_kv * threads_per_row; }
};

// Dynamic shared memory available to one block on sm_90 (227 KiB; sm_80 has 163 KiB).
inline constexpr size_t kMaxSharedBytes = 227 * 1024;

struct FlexKernels {
  cuda::KernelSource forward, delta, backward, store_dq;
  int captured = 0;  // captured slots in the descriptor (mask_mod's, then score_mod's)
};

// Where the kernels read and write (device memory on a GPU, host memory in the tests' shim). q, k, v, dout:
// a pointer and strides over (batch, head, position), the last dim contiguous; out [B, Hq, Lq, Dv] and lse
// [B, Hq, Lq] contiguous, as are the gradients; dlse may be null; captured_grads gives the gradient buffer
// (row-major over its shape, zeroed) of each captured tensor of score_mod that wants one, shared by all its reads.
template <Dtype T>
struct FlexBuffers {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  struct Rows {
    const T* data = nullptr;
    int64_t sb = 0, sh = 0, sl = 0;
  };
  int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, Lkv = 0;
  Rows q, k, v;
  T* out = nullptr;
  A* lse = nullptr;
  double scale = 1;
  // Dropout on the probabilities, as the CPU kernels' (attention/flex_cpu.hpp): element e of [B, Hq, Lq, Lkv] is kept
  // when lane e % 4 of Philox counter dropout_start + e / 4 under dropout_seed passes bernoulli(1 - dropout_p).
  double dropout_p = 0;
  uint64_t dropout_seed = 0, dropout_start = 0;
  int* error = nullptr;  // one word, zeroed: set to 1 when a live pair read a captured tensor out of bounds
  Rows dout;
  const A* dlse = nullptr;
  A* delta = nullptr;   // [B, Hq, Lq]
  A* dq_acc = nullptr;  // [B, Hq, Lq, D], zeroed
  T *dq = nullptr, *dk = nullptr, *dv = nullptr;
  std::vector<std::pair<const TensorImpl*, A*>> captured_grads;
};

namespace flex_cuda_detail {

using kiln::detail::cat;

// Replaces each @NAME@ in text.
inline std::string fill(std::string text, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [name, value] : values) {
    const std::string token = "@" + name + "@";
    for (size_t at = text.find(token); at != std::string::npos; at = text.find(token, at + value.size()))
      text.replace(at, token.size(), value);
  }
  return text;
}

// The descriptor block's fields (the same for every kernel of the set).
inline std::vector<cuda::detail::Field> fields(const std::vector<int>& captured_ranks) {
  std::vector<cuda::detail::Field> f = {
      {"long long B, Hq, Hkv, Lq, Lkv, q_tiles, kv_tiles", 7},
      {"const void* q", 1}, {"long long q_stride[3]", 3},
      {"const void* k", 1}, {"long long k_stride[3]", 3},
      {"const void* v", 1}, {"long long v_stride[3]", 3},
      {"void* out", 1}, {"void* lse", 1}, {"double scale", 1},
      {"const unsigned char* mask", 1},
      {"long long mask_B, mask_H, mask_q_blocks, mask_kv_blocks, mask_q_block, mask_kv_block", 6},
      {"int* error", 1},
      {"const void* dout", 1}, {"long long dout_stride[3]", 3},
      {"const void* dlse", 1}, {"void* delta", 1}, {"void* dq_acc", 1}, {"void* dq", 1}, {"void* dk", 1}, {"void* dv", 1},
      {"double drop_scale", 1}, {"long long drop_seed, drop_start, drop_threshold", 3}};
  for (size_t s = 0; s < captured_ranks.size(); ++s) {
    const size_t r = size_t(captured_ranks[s]);
    f.push_back({cat("const void* cap", s), 1});
    f.push_back({cat("long long cap", s, "_size[", r, "]"), r});
    f.push_back({cat("long long cap", s, "_stride[", r, "]"), r});
    f.push_back({cat("void* cap", s, "_grad"), 1});
  }
  return f;
}

inline cuda::KernelSource assemble(std::string entry, const std::vector<cuda::detail::Field>& f, const std::string& body,
                                   int block_threads, size_t shared_bytes, std::string_view helpers = {}) {
  cuda::KernelSource k;
  k.entry = std::move(entry);
  k.variant = {false, 0, false};
  k.block_threads = block_threads;
  k.shared_bytes = shared_bytes;
  cuda::detail::assemble(k, f, body, helpers);
  return k;
}

// The load and store of the tensors' dtype T, and the compute type's name and -inf.
template <Dtype T>
struct Spelling {
  using A = typename FlexBuffers<T>::A;
  static std::string compute() { return std::string(cuda::detail::compute_name<A>()); }
  static std::string load(const std::string& array, const std::string& offset) {
    return cuda::detail::load_element<T>("d." + array, offset);
  }
  static std::string store(const std::string& array, const std::string& offset, const std::string& value) {
    return cuda::detail::store_element<T>("d." + array, offset, value);
  }
  // Rows first .. first + count - 1 of (b, head) of a [B, H, L, cols] tensor into the shared array dst (row
  // stride ld), converted to A, zeros past `limit`; every thread of the block takes part.
  static std::string load_tile(const std::string& dst, const std::string& ld, const std::string& count, int64_t cols,
                               const std::string& array, const std::string& head, const std::string& first,
                               const std::string& limit) {
    const std::string offset = cat("b * d.", array, "_stride[0] + ", head, " * d.", array, "_stride[1] + (", first,
                                   " + i) * d.", array, "_stride[2] + c");
    return cat("    for (int e = tid; e < ", count, " * ", cols, "; e += kThreads) {\n",
               "      const int i = e / ", cols, ", c = e % ", cols, ";\n",
               "      ", dst, "[i * ", ld, " + c] = ", first, " + i < ", limit, " ? ", load(array, offset), " : (A)0;\n",
               "    }\n");
  }
};

// Statements that set `allowed` (the mask, evaluated in partial tiles only) and then compute the modified score
// of the pair at hand (score.var), the modifiers inlined; `score` is score_mod's tape, for the backward sweep.
struct PairCode {
  std::string code;
  cuda_mod::Tape score;
};

template <class S, class M>
PairCode pair_code(const S& score_mod, const M& mask_mod, cuda_mod::Code& c, const std::string& indent) {
  c.indent = indent + "  ";
  c.body.clear();
  const cuda_mod::Tape mask = cuda_mod::emit(mask_mod, c);
  PairCode p;
  p.code = cat(indent, "bool allowed = true;\n", indent, "if (state == 1) {\n", indent, "  const bool live = true;\n", c.body,
               indent, "  allowed = ", mask.var, ";\n", indent, "}\n", indent, "const bool live = allowed;\n");
  c.indent = indent;
  c.body.clear();
  p.score = cuda_mod::emit(score_mod, c);
  p.code += c.body;
  c.body.clear();
  return p;
}

// Arrays of the compute type carved one after another out of the dynamic shared memory: their declarations and
// the elements they take (so the kernel's layout and the launch's byte count come from one list).
struct SharedArrays {
  std::string declarations;
  int64_t elements = 0;
};
inline SharedArrays shared_arrays(const std::vector<std::pair<std::string, int64_t>>& arrays) {
  SharedArrays s;
  for (const auto& [name, n] : arrays) {
    s.declarations += cat("  A* const ", name, " = (A*)kiln_smem + ", s.elements, ";\n");
    s.elements += n;
  }
  return s;
}

// A loop over this thread's columns c = t, t + TPR, ... below @n@ (u counts them, for registers such as acc[u]).
inline std::string per_column(const std::string& n, const std::string& body, const std::string& indent) {
  return cat("#pragma unroll\n", indent, "for (int u = 0; u < @", n, "_PER@; ++u) {\n", indent, "  const int c = t + u * @TPR@;\n",
             indent, "  if (c < @", n, "@) ", body, "\n", indent, "}\n");
}

inline void check_shared_memory(const FlexKernels& ks, int64_t D, int64_t DV, int64_t BR, int64_t BC) {
  for (const cuda::KernelSource* k : {&ks.forward, &ks.backward})
    check<std::invalid_argument>(k->shared_bytes <= kMaxSharedBytes, "flex_attention (CUDA): ", k->entry, " needs ",
                                 k->shared_bytes, " bytes of shared memory for D = ", D, ", Dv = ", DV, ", tiles ", BR,
                                 " x ", BC, "; at most ", kMaxSharedBytes, " (choose smaller tiles)");
}

}  // namespace flex_cuda_detail

// The four kernels for T tensors with these modifiers (score_mod as flex_attention takes it; the block mask's
// mask_mod) and tile shape.
template <Dtype T, class F, class M>
FlexKernels flex_kernels(const F& score_mod_fn, const BlockMask<M>& bm, const FlexKernelConfig& cfg) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_v<T>,
                "flex_attention on CUDA: q, k and v must be float, double, bfloat16 or float16");
  using namespace flex_cuda_detail;
  using A = typename FlexBuffers<T>::A;
  using Sp = Spelling<T>;
  const auto score_mod = as_score_mod(score_mod_fn);
  check<std::invalid_argument>(cfg.D >= 1 && cfg.Dv >= 1 && cfg.block_q >= 1 && cfg.block_kv >= 1 && cfg.threads_per_row >= 1,
                               "flex_attention (CUDA): D = ", cfg.D, ", Dv = ", cfg.Dv, ", tiles ", cfg.block_q, " x ",
                               cfg.block_kv, ", ", cfg.threads_per_row, " threads per row: all must be positive");
  check<std::invalid_argument>(cfg.forward_threads() <= 1024 && cfg.backward_threads() <= 1024,
                               "flex_attention (CUDA): ", cfg.forward_threads(), " and ", cfg.backward_threads(),
                               " threads per block; at most 1024");
  check<std::invalid_argument>(!cfg.tensor_cores || (is_half_v<T> && cfg.D % 16 == 0 && cfg.Dv % 16 == 0 &&
                                                      cfg.block_q % 16 == 0 && cfg.block_kv % 16 == 0),
                               "flex_attention (CUDA): the tensor-core forward takes bfloat16 or float16 with D, Dv and "
                               "the tiles multiples of 16, not ", dtype_name(scalar_type_of<T>()), " with D = ", cfg.D, ", Dv = ", cfg.Dv,
                               ", tiles ", cfg.block_q, " x ", cfg.block_kv);
  const int64_t BR = cfg.block_q, BC = cfg.block_kv, TPR = cfg.threads_per_row, D = cfg.D, DV = cfg.Dv;
  // Rows padded by one element: threads of different rows read the same column from different banks.
  const int64_t QLD = D + 1, VLD = DV + 1, SLD = BC + 1;
  const std::string AN = Sp::compute();
  cuda_mod::Code c;
  c.compute = AN;
  const std::string neg_inf = c.literal(-std::numeric_limits<double>::infinity());
  const std::vector<std::pair<std::string, std::string>> common = {
      {"A", AN}, {"BR", cat(BR)}, {"BC", cat(BC)}, {"TPR", cat(TPR)}, {"D", cat(D)}, {"DV", cat(DV)},
      {"QLD", cat(QLD)}, {"VLD", cat(VLD)}, {"SLD", cat(SLD)}, {"D_PER", cat((D + TPR - 1) / TPR)}, {"BC_PER", cat((BC + TPR - 1) / TPR)},
      {"DV_PER", cat((DV + TPR - 1) / TPR)}, {"NEG_INF", neg_inf},
      {"KEPT_P", cfg.dropout ? "kiln_dropout(p, b, h, qi, k0 + j)" : "p"},
      // The backward with dropout: dV from the kept probabilities Pd, dS' = Pd dP - P delta.
      {"DS_PRIME", cfg.dropout ? "const A pd = kiln_dropout(p, b, h, qi, kv);\n            const A dsp = pd * dp - p * delta_s[i];"
                               : "const A dsp = p * (dp - delta_s[i]);"},
      {"KEEP_PD", cfg.dropout ? "\n            p = pd;" : ""},
      // The tensor-core forward's 16-bit rows (padded by 8) and its mma and packing functions.
      {"QLD16", cat(D + 8)}, {"VLD16", cat(DV + 8)}, {"MMA", mma_function<T>()}, {"PACK", pack_function<T>()}};
  // With dropout: p kept (scaled by 1 / (1 - p)) or dropped, by element ((b Hq + h) Lq + q) Lkv + kv's Philox word
  // (core/generator.hpp's philox4x32_10 of counter drop_start + e / 4, lane e % 4, its top 24 bits against the
  // Bernoulli threshold), the CPU's mask.
  const std::string dropout_function = !cfg.dropout ? "" : R"(  auto kiln_dropout = [&](A p, long long b, long long h, long long q, long long kv) -> A {
    const unsigned long long e = (((unsigned long long)b * d.Hq + h) * d.Lq + q) * d.Lkv + kv;
    const unsigned long long counter = (unsigned long long)d.drop_start + e / 4;
    unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = 0, c3 = 0;
    unsigned int k0 = (unsigned int)d.drop_seed, k1 = (unsigned int)((unsigned long long)d.drop_seed >> 32);
    for (int round = 0; round < 10; ++round) {
      if (round > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
      const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
      const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
      c1 = (unsigned int)p1;
      c3 = (unsigned int)p0;
      c0 = n0;
      c2 = n2;
    }
    const unsigned int lane = (unsigned int)(e % 4), word = lane == 0 ? c0 : lane == 1 ? c1 : lane == 2 ? c2 : c3;
    return (word >> 8) < (unsigned int)d.drop_threshold ? p * (A)d.drop_scale : (A)0;
  };
)";
  const std::string prologue =
      "  typedef @A@ A;\n"
      "  extern __shared__ __align__(16) unsigned char kiln_smem[];\n"
      "  const A neg_inf = @NEG_INF@;\n"
      "  const int tid = (int)threadIdx.x;\n" + dropout_function;

  const std::string load_kv = Sp::load_tile("Ks", "@QLD@", "@BC@", D, "k", "hk", "k0", "d.Lkv") +
                              Sp::load_tile("Vs", "@VLD@", "@BC@", DV, "v", "hk", "k0", "d.Lkv");

  // Forward.
  FlexKernels ks;
  const PairCode fwd_pair = pair_code(score_mod, bm.mask_mod, c, cfg.tensor_cores ? "            " : "          ");
  const SharedArrays fwd_shared = shared_arrays(
      {{"Qs", BR * QLD}, {"Ks", BC * QLD}, {"Vs", BC * VLD}, {"Ss", BR * SLD}, {"red_max", BR * TPR}, {"red_sum", BR * TPR}});
  const std::string fwd = fill(prologue + fwd_shared.declarations + R"(  const int kThreads = @BR@ * @TPR@, r = tid / @TPR@, t = tid % @TPR@;
  for (long long tile = blockIdx.x; tile < d.B * d.Hq * d.q_tiles; tile += gridDim.x) {
    const long long qt = tile % d.q_tiles, h = tile / d.q_tiles % d.Hq, b = tile / (d.q_tiles * d.Hq);
    const long long hk = h / (d.Hq / d.Hkv), q0 = qt * @BR@, qi = q0 + r;
    const bool row_in = qi < d.Lq;
    const long long mask_row = ((d.mask_B == 1 ? 0 : b) * d.mask_H + (d.mask_H == 1 ? 0 : h)) * d.mask_q_blocks + q0 / d.mask_q_block;
    const A pb = (A)b, ph = (A)h, pq = (A)qi;
    __syncthreads();  // the previous tile's threads are done with the shared tiles
)" + Sp::load_tile("Qs", "@QLD@", "@BR@", D, "q", "h", "q0", "d.Lq") +
                                   R"(    A m = neg_inf, l = 0, acc[@DV_PER@];
#pragma unroll
    for (int u = 0; u < @DV_PER@; ++u) acc[u] = 0;
    for (long long kt = 0; kt < d.kv_tiles; ++kt) {
      const long long k0 = kt * @BC@;
      const unsigned char state = d.mask[mask_row * d.mask_kv_blocks + k0 / d.mask_kv_block];
      if (state == 0) continue;
      __syncthreads();
)" + load_kv +
                                   R"(      __syncthreads();
      // This thread's keys j = t, t + TPR, ...: their dot products in registers, each q element read once.
      A dot[@BC_PER@];
#pragma unroll
      for (int u = 0; u < @BC_PER@; ++u) dot[u] = 0;
      for (int c = 0; c < @D@; ++c) {
        const A qc = Qs[r * @QLD@ + c];
#pragma unroll
        for (int u = 0; u < @BC_PER@; ++u)
          if (t + u * @TPR@ < @BC@) dot[u] += qc * Ks[(t + u * @TPR@) * @QLD@ + c];
      }
      A tile_max = neg_inf;
#pragma unroll
      for (int u = 0; u < @BC_PER@; ++u) {
        const int j = t + u * @TPR@;
        if (j >= @BC@) break;
        const long long kv = k0 + j;
        A x = neg_inf;
        if (row_in && kv < d.Lkv) {
          const A score = dot[u] * (A)d.scale, pkv = (A)kv;
)" + fwd_pair.code + "          if (allowed) x = " + fwd_pair.score.var + R"(;
        }
        Ss[r * @SLD@ + j] = x;
        tile_max = fmax(tile_max, x);
      }
      red_max[r * @TPR@ + t] = tile_max;
      __syncthreads();
      A m_new = m;
      for (int u = 0; u < @TPR@; ++u) m_new = fmax(m_new, red_max[r * @TPR@ + u]);
      const A alpha = m_new == m ? (A)1 : exp(m - m_new);
      A part = 0;
      for (int j = t; j < @BC@; j += @TPR@) {
        const A p = m_new == neg_inf ? (A)0 : exp(Ss[r * @SLD@ + j] - m_new);
        Ss[r * @SLD@ + j] = @KEPT_P@;  // (the row sum takes p whole: the lse is dropout's no-op one)
        part += p;
      }
      red_sum[r * @TPR@ + t] = part;
      __syncthreads();
      A tile_sum = 0;
      for (int u = 0; u < @TPR@; ++u) tile_sum += red_sum[r * @TPR@ + u];
      l = l * alpha + tile_sum;
      m = m_new;
#pragma unroll
      for (int u = 0; u < @DV_PER@; ++u) acc[u] *= alpha;
      for (int j = 0; j < @BC@; ++j) {  // O += P V, each probability read once
        const A p = Ss[r * @SLD@ + j];
#pragma unroll
        for (int u = 0; u < @DV_PER@; ++u)
          if (t + u * @TPR@ < @DV@) acc[u] += p * Vs[j * @VLD@ + t + u * @TPR@];
      }
    }
    if (row_in) {
      const long long row = (b * d.Hq + h) * d.Lq + qi;
      const A inv = l == (A)0 ? (A)0 : (A)1 / l;
)" + per_column("DV", Sp::store("out", "row * @DV@ + c", "acc[u] * inv"), "      ") + R"(      if (t == 0) ((A*)d.lse)[row] = l == (A)0 ? neg_inf : m + log(l);
    }
  }
)",
                               common);
  ks.captured = int(c.captured_ranks.size());
  const auto f = fields(c.captured_ranks);
  const size_t a = sizeof(A);
  if (cfg.tensor_cores)
    ks.forward = assemble(cfg.entry + "_forward", f, fill(prologue + mma_forward_body(fwd_pair.code, fwd_pair.score.var), common),
                          cfg.forward_threads(), 2 * size_t(BR * (D + 8) + BC * (D + 8) + BC * (DV + 8)), cuda::kMma);
  else
    ks.forward = assemble(cfg.entry + "_forward", f, fwd, cfg.forward_threads(), a * size_t(fwd_shared.elements));

  // delta and store_dq: grid-stride loops.
  ks.delta = assemble(cfg.entry + "_delta", f,
                      fill(prologue + cuda::detail::grid_stride_loop("row", "(d.B * d.Hq * d.Lq)", R"(    const long long qi = row % d.Lq, h = row / d.Lq % d.Hq, b = row / (d.Lq * d.Hq);
    A s = 0;
    for (int c = 0; c < @DV@; ++c)
      s += )" + Sp::load("dout", "b * d.dout_stride[0] + h * d.dout_stride[1] + qi * d.dout_stride[2] + c") + " * " +
                                                                                         Sp::load("out", "row * @DV@ + c") + R"(;
    ((A*)d.delta)[row] = s - (d.dlse ? ((const A*)d.dlse)[row] : (A)0);
)"),
                           common),
                      0, 0);
  ks.store_dq = assemble(cfg.entry + "_store_dq", f,
                         fill(prologue + cuda::detail::grid_stride_loop("i", "(d.B * d.Hq * d.Lq * @D@)",
                                                                        "    " + Sp::store("dq", "i", "((const A*)d.dq_acc)[i]") + "\n"),
                              common),
                         0, 0);

  // Backward.
  c.vars = 0;
  c.captured_ranks.clear();
  const PairCode bwd_pair = pair_code(score_mod, bm.mask_mod, c, cfg.tensor_cores ? "              " : "          ");
  c.indent = cfg.tensor_cores ? "                " : "            ";
  cuda_mod::backward(score_mod, bwd_pair.score, "dsp", c);
  const std::string grad_code = c.body;
  if (cfg.tensor_cores) {
    const int64_t BRB = mma_backward_rows(D, DV, cfg.block_q);
    std::vector<std::pair<std::string, std::string>> values = common;
    values.insert(values.end(), {{"BRB", cat(BRB)}, {"SLD16", cat(BC + 8)}, {"TO16", round_function<T>()}});
    ks.backward = assemble(cfg.entry + "_backward", f,
                           fill(prologue + mma_backward_body(bwd_pair.code, bwd_pair.score.var, grad_code), values),
                           cfg.backward_threads(),
                           a * size_t(2 * BRB) + 2 * size_t(BC * (D + 8) + BC * (DV + 8) + BRB * (D + 8) + BRB * (DV + 8) + BRB * (BC + 8)),
                           cuda::kMma);
    check_shared_memory(ks, D, DV, BR, BC);
    return ks;
  }
  const SharedArrays bwd_shared = shared_arrays({{"Ks", BC * QLD}, {"Vs", BC * VLD}, {"Qs", BR * QLD}, {"dOs", BR * VLD},
                                                  {"Ps", BR * SLD}, {"dSs", BR * SLD}, {"lse_s", BR}, {"delta_s", BR}});
  const std::string bwd = fill(prologue + bwd_shared.declarations + R"(  const int kThreads = @BC@ * @TPR@, kc = tid / @TPR@, t = tid % @TPR@;
  const long long group = d.Hq / d.Hkv;
  for (long long tile = blockIdx.x; tile < d.B * d.Hkv * d.kv_tiles; tile += gridDim.x) {
    const long long kt = tile % d.kv_tiles, hk = tile / d.kv_tiles % d.Hkv, b = tile / (d.kv_tiles * d.Hkv);
    const long long k0 = kt * @BC@, kv = k0 + kc;
    const bool key_in = kv < d.Lkv;
    const A pb = (A)b, pkv = (A)kv;
    __syncthreads();
)" + load_kv +
                                   R"(    A dk[@D_PER@], dv[@DV_PER@];
#pragma unroll
    for (int u = 0; u < @D_PER@; ++u) dk[u] = 0;
#pragma unroll
    for (int u = 0; u < @DV_PER@; ++u) dv[u] = 0;
    for (long long h = hk * group; h < (hk + 1) * group; ++h) {
      const A ph = (A)h;
      const long long mask_head = (d.mask_B == 1 ? 0 : b) * d.mask_H + (d.mask_H == 1 ? 0 : h);
      for (long long qt = 0; qt < d.q_tiles; ++qt) {
        const long long q0 = qt * @BR@, rows = (b * d.Hq + h) * d.Lq;
        const unsigned char state = d.mask[(mask_head * d.mask_q_blocks + q0 / d.mask_q_block) * d.mask_kv_blocks + k0 / d.mask_kv_block];
        if (state == 0) continue;
        __syncthreads();
)" + Sp::load_tile("Qs", "@QLD@", "@BR@", D, "q", "h", "q0", "d.Lq") +
                                   Sp::load_tile("dOs", "@VLD@", "@BR@", DV, "dout", "h", "q0", "d.Lq") +
                                   R"(        for (int i = tid; i < @BR@; i += kThreads) {
          const bool in = q0 + i < d.Lq;
          lse_s[i] = in ? ((const A*)d.lse)[rows + q0 + i] : neg_inf;
          delta_s[i] = in ? ((const A*)d.delta)[rows + q0 + i] : (A)0;
        }
        __syncthreads();
        for (int i = t; i < @BR@; i += @TPR@) {
          const long long qi = q0 + i;
          A p = 0, ds = 0;
          if (key_in && qi < d.Lq && lse_s[i] != neg_inf) {
          A s = 0;
          for (int c = 0; c < @D@; ++c) s += Qs[i * @QLD@ + c] * Ks[kc * @QLD@ + c];
          const A score = s * (A)d.scale, pq = (A)qi;
)" + bwd_pair.code + "          if (allowed) {\n            p = exp(" + bwd_pair.score.var + R"( - lse_s[i]);
            A dp = 0;
            for (int c = 0; c < @DV@; ++c) dp += dOs[i * @VLD@ + c] * Vs[kc * @VLD@ + c];
            @DS_PRIME@
            A dscore = 0;
)" + grad_code + R"(            ds = dscore * (A)d.scale;@KEEP_PD@
          }
          }
          Ps[i * @SLD@ + kc] = p;
          dSs[i * @SLD@ + kc] = ds;
        }
        __syncthreads();
        for (int i = 0; i < @BR@; ++i) {  // dV += P^T dO, dK += dS^T Q: each of P and dS read once
          const A p = Ps[i * @SLD@ + kc], ds = dSs[i * @SLD@ + kc];
#pragma unroll
          for (int u = 0; u < @DV_PER@; ++u)
            if (t + u * @TPR@ < @DV@) dv[u] += p * dOs[i * @VLD@ + t + u * @TPR@];
#pragma unroll
          for (int u = 0; u < @D_PER@; ++u)
            if (t + u * @TPR@ < @D@) dk[u] += ds * Qs[i * @QLD@ + t + u * @TPR@];
        }
        for (int e = tid; e < @BR@ * @D@; e += kThreads) {
          const int i = e / @D@, c = e % @D@;
          if (q0 + i >= d.Lq) continue;
          A a = 0;
          for (int j = 0; j < @BC@; ++j) a += dSs[i * @SLD@ + j] * Ks[j * @QLD@ + c];
          if (a != (A)0) kiln_atomic_add(&((A*)d.dq_acc)[(rows + q0 + i) * @D@ + c], a);
        }
      }
    }
    if (key_in) {
      const long long row = (b * d.Hkv + hk) * d.Lkv + kv;
)" + per_column("D", Sp::store("dk", "row * @D@ + c", "dk[u]"), "      ") +
                                   per_column("DV", Sp::store("dv", "row * @DV@ + c", "dv[u]"), "      ") + R"(    }
  }
)",
                               common);
  ks.backward = assemble(cfg.entry + "_backward", f, bwd, cfg.backward_threads(), a * size_t(bwd_shared.elements));
  check_shared_memory(ks, D, DV, BR, BC);
  return ks;
}

// The descriptor block of the four kernels: sizes, tensors, the block mask's states (`mask_states`: bm.state
// where the kernels read it, a device copy on a GPU) and the captured tensors of the mask, then of score_mod.
template <Dtype T, class F, class M>
std::vector<uint64_t> flex_descriptor(const FlexKernels& ks, const FlexBuffers<T>& x, const F& score_mod_fn,
                                      const BlockMask<M>& bm, const void* mask_states, const FlexKernelConfig& cfg) {
  using cuda::detail::word_of;
  check<std::invalid_argument>(bm.q_block % cfg.block_q == 0 && bm.kv_block % cfg.block_kv == 0,
                               "flex_attention (CUDA): kernel tiles of ", cfg.block_q, " x ", cfg.block_kv,
                               " must divide the block mask's ", bm.q_block, " x ", bm.kv_block);
  check<std::invalid_argument>(bm.Lq == x.Lq && bm.Lkv == x.Lkv && (bm.B == 1 || bm.B == x.B) && (bm.H == 1 || bm.H == x.Hq),
                               "flex_attention (CUDA): a block mask for B = ", bm.B, ", H = ", bm.H, ", Lq = ", bm.Lq,
                               ", Lkv = ", bm.Lkv, " used with B = ", x.B, ", Hq = ", x.Hq, ", Lq = ", x.Lq, ", Lkv = ", x.Lkv);
  check<std::invalid_argument>(x.Hkv >= 1 && x.Hq % x.Hkv == 0, "flex_attention (CUDA): ", x.Hq, " query heads and ",
                               x.Hkv, " key/value heads (query heads must be a multiple)");
  std::vector<uint64_t> w;
  for (int64_t n : {x.B, x.Hq, x.Hkv, x.Lq, x.Lkv, (x.Lq + cfg.block_q - 1) / cfg.block_q,
                    (x.Lkv + cfg.block_kv - 1) / cfg.block_kv})
    w.push_back(word_of(n));
  const auto rows = [&](const typename FlexBuffers<T>::Rows& r) {
    w.push_back(word_of(static_cast<const void*>(r.data)));
    for (int64_t s : {r.sb, r.sh, r.sl}) w.push_back(word_of(s));
  };
  rows(x.q);
  rows(x.k);
  rows(x.v);
  w.push_back(word_of(static_cast<const void*>(x.out)));
  w.push_back(word_of(static_cast<const void*>(x.lse)));
  w.push_back(word_of(x.scale));
  w.push_back(word_of(mask_states));
  for (int64_t n : {bm.B, bm.H, bm.q_blocks(), bm.kv_blocks(), bm.q_block, bm.kv_block}) w.push_back(word_of(n));
  w.push_back(word_of(static_cast<const void*>(x.error)));
  rows(x.dout);
  for (const void* p : {static_cast<const void*>(x.dlse), static_cast<const void*>(x.delta), static_cast<const void*>(x.dq_acc),
                        static_cast<const void*>(x.dq), static_cast<const void*>(x.dk), static_cast<const void*>(x.dv)})
    w.push_back(word_of(p));
  // The tensor-core kernels store out, dk and dv as pairs of 16-bit elements.
  for (const void* p : {static_cast<const void*>(x.out), static_cast<const void*>(x.dk), static_cast<const void*>(x.dv)})
    check<std::invalid_argument>(!cfg.tensor_cores || reinterpret_cast<uintptr_t>(p) % 4 == 0,
                                 "flex_attention (CUDA): the tensor-core kernels need out, dk and dv 4-byte aligned; ", p,
                                 " is not");
  check<std::invalid_argument>(cfg.dropout == (x.dropout_p > 0), "flex_attention (CUDA): dropout_p = ", x.dropout_p,
                               " with kernels generated ", cfg.dropout ? "with" : "without", " dropout");
  w.push_back(word_of(x.dropout_p > 0 ? 1 / (1 - x.dropout_p) : 1.0));
  for (uint64_t v : {x.dropout_seed, x.dropout_start, uint64_t(philox::bernoulli_threshold(1 - x.dropout_p))})
    w.push_back(word_of(int64_t(v)));
  int slot = 0;
  const int mask_slots = [&] {
    int n = 0;
    auto m = bm.mask_mod;
    m.each_captured([&](auto&) { ++n; });
    return n;
  }();
  const auto add_captured = [&](auto& gather) {
    const auto& t = gather.table;
    w.push_back(word_of(static_cast<const void*>(t.impl().device_bytes())));
    for (int64_t s : t.shape()) w.push_back(word_of(s));
    for (int64_t s : t.strides()) w.push_back(word_of(s));
    const void* grad = nullptr;
    if (slot++ >= mask_slots)
      for (const auto& [table, buffer] : x.captured_grads)
        if (table == t.impl_ptr().get()) grad = buffer;
    w.push_back(word_of(grad));
  };
  auto mask_mod = bm.mask_mod;
  mask_mod.each_captured(add_captured);
  auto score_mod = as_score_mod(score_mod_fn);
  score_mod.each_captured(add_captured);
  check<std::logic_error>(slot == ks.captured, "flex_attention (CUDA): ", slot, " captured tensors, the kernels were "
                                               "generated for ", ks.captured);
  return cuda::detail::checked_block(std::move(w), ks.forward);
}

}  // namespace kiln::attention
