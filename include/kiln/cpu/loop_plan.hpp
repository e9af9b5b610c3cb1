#pragma once
// The iteration space of an elementwise loop: the shape, and each operand's base pointer and byte
// strides broadcast to it; neighbouring dims that are contiguous for every operand are merged.
// for_each_row walks a flat index range of it row by row (the innermost dim).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kiln/core/tensor_impl.hpp"

namespace kiln {

// The most operands one loop takes (a backward kernel has two per leaf, plus one).
inline constexpr int kMaxOperands = 129;

template <int NOps>
struct LoopPlan {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  char* base[NOps] = {};
  int64_t step[NOps][kMaxRank] = {};  // bytes

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }

  // Drops size-1 dims and merges neighbours that are contiguous for every operand; leaves rank >= 1.
  void coalesce() {
    int r = 0;
    for (int i = 0; i < rank; ++i) {
      if (shape[i] == 1) continue;
      if (r > 0) {
        bool mergeable = true;
        for (int k = 0; k < NOps; ++k) mergeable &= step[k][r - 1] == step[k][i] * shape[i];
        if (mergeable) {
          shape[r - 1] *= shape[i];
          for (int k = 0; k < NOps; ++k) step[k][r - 1] = step[k][i];
          continue;
        }
      }
      shape[r] = shape[i];
      for (int k = 0; k < NOps; ++k) step[k][r] = step[k][i];
      ++r;
    }
    if (r == 0) {
      shape[0] = 1;
      for (int k = 0; k < NOps; ++k) step[k][0] = 0;
      r = 1;
    }
    rank = r;
  }

  // Operand k is t seen with shape `out` (broadcast); a null t leaves it null with zero steps.
  void set_operand(int k, const TensorImpl* t, const Shape& out) {
    if (!t) return;
    base[k] = t->data_bytes();
    const Strides st = broadcast_strides(t->shape, t->strides, out);
    const int64_t es = int64_t(element_size(t->dtype));
    for (int i = 0; i < out.size(); ++i) step[k][i] = st[i] * es;
  }
  void set_shape(const Shape& out) {
    rank = out.size();
    for (int i = 0; i < rank; ++i) shape[i] = out[i];
  }
};

template <class T>
inline compute_t<T> load_value(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return compute_t<T>(v);
}

template <class T, class V>
inline void store_value(char* p, V v) {
  T out;
  if constexpr (std::is_same_v<T, bool>) out = v != V(0);
  else out = T(v);
  std::memcpy(p, &out, sizeof(T));
}

// Per row: the byte pointer of operands 1..N at the row start and their byte steps along it.
template <int N>
struct RowCursor {
  const char* ptr[N > 0 ? N : 1];
  int64_t step[N > 0 ? N : 1];
};

namespace cpu {

// Walks the flat index range [begin, end) of a plan's iteration space (rank, shape, nops operands with
// base pointers and byte steps) row by row, calling row(ptr, col_begin, col_end) with each operand's
// pointer at the start of the row. Not templated on the operand count: compiled once per callback.
template <class RowFn>
void walk_rows(int rank, const int64_t* shape, int nops, char* const* base, const int64_t (*step)[kMaxRank],
               int64_t begin, int64_t end, RowFn&& row) {
  const int inner = rank - 1;
  const int64_t len = shape[inner];
  int64_t idx[kMaxRank] = {};
  int64_t r = begin / len, col = begin % len;
  for (int i = inner - 1; i >= 0; --i) {
    idx[i] = r % shape[i];
    r /= shape[i];
  }
  char* ptr[kMaxOperands];
  for (int k = 0; k < nops; ++k) {
    int64_t o = 0;
    for (int i = 0; i < inner; ++i) o += idx[i] * step[k][i];
    ptr[k] = base[k] ? base[k] + o : nullptr;
  }
  while (begin < end) {
    const int64_t stop = std::min(len, col + (end - begin));
    row(static_cast<char* const*>(ptr), col, stop);
    begin += stop - col;
    col = 0;
    for (int i = inner - 1; i >= 0; --i) {  // odometer step to the next row
      for (int k = 0; k < nops; ++k)
        if (ptr[k]) ptr[k] += step[k][i];
      if (++idx[i] < shape[i]) break;
      for (int k = 0; k < nops; ++k)
        if (ptr[k]) ptr[k] -= step[k][i] * shape[i];
      idx[i] = 0;
    }
  }
}

// The same for a LoopPlan, calling row(operand0_ptr, cursor, col_begin, col_end) with the other
// operands in a RowCursor.
template <int NOps, class RowFn>
void for_each_row(const LoopPlan<NOps>& plan, int64_t begin, int64_t end, RowFn&& row) {
  static_assert(NOps <= kMaxOperands, "kiln: too many operands for one loop");
  RowCursor<NOps - 1> c;
  for (int k = 0; k + 1 < NOps; ++k) c.step[k] = plan.step[k + 1][plan.rank - 1];
  walk_rows(plan.rank, plan.shape, NOps, plan.base, plan.step, begin, end,
            [&](char* const* ptr, int64_t col, int64_t stop) {
              for (int k = 0; k + 1 < NOps; ++k) c.ptr[k] = ptr[k + 1];
              row(ptr[0], c, col, stop);
            });
}

}  // namespace cpu
}  // namespace kiln
