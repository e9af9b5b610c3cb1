#pragma once
// The iteration space of an elementwise loop: the shape, and each operand's base pointer and byte
// strides broadcast to it; neighbouring dims that are contiguous for every operand are merged.
// for_each_row walks a flat index range of it row by row (the innermost dim).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kiln/core/tensor_impl.hpp"

namespace kiln {

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

// Walks the flat index range [begin, end) of the plan's iteration space row by row and calls
// row(operand0_ptr, cursor, col_begin, col_end) with pointers at the start of each row.
template <int NOps, class RowFn>
void for_each_row(const LoopPlan<NOps>& plan, int64_t begin, int64_t end, RowFn&& row) {
  const int inner = plan.rank - 1;
  const int64_t len = plan.shape[inner];
  int64_t idx[kMaxRank] = {};
  int64_t r = begin / len, col = begin % len;
  for (int i = inner - 1; i >= 0; --i) {
    idx[i] = r % plan.shape[i];
    r /= plan.shape[i];
  }
  char* dst = plan.base[0];
  RowCursor<NOps - 1> c;
  for (int k = 0; k + 1 < NOps; ++k) {
    c.ptr[k] = plan.base[k + 1];
    c.step[k] = plan.step[k + 1][inner];
  }
  auto offset = [&](int k) {
    int64_t o = 0;
    for (int i = 0; i < inner; ++i) o += idx[i] * plan.step[k][i];
    return o;
  };
  dst += offset(0);
  for (int k = 1; k < NOps; ++k) c.ptr[k - 1] += offset(k);
  while (begin < end) {
    const int64_t stop = std::min(len, col + (end - begin));
    row(dst, c, col, stop);
    begin += stop - col;
    col = 0;
    for (int i = inner - 1; i >= 0; --i) {  // odometer step to the next row
      dst += plan.step[0][i];
      for (int k = 1; k < NOps; ++k) c.ptr[k - 1] += plan.step[k][i];
      if (++idx[i] < plan.shape[i]) break;
      dst -= plan.step[0][i] * plan.shape[i];
      for (int k = 1; k < NOps; ++k) c.ptr[k - 1] -= plan.step[k][i] * plan.shape[i];
      idx[i] = 0;
    }
  }
}

}  // namespace cpu
}  // namespace kiln
