#pragma once
// The driver of every elementwise kernel, shared by all expression trees.
//
// A kernel (cpu/eval.hpp, autograd/fused.hpp) is generated per tree and knows one thing: run the
// tree over contiguous arrays, each operand in the kernel's own type (the SIMD lane type, or the
// op's compute type), n elements at a time with n a multiple of its granule (a vector's lanes).
// The driver does everything that depends on layout: it points the kernel straight into memory
// where an operand is contiguous and already of the kernel's type, and otherwise stages it through
// a small buffer (strided, broadcast and converted operands: bool, bfloat16, float16); a row's tail goes
// through buffers padded to a full vector. So each tree is compiled once, whatever layouts it
// meets, and a value never depends on where it sits in the array.
#include <hwy/base.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/cpu/loop_plan.hpp"
#include "kiln/cpu/parallel.hpp"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

// How the kernel sees one operand: the dtype in memory, the dtype of the kernel's array, and
// whether the kernel writes it. Operand 0 of a plan is the first output.
struct OperandType {
  ScalarType stored = ScalarType::Float;
  ScalarType kernel = ScalarType::Float;
  bool output = false;
};

// ptr[k] points at operand k's contiguous array of n elements of its kernel type (null for an
// operand the caller left out, e.g. a gradient nobody needs).
using RowKernel = void (*)(const void* context, char* const* ptr, int64_t n);

struct KernelDesc {
  RowKernel fn = nullptr;
  int64_t granule = 1;  // n is always a multiple of it
};

inline constexpr int64_t kStageBlock = 256;  // elements per staged block

namespace detail {

template <class To, class From>
void convert_run(char* dst, int64_t dstep, const char* src, int64_t sstep, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * sstep, sizeof(From));
    To out;
    if constexpr (std::is_same_v<To, bool>) out = compute_t<From>(v) != compute_t<From>(0);
    else out = To(compute_t<From>(v));
    std::memcpy(dst + i * dstep, &out, sizeof(To));
  }
}

// Eight 16-bit floats to eight floats (widen) and back (narrow) with x86 instructions where the target has
// them (x86-64-v3 and up): float16 through F16C, bfloat16 through AVX2 integer operations. Each gives the same
// bits as the type's scalar conversion (round to nearest even; a NaN keeps its sign and top payload bits and
// comes out quiet).
template <class H>
struct Vector8 {
  static constexpr bool ok = false;
  static void widen(const char*, char*) {}
  static void narrow(const char*, char*) {}
};
#ifdef __F16C__
template <>
struct Vector8<float16> {
  static constexpr bool ok = true;
  static void widen(const char* src, char* dst) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst), _mm256_cvtph_ps(h));
  }
  static void narrow(const char* src, char* dst) {
    const __m256 f = _mm256_loadu_ps(reinterpret_cast<const float*>(src));
    const __m128i h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h);
  }
};
#endif
#ifdef __AVX2__
template <>
struct Vector8<bfloat16> {
  static constexpr bool ok = true;
  static void widen(const char* src, char* dst) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_slli_epi32(h, 16));
  }
  static void narrow(const char* src, char* dst) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // 16-bit values in 32-bit lanes
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
};
#endif

// A 16-bit float type H to float (kToFloat) or float to H over a run: dense runs 8 at a time through
// Vector8 where it exists (5-15x faster), the rest element by element.
template <class H, bool kToFloat>
void half_run(char* dst, int64_t dstep, const char* src, int64_t sstep, int64_t n) {
  int64_t i = 0;
  if constexpr (Vector8<H>::ok) {
    if (dstep == (kToFloat ? 4 : 2) && sstep == (kToFloat ? 2 : 4)) {
      for (; i + 8 <= n; i += 8) {
        if constexpr (kToFloat) Vector8<H>::widen(src + i * 2, dst + i * 4);
        else Vector8<H>::narrow(src + i * 4, dst + i * 2);
      }
    }
  }
  if constexpr (kToFloat) convert_run<float, H>(dst + i * dstep, dstep, src + i * sstep, sstep, n - i);
  else convert_run<H, float>(dst + i * dstep, dstep, src + i * sstep, sstep, n - i);
}

template <size_t Bytes>
void copy_run(char* dst, int64_t dstep, const char* src, int64_t sstep, int64_t n) {
  // The two common shapes get loops the compiler vectorizes: a broadcast operand (a bias over the rows of
  // a feature map: one value for the whole run) and a dense run on both sides.
  using Word = std::conditional_t<Bytes == 1, uint8_t,
                                  std::conditional_t<Bytes == 2, uint16_t, std::conditional_t<Bytes == 4, uint32_t, uint64_t>>>;
  if (dstep == int64_t(Bytes) && sstep == 0) {
    Word v;
    std::memcpy(&v, src, Bytes);
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * Bytes, &v, Bytes);
    return;
  }
  if (dstep == int64_t(Bytes) && sstep == int64_t(Bytes)) return void(std::memcpy(dst, src, size_t(n) * Bytes));
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dstep, src + i * sstep, Bytes);
}

// Calls f(T{}) for the numeric dtype t (bool, bfloat16 and float16 are handled by the callers).
template <class F>
void with_number_type(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float: return f(float{});
    case ScalarType::Double: return f(double{});
    case ScalarType::Int32: return f(int32_t{});
    case ScalarType::Int64: return f(int64_t{});
    default: throw std::logic_error("kiln: internal error: no staged conversion for this dtype");
  }
}

}  // namespace detail

// n elements from src (dtype `from`, byte step sstep) to dst (dtype `to`, byte step dstep). The
// pairs a kernel needs: the same dtype, bfloat16 <-> float, float16 <-> float, and bool <-> a number.
KILN_DECL void convert(ScalarType to, char* dst, int64_t dstep, ScalarType from, const char* src, int64_t sstep,
                       int64_t n);

// This thread's staging memory, at least `bytes`, 64-byte aligned; reused across calls.
KILN_DECL char* stage_memory(size_t bytes);

// Runs the kernel over n elements: operand k < nops starts at at[k] with byte step step[k].
KILN_DECL void run_segment(const KernelDesc& kernel, const void* context, const OperandType* types, int nops,
                           char* const* at, const int64_t* step, int64_t n);

// Runs the kernel over a plan's whole iteration space, rows split over threads; cost is the kernel's
// work per element (for the threading threshold). Compiled once, whatever the operand count.
KILN_DECL void run_plan(int rank, const int64_t* shape, int nops, char* const* base, const int64_t (*step)[kMaxRank],
                        const OperandType* types, const KernelDesc& kernel, const void* context, int64_t cost);

template <int NOps>
void run_plan(const LoopPlan<NOps>& plan, const OperandType* types, const KernelDesc& kernel, const void* context,
              int64_t cost) {
  static_assert(NOps <= kMaxOperands, "kiln: too many operands for one kernel");
  run_plan(plan.rank, plan.shape, NOps, plan.base, plan.step, types, kernel, context, cost);
}

#if KILN_HEADER_DEFINITIONS
KILN_DECL void convert(ScalarType to, char* dst, int64_t dstep, ScalarType from, const char* src, int64_t sstep,
                       int64_t n) {
  using detail::convert_run;
  if (to == from) {
    switch (element_size(to)) {
      case 1: return detail::copy_run<1>(dst, dstep, src, sstep, n);
      case 2: return detail::copy_run<2>(dst, dstep, src, sstep, n);
      case 4: return detail::copy_run<4>(dst, dstep, src, sstep, n);
      default: return detail::copy_run<8>(dst, dstep, src, sstep, n);
    }
  }
  using detail::half_run;
  using F = ScalarType;
  if (to == F::Float && from == F::BFloat16) return half_run<bfloat16, true>(dst, dstep, src, sstep, n);
  if (to == F::BFloat16 && from == F::Float) return half_run<bfloat16, false>(dst, dstep, src, sstep, n);
  if (to == F::Float && from == F::Half) return half_run<float16, true>(dst, dstep, src, sstep, n);
  if (to == F::Half && from == F::Float) return half_run<float16, false>(dst, dstep, src, sstep, n);
  if (from == ScalarType::Bool)
    return detail::with_number_type(to, [&](auto t) { convert_run<decltype(t), bool>(dst, dstep, src, sstep, n); });
  if (to == ScalarType::Bool)
    return detail::with_number_type(from, [&](auto t) { convert_run<bool, decltype(t)>(dst, dstep, src, sstep, n); });
  throw std::logic_error("kiln: internal error: no staged conversion between these dtypes");
}

KILN_DECL char* stage_memory(size_t bytes) {
  thread_local std::vector<char> memory;
  if (memory.size() < bytes + 64) memory.resize(bytes + 64);
  const auto p = reinterpret_cast<uintptr_t>(memory.data());
  return memory.data() + ((64 - p % 64) % 64);
}

namespace detail {
// Whether an output's elements [first, first + count) share memory with another operand's, every operand contiguous
// (an output that is also a leaf read at the same position, as in x = x * 2: recomputing there would read results).
inline bool output_overlaps(const OperandType* types, int nops, char* const* at, int64_t first, int64_t count) {
  const auto range = [&](int k) {
    const auto base = reinterpret_cast<uintptr_t>(at[k]);
    const auto size = uintptr_t(element_size(types[k].stored));
    return std::pair{base + uintptr_t(first) * size, base + uintptr_t(first + count) * size};
  };
  for (int k = 0; k < nops; ++k) {
    if (!at[k] || !types[k].output) continue;
    const auto [begin, end] = range(k);
    for (int i = 0; i < nops; ++i) {
      if (i == k || !at[i]) continue;
      const auto [other_begin, other_end] = range(i);
      if (begin < other_end && other_begin < end) return true;
    }
  }
  return false;
}
}  // namespace detail

KILN_DECL void run_segment(const KernelDesc& kernel, const void* context, const OperandType* types, int nops,
                           char* const* at, const int64_t* step, int64_t n) {
  bool direct[kMaxOperands];
  int staged = 0;
  for (int k = 0; k < nops; ++k) {
    direct[k] = !at[k] || (types[k].stored == types[k].kernel && step[k] == int64_t(element_size(types[k].stored)));
    staged += !direct[k];
  }
  char* stage = staged ? stage_memory(size_t(nops) * kStageBlock * 8) : nullptr;
  char* ptr[kMaxOperands];
  auto run = [&](int64_t b, int64_t count, int64_t len, bool all_staged, char* memory, int64_t stride) {
    for (int k = 0; k < nops; ++k) {
      if (!at[k]) {
        ptr[k] = nullptr;
      } else if (direct[k] && !all_staged) {
        ptr[k] = at[k] + b * step[k];
      } else {
        ptr[k] = memory + k * stride;
        const int64_t ks = int64_t(element_size(types[k].kernel));
        if (len > count) std::memset(ptr[k], 0, size_t(len * ks));
        if (!types[k].output) convert(types[k].kernel, ptr[k], ks, types[k].stored, at[k] + b * step[k], step[k], count);
      }
    }
    kernel.fn(context, ptr, len);
    for (int k = 0; k < nops; ++k) {
      if (at[k] && types[k].output && (!direct[k] || all_staged))
        convert(types[k].stored, at[k] + b * step[k], step[k], types[k].kernel, ptr[k],
                int64_t(element_size(types[k].kernel)), count);
    }
  };
  alignas(64) char tail[kMaxOperands][HWY_MAX_BYTES];
  // Blocks bound the staging memory; with nothing to stage, one block is the whole run.
  const int64_t block = staged ? kStageBlock : std::max<int64_t>(n, 1);
  for (int64_t b = 0; b < n; b += block) {
    const int64_t m = std::min(block, n - b);
    const int64_t full = m - m % kernel.granule;
    if (full > 0) run(b, full, full, false, stage, kStageBlock * 8);
    if (full == m) continue;
    // The tail is shorter than one vector. With every operand in place and a full vector before it, the kernel
    // runs once more over the last full vector, which ends where the tail does: it recomputes a few elements
    // from the same inputs instead of copying every operand through a zero-padded buffer (a backward kernel of
    // six leaves has 13 operands to clear and copy, about 5% of a 1000-float chain's forward and backward).
    if (!staged && full > 0 && !detail::output_overlaps(types, nops, at, b + m - kernel.granule, kernel.granule))
      run(b + m - kernel.granule, kernel.granule, kernel.granule, false, nullptr, 0);
    else
      run(b + full, m - full, kernel.granule, true, &tail[0][0], HWY_MAX_BYTES);
  }
}

KILN_DECL void run_plan(int rank, const int64_t* shape, int nops, char* const* base, const int64_t (*step)[kMaxRank],
                        const OperandType* types, const KernelDesc& kernel, const void* context, int64_t cost) {
  int64_t total = 1;
  for (int i = 0; i < rank; ++i) total *= shape[i];
  parallel_for(total, cost, 64, [&](int64_t begin, int64_t end) {
    walk_rows(rank, shape, nops, base, step, begin, end, [&](char* const* ptr, int64_t j, int64_t stop) {
      char* at[kMaxOperands];
      int64_t row_step[kMaxOperands];
      for (int k = 0; k < nops; ++k) {
        row_step[k] = step[k][rank - 1];
        at[k] = ptr[k] ? ptr[k] + j * row_step[k] : nullptr;
      }
      run_segment(kernel, context, types, nops, at, row_step, stop - j);
    });
  });
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln::cpu
