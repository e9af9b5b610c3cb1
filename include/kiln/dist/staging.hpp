#pragma once
// Contiguous buffers for the collectives, without instantiating kiln's expression machinery for every dtype (it
// would cost each translation unit that includes a backend several seconds of compilation): a non-contiguous
// tensor is gathered into a new contiguous buffer element by element as bytes, and scattered back after an
// operation that wrote it; avg divides the contiguous buffer in a plain loop.
#include <cstring>
#include <memory>

#include "kiln/dist/process_group.hpp"

namespace kiln::dist::detail {

// Copies between t's elements (any strides) and `flat` (contiguous, t's logical order), as bytes.
inline void strided_copy(const TensorImpl& t, char* flat, bool into_flat) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const size_t esize = element_size(t.dtype);
  const int rank = int(t.shape.size());
  std::vector<int64_t> index(size_t(rank), 0);
  char* base = t.data_bytes();
  int64_t offset = 0;  // in elements, of index
  for (int64_t k = 0; k < n; ++k) {
    char* elem = base + offset * int64_t(esize);
    if (into_flat) std::memcpy(flat + k * int64_t(esize), elem, esize);
    else std::memcpy(elem, flat + k * int64_t(esize), esize);
    for (int d = rank - 1; d >= 0; --d) {  // next index, last dim fastest
      if (++index[size_t(d)] < t.shape[d]) {
        offset += t.strides[d];
        break;
      }
      offset -= (t.shape[d] - 1) * t.strides[d];
      index[size_t(d)] = 0;
    }
  }
}

// A contiguous buffer for t: t itself, or a contiguous copy whose values go back into t after the operation when
// the operation writes t.
struct Staged {
  AnyTensor user, buffer;
  bool copy_back = false;
};
inline Staged stage(const AnyTensor& t, bool writes) {
  if (t.is_contiguous()) return {t, t, false};
  AnyTensor flat = kiln::empty(t.shape(), t.dtype());
  strided_copy(*t.impl_ptr(), static_cast<char*>(flat.data_ptr()), true);
  return {t, flat, writes};
}

template <class T>
void divide_all(void* data, int64_t n, int divisor) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < n; ++i) p[i] = T(compute_t<T>(p[i]) / compute_t<T>(divisor));
}

// After MPI wrote the buffer: divide for avg, copy back into a non-contiguous tensor, bump the tensor's version
// (MPI wrote its memory behind the version counter's back: saved-tensor checks must see the change).
inline void written(const Staged& s, ReduceOp op, int size) {
  if (op == ReduceOp::avg) {
    void* p = s.buffer.data_ptr();
    const int64_t n = s.buffer.numel();
    switch (s.buffer.dtype()) {
      case ScalarType::Float: divide_all<float>(p, n, size); break;
      case ScalarType::Double: divide_all<double>(p, n, size); break;
      case ScalarType::BFloat16: divide_all<bfloat16>(p, n, size); break;
      case ScalarType::Half: divide_all<float16>(p, n, size); break;
      default: break;  // rejected before the operation
    }
  }
  if (s.copy_back) strided_copy(*s.user.impl_ptr(), static_cast<char*>(s.buffer.data_ptr()), false);
  if (s.user.numel() > 0) s.user.impl_ptr()->storage->bump_version();
}

}  // namespace kiln::dist::detail
