#pragma once
// CUDA reductions of an expression along dims (sum, mean, amax, amin, argmax, argmin), fused as on the CPU: sum(a * b, 1) reads
// a and b once and never materializes the product. Floating sums accumulate in double and integer sums in int64,
// as tensor/reduce.hpp does; amax/amin propagate NaN. Three shapes of work:
//   - a thread per output element (a grid-stride loop over the kept dims' elements) walking its reduced elements
//     in order: neighbouring threads read neighbouring elements when a kept dim is the innermost;
//   - a warp per output (ReductionVariant::warp_rows) when the innermost dim is reduced: lane l takes the reduced
//     elements l, l + 32, ..., so a warp reads a row's consecutive elements together, and the lanes' accumulators
//     are folded in lane order through shared memory (on an H200, a thread per row of a [16384, 16384] sum read
//     0.12 of the copy bandwidth);
//   - a split reduction (split_reduction_kernels) when the outputs are too few to fill the device: a warp per
//     chunk of an output's elements, then a warp per output folding its chunks.
// Each is fixed by the shape, so a reduction gives the same result every run.
//
// The descriptor block: n | size[kept] | m | rsize[reduced] | out | out_stride[kept] | in[j] |
// stride[j][kept + reduced] | scalar[s], each operand's strides permuted to the kept dims, then the reduced.
#include <algorithm>
#include <optional>

#include "kiln/cuda/descriptor.hpp"

namespace kiln::cuda {

// ArgMax/ArgMin: the index along the one reduced dim of the first extreme (a NaN counts as the extreme).
enum class Reduce { Sum, Mean, Max, Min, ArgMax, ArgMin, Prod };

struct ReductionVariant {
  int kept = 0;     // dims of the output
  int reduced = 0;  // dims reduced over
  bool index32 = true;
  bool warp_rows = false;  // a warp per output (blocks of kWarpRowThreads), else a thread per output

  std::string key() const {
    return kiln::detail::cat("reduce", kept, "x", reduced, index32 ? "_i32" : "_i64", warp_rows ? "_w" : "");
  }
};

// The block size of warp_rows kernels: 8 outputs per block.
inline constexpr int kWarpRowThreads = 256;

namespace detail {

// The accumulator's declaration, its step with value v at reduced element r, and the result.
template <Reduce R, class T>
struct Accumulator {
  static constexpr bool floating = is_floating_v<T>;
  static constexpr bool sum = R == Reduce::Sum || R == Reduce::Mean;
  static constexpr bool product = R == Reduce::Prod;  // (accumulated as sums are: double, or int64 for integers)
  static constexpr bool arg = R == Reduce::ArgMax || R == Reduce::ArgMin;
  static constexpr bool max = R == Reduce::Max || R == Reduce::ArgMax;
  using Result = std::conditional_t<arg || ((R == Reduce::Sum || product) && std::is_integral_v<T>), int64_t, T>;
  static std::string type() {
    if constexpr (sum || product) return floating ? "double" : "long long";
    else return std::string(compute_name<T>());
  }
  static std::string init() {
    if constexpr (sum) return "0";
    else if constexpr (product) return "1";
    else if constexpr (floating) return max ? "__uint_as_float(0xff800000u)" : "__uint_as_float(0x7f800000u)";
    else return cat("kiln_int_range<", compute_name<T>(), ">::", max ? "lo" : "hi");
  }
  static std::string declare() {
    return cat("    ", type(), " acc = ", init(), ";\n", arg ? "    long long arg = 0;\n" : "");
  }
  static std::string step(const std::string& v) {
    if constexpr (sum) return cat("acc += (", type(), ")", v, ";");
    if constexpr (product) return cat("acc *= (", type(), ")", v, ";");
    // A NaN, once met, stays (acc != acc); a NaN value takes over. Ties keep the first.
    const std::string better = cat(v, max ? " > acc" : " < acc");
    const std::string take = cat("{ acc = ", v, ";", arg ? " arg = r;" : "", " }");
    if constexpr (floating) return cat("if (acc == acc && (", v, " != ", v, " || ", better, ")) ", take);
    else return cat("if (", better, ") ", take);
  }
  static std::string result() {
    if constexpr (R == Reduce::Mean) return "acc / (double)d.m";
    else if constexpr (arg) return "arg";
    else return "acc";
  }
  // Folds a lane's or a chunk's partial accumulator v (and its index parg) into acc: sums and products add or
  // multiply; extremes keep the NaN rule; argmax/argmin take an equal value from a lower index too (lanes take
  // interleaved elements, so a later lane can hold an earlier index).
  static std::string combine(const std::string& v) {
    if constexpr (sum) return cat("acc += ", v, ";");
    if constexpr (product) return cat("acc *= ", v, ";");
    if constexpr (!arg) return step(v);
    const std::string better = cat(v, max ? " > acc" : " < acc");
    const std::string take = cat("{ acc = ", v, "; arg = parg; }");
    if constexpr (floating)
      return cat("if (acc != acc ? (", v, " != ", v, " && parg < arg) : (", v, " != ", v, " || ", better, " || (", v,
                 " == acc && parg < arg))) ", take);
    else return cat("if (", better, " || (", v, " == acc && parg < arg)) ", take);
  }
};


// One pass over the reduced elements of output element o (coordinates c0.. set): e evaluated at each, then
// step(value). Every pass numbers leaves and scalars alike, so passes share the descriptor.
// (first, stride and end: a warp's lane l takes elements l, l + 32, ... of its row or chunk.)
inline void start_rows(const ReductionVariant& v, int out_rank, Emitter& em) {
  em = Emitter{};
  em.dense = false;
  em.rank = v.kept + v.reduced;
  em.out_rank = out_rank;
}
template <Expression E, class Step>
std::string row_pass(const E& e, const ReductionVariant& v, int out_rank, Step&& step, Emitter& em,
                     const std::string& first = "0", const std::string& stride = "1",
                     const std::string& end = "(kiln_index)d.m") {
  start_rows(v, out_rank, em);
  em.body = coordinates("r", v.kept, v.reduced, "rsize");
  const TapeVars root = emit(e, em);
  em.line(step(root.var, em));
  return cat("    for (kiln_index r = ", first, "; r < ", end, "; r += ", stride, ") {\n", em.body, "    }\n");
}

// A warp_rows pass's lanes: lane l of an active warp starts at element l and steps by 32 (an inactive warp, past
// the last output, walks nothing but still meets the block's barriers).
inline constexpr const char* kLaneFirst = "(active ? (kiln_index)lane : (kiln_index)d.m)";
inline constexpr const char* kLaneStride = "(kiln_index)32";

// A second per-thread variable that a warp_fold carries along with the first: argmax's index, softmax's sum.
struct FoldCompanion {
  std::string name, type, init, lane_value;  // lane_value: its name in the combine code, beside v
};

// Folds each warp's 32 values of `var` (of type `type`; with a companion, also the companion) in lane order, from
// `init`, by `combine` (code over the next lane's value v and its companion), and leaves the warp's result in var
// (and the companion) of every lane. Through shared memory, between barriers that every thread of the block
// reaches.
inline std::string warp_fold(const std::string& var, const std::string& type, const std::string& init,
                             const std::string& combine, const std::optional<FoldCompanion>& with = std::nullopt) {
  const std::string values = cat("((", type, "*)kiln_smem)");
  const std::string seconds = with ? cat("((", with->type, "*)kiln_smem + blockDim.x)") : "";
  const auto second = [&](const std::string& line) { return with ? line : std::string(); };
  return cat("    ", values, "[threadIdx.x] = ", var, ";\n",
             second(cat("    ", seconds, "[threadIdx.x] = ", with ? with->name : "", ";\n")),
             "    __syncthreads();\n",
             "    if (lane == 0u) {\n",
             "      ", var, " = ", init, ";\n", second(cat("      ", with ? with->name : "", " = ", with ? with->init : "", ";\n")),
             "      for (unsigned l = 0; l < 32u; ++l) {\n",
             "        const ", type, " v = ", values, "[threadIdx.x + l];\n",
             second(cat("        const ", with ? with->type : "", " ", with ? with->lane_value : "", " = ", seconds,
                        "[threadIdx.x + l];\n")),
             "        ", combine, "\n      }\n",
             "      ", values, "[threadIdx.x] = ", var, ";\n",
             second(cat("      ", seconds, "[threadIdx.x] = ", with ? with->name : "", ";\n")),
             "    }\n",
             "    __syncthreads();\n",
             "    ", var, " = ", values, "[warp * 32u];\n",
             second(cat("    ", with ? with->name : "", " = ", seconds, "[warp * 32u];\n")),
             "    __syncthreads();\n");
}

// Accumulator A's warp_fold of acc (and argmax/argmin's index).
template <class A>
std::string fold_accumulator() {
  return warp_fold("acc", A::type(), A::init(), A::combine("v"),
                   A::arg ? std::optional<FoldCompanion>({"arg", "long long", "0", "parg"}) : std::nullopt);
}

// The program around `body` (inside the loop over output elements o, coordinates c0.. of the kept dims set);
// outputs have strides over the first out_rank coordinates.
// A warp_rows kernel (RowLoop::Warps) runs a warp per output: its warps take the outputs group * 8 + warp, its loop
// over groups the same in every thread of a block (the body meets at barriers), with lane, warp and active set. A
// split reduction's partial kernel (RowLoop::ChunkWarps) runs a warp per (output, chunk) item: o and s set, and
// chunk_end, the end of chunk s's elements [s * chunk, chunk_end).
enum class RowLoop { Outputs, Warps, ChunkWarps };
inline void assemble_rows(KernelSource& k, const ReductionVariant& v, int out_rank, const std::string& body,
                          bool split = false, RowLoop loop = RowLoop::Outputs) {
  k.outputs = 1;
  k.variant = {false, v.kept, v.index32};
  const size_t kept = size_t(v.kept), all = size_t(v.kept + v.reduced), in = size_t(k.inputs);
  std::vector<Field> fields = {{"long long n", 1},
                               {cat("long long size[", kept, "]"), kept},
                               {"long long m", 1},
                               {cat("long long rsize[", v.reduced, "]"), size_t(v.reduced)},
                               {"void* out[1]", 1},
                               {cat("long long out_stride[1][", out_rank, "]"), size_t(out_rank)},
                               {cat("const void* in[", in, "]"), in},
                               {cat("long long stride[", in, "][", all, "]"), in * all},
                               {cat("kiln_scalar scalar[", k.scalars, "]"), size_t(k.scalars)}};
  if (split) fields.insert(fields.end(), {{"long long splits", 1}, {"void* partial", 1}, {"void* partial_arg", 1}});
  const std::string rows = coordinates("o", 0, v.kept, "size") + body;
  if (loop == RowLoop::Outputs) return assemble(k, fields, grid_stride_loop("o", "d.n", rows));
  k.block_threads = kWarpRowThreads;
  k.shared_bytes = size_t(kWarpRowThreads) * 16;  // a value and an index per thread
  const bool chunks = loop == RowLoop::ChunkWarps;
  const std::string count = chunks ? "(kiln_index)(d.n * d.splits)" : "(kiln_index)d.n";
  const std::string item =
      chunks ? cat("    const kiln_index item = group * warps + (kiln_index)warp;\n",
                   "    const bool active = item < ", count, ";\n",
                   "    const kiln_index o = item / (kiln_index)d.splits, s = item % (kiln_index)d.splits;\n",
                   "    const kiln_index chunk = ((kiln_index)d.m + (kiln_index)d.splits - 1) / (kiln_index)d.splits;\n",
                   "    const kiln_index chunk_end = min((s + 1) * chunk, (kiln_index)d.m);\n")
             : cat("    const kiln_index o = group * warps + (kiln_index)warp;\n", "    const bool active = o < ", count, ";\n");
  assemble(k, fields,
           cat("  extern __shared__ __align__(16) unsigned char kiln_smem[];\n",
               "  const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u;\n",
               "  const kiln_index warps = (kiln_index)(blockDim.x / 32u);\n",
               "  for (kiln_index group = blockIdx.x; group * warps < ", count, "; group += gridDim.x) {\n", item, rows,
               "  }\n"));
}

}  // namespace detail

// How many chunks each output's reduced elements split into: one when there are outputs enough to fill a GPU or
// elements too few to share; otherwise up to 8192 chunks in all (a warp each: an H200 holds 132 x 64 warps at
// once), each chunk at least 256 elements. Fixed for a shape, so a reduction gives the same result every run.
inline int64_t reduction_splits(int64_t outputs, int64_t reduced) {
  constexpr int64_t kWarps = 8192, kMinChunk = 256;
  if (outputs >= kWarps / 4 || reduced < 2 * kMinChunk) return 1;
  return std::clamp<int64_t>(reduced / kMinChunk, 1, kWarps / std::max<int64_t>(outputs, 1));
}

// The two kernels of a split reduction (they share reduction_descriptor's block and three more words: splits,
// partial, partial_arg), each launched with blocks of kWarpRowThreads: a warp per (output, chunk), then a warp per
// output.
struct SplitReduction {
  KernelSource partial, combine;
};

// The kernel reducing e over `v.reduced` dims into an output over `v.kept` dims.
template <Reduce R, Expression E>
KernelSource reduction_kernel(const E& e, const ReductionVariant& v, std::string entry = "kiln_reduce") {
  using T = typename E::value_type;
  using A = detail::Accumulator<R, T>;
  using Out = typename A::Result;
  static_assert(R != Reduce::Mean || is_floating_v<T>, "kiln: mean needs a floating-point expression");
  check<std::invalid_argument>(!A::arg || v.reduced == 1, "kiln::cuda: argmax/argmin reduce one dim, not ", v.reduced);
  const bool warps = v.warp_rows;
  detail::Emitter em;
  const std::string pass =
      detail::row_pass(e, v, v.kept, [](const std::string& x, detail::Emitter&) { return A::step(x); }, em,
                       warps ? detail::kLaneFirst : "0", warps ? detail::kLaneStride : "1");
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = em.leaves;
  k.scalars = em.scalars;
  const std::string result = detail::cat("(", detail::compute_name<Out>(), ")(", A::result(), ")");
  const std::string store = detail::store_element<Out>("d.out[0]", em.out_offset(0), result);
  if (warps)
    detail::assemble_rows(k, v, v.kept,
                          A::declare() + pass + detail::fold_accumulator<A>() +
                              "    if (active && lane == 0u) { " + store + " }\n",
                          false, detail::RowLoop::Warps);
  else detail::assemble_rows(k, v, v.kept, A::declare() + pass + "    " + store + "\n");
  return k;
}

// The split form of reduction_kernel<R>(e, v): a warp reduces chunk s of output o, the elements
// [s * chunk, (s + 1) * chunk) with chunk = ceil(m / splits), its lanes interleaved, into partial[o * splits + s]
// (and its index into partial_arg); then a warp per output folds its chunks (lane l takes chunks l, l + 32, ...).
// On an H200 a thread per chunk of interleaved elements (this kernel before) took 320 us for a batch norm's
// statistics over [64, 64, 28, 28]: too few threads, each waiting on its loads one by one.
template <Reduce R, Expression E>
SplitReduction split_reduction_kernels(const E& e, const ReductionVariant& v, const std::string& entry = "kiln_reduce") {
  using T = typename E::value_type;
  using A = detail::Accumulator<R, T>;
  using Out = typename A::Result;
  check<std::invalid_argument>(!A::arg || v.reduced == 1, "kiln::cuda: argmax/argmin reduce one dim, not ", v.reduced);
  const std::string type = A::type();
  const std::string fold = detail::fold_accumulator<A>();
  SplitReduction kernels;
  detail::Emitter em;
  const std::string pass =
      detail::row_pass(e, v, v.kept, [](const std::string& x, detail::Emitter&) { return A::step(x); }, em,
                       "(active ? s * chunk + (kiln_index)lane : (kiln_index)d.m)", detail::kLaneStride, "chunk_end");
  kernels.partial.entry = entry + "_partial";
  kernels.partial.inputs = em.leaves;
  kernels.partial.scalars = em.scalars;
  detail::assemble_rows(kernels.partial, v, v.kept,
                        A::declare() + pass + fold +
                            detail::cat("    if (active && lane == 0u) {\n      ((", type, "*)d.partial)[item] = acc;\n",
                                        A::arg ? "      ((long long*)d.partial_arg)[item] = arg;\n" : "", "    }\n"),
                        true, detail::RowLoop::ChunkWarps);
  kernels.combine.entry = entry + "_combine";
  kernels.combine.inputs = em.leaves;
  kernels.combine.scalars = em.scalars;
  detail::start_rows(v, v.kept, em);
  const std::string result = detail::cat("(", detail::compute_name<Out>(), ")(", A::result(), ")");
  detail::assemble_rows(
      kernels.combine, v, v.kept,
      A::declare() +
          detail::cat("    for (long long s = active ? (long long)lane : d.splits; s < d.splits; s += 32) {\n",
                      "      const ", type, " v = ((const ", type, "*)d.partial)[o * d.splits + s];\n",
                      A::arg ? "      const long long parg = ((const long long*)d.partial_arg)[o * d.splits + s];\n" : "",
                      "      ", A::combine("v"), "\n    }\n", fold, "    if (active && lane == 0u) { ",
                      detail::store_element<Out>("d.out[0]", em.out_offset(0), result), " }\n"),
      true, detail::RowLoop::Warps);
  return kernels;
}

// softmax (or, with kLog, log_softmax) of e along the `v.reduced` dim, as torch's: per row the max and, in the same
// pass, the sum of exp(x - max) in double (rescaled by exp(old max - new max), in double, when the max grows), then
// exp(x - max) / sum (or x - max - log(sum)); a row whose max is not finite gives NaN. The output has e's shape; e
// is evaluated in each of the two passes rather than stored. (Two passes instead of a max pass and a sum pass: the
// row is read twice, not three times.)
template <bool kLog, Expression E>
KernelSource softmax_kernel(const E& e, const ReductionVariant& v, std::string entry = "kiln_softmax") {
  using T = typename E::value_type;
  static_assert(is_floating_v<T>, "kiln: softmax needs a floating-point expression");
  const std::string ct(detail::compute_name<T>());
  using Max = detail::Accumulator<Reduce::Max, T>;
  const int all = v.kept + v.reduced;
  const bool warps = v.warp_rows;
  const char* first = warps ? detail::kLaneFirst : "0";
  const char* stride = warps ? detail::kLaneStride : "1";
  // Takes value x, weighing `weight` (1 for an element, a lane's sum when folding lanes), into (acc, sum): a NaN
  // stays; a larger x rescales the sum to its max; a -inf adds nothing (an all -inf start leaves the sum 0, not
  // NaN); otherwise the sum grows by `add` (x's exp(x - acc), times its weight).
  const auto online = [&](const std::string& x, const std::string& weight, const std::string& add) {
    return detail::cat("if (acc == acc) { if (", x, " != ", x, ") acc = ", x, "; else if (", x, " > acc) { sum = sum * exp((double)acc - (double)",
                       x, ") + ", weight, "; acc = ", x, "; } else if (", x, " > ", Max::init(), ") sum += ", add, "; }");
  };
  detail::Emitter em;
  std::string body = "    " + ct + " acc = " + Max::init() + ";\n    double sum = 0;\n";
  body += detail::row_pass(  // (an element's exp in its compute type, as the CPU's; only the rescaling in double)
      e, v, all,
      [&](const std::string& x, detail::Emitter&) { return online(x, "1.0", detail::cat("(double)exp(", x, " - acc)")); },
      em, first, stride);
  if (warps)
    body += detail::warp_fold("acc", ct, Max::init(), online("v", "lane_sum", "lane_sum * exp((double)v - (double)acc)"),
                              detail::FoldCompanion{"sum", "double", "0", "lane_sum"});
  body += "    const " + ct + " row_max = (acc - acc == 0) ? acc : (" + ct + ")__uint_as_float(0x7fc00000u);\n";
  body += detail::row_pass(
      e, v, all,
      [&](const std::string& x, detail::Emitter& pass) {
        const std::string value = kLog ? detail::cat("(", ct, ")((", x, " - row_max) - (", ct, ")log(sum))")
                                       : detail::cat("(", ct, ")(exp(", x, " - row_max) / (", ct, ")sum)");
        return detail::store_element<T>("d.out[0]", pass.out_offset(0), value);
      },
      em, first, stride);
  KernelSource k;
  k.entry = std::move(entry);
  k.inputs = em.leaves;
  k.scalars = em.scalars;
  detail::assemble_rows(k, v, all, body, false, warps ? detail::RowLoop::Warps : detail::RowLoop::Outputs);
  return k;
}

// The variant for reducing an expression e... of shape `in` over `dims`: 32-bit indices when every element index
// and every offset its leaves reach fits; a warp per output when the innermost dim is reduced and each output has
// a warp's worth of elements at least.
template <Expression... E>
ReductionVariant reduction_variant(const Shape& in, const Dims& dims, const E&... e) {
  const int reduced = dims.size();
  int64_t m = 1;
  for (int64_t d : dims) m *= in[int(d)];
  const bool innermost = std::find(dims.begin(), dims.end(), int64_t(in.size() - 1)) != dims.end();
  return {in.size() - reduced, reduced, detail::fits_index32(detail::leaf_reach(numel_of(in), e...)), innermost && m >= 32};
}

// The block for reduction_kernel (out: strides over the kept dims) or softmax_kernel (out: e's shape); a split
// reduction's kernels take `tail` after it (splits, partial, partial_arg).
template <Expression E>
std::vector<uint64_t> reduction_descriptor(const E& e, const KernelSource& k, const Shape& in, const Dims& dims,
                                           const ArrayRef& out, const std::vector<uint64_t>& tail = {}) {
  std::vector<int> kept, reduced;
  for (int i = 0; i < in.size(); ++i)
    (std::find(dims.begin(), dims.end(), int64_t(i)) != dims.end() ? reduced : kept).push_back(i);
  // Strides over the input's dims in the kernel's order: the kept dims, then the reduced.
  const auto permuted = [&](const Strides& s, std::vector<uint64_t>& w) {
    for (int i : kept) w.push_back(detail::word_of(s[i]));
    for (int i : reduced) w.push_back(detail::word_of(s[i]));
  };
  std::vector<uint64_t> w;
  int64_t n = 1, m = 1;
  for (int i : kept) n *= in[i];
  for (int i : reduced) m *= in[i];
  w.push_back(detail::word_of(n));
  for (int i : kept) w.push_back(detail::word_of(in[i]));
  w.push_back(detail::word_of(m));
  for (int i : reduced) w.push_back(detail::word_of(in[i]));
  w.push_back(detail::word_of(out.data));
  if (out.strides.size() == in.size()) permuted(out.strides, w);  // softmax: out has the input's shape
  else
    for (int j = 0; j < out.strides.size(); ++j) w.push_back(detail::word_of(out.strides[j]));
  std::vector<Strides> strides;
  for_each_leaf(e, [&](const auto& leaf) {
    w.push_back(detail::word_of(static_cast<const void*>(leaf.impl->device_bytes())));
    strides.push_back(broadcast_strides(leaf.impl->shape, leaf.impl->strides, in));
  });
  for (const Strides& s : strides) permuted(s, w);
  detail::append_scalars(w, e);
  w.insert(w.end(), tail.begin(), tail.end());
  return detail::checked_block(std::move(w), k);
}

}  // namespace kiln::cuda
