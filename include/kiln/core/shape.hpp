#pragma once
// Dims: a fixed-capacity list of up to kMaxRank int64 values, used for shapes and strides;
// broadcasting and checked element counts.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

#include "kiln/core/config.hpp"
#include "kiln/core/error.hpp"

namespace kiln {

class Dims {
 public:
  constexpr Dims() = default;
  Dims(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  explicit Dims(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }
  static Dims filled(int rank, int64_t value) {
    Dims d;
    d.resize(rank, value);
    return d;
  }

  int size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  int64_t& operator[](int i) { return data_[i]; }
  int64_t operator[](int i) const { return data_[i]; }
  int64_t* begin() { return data_; }
  int64_t* end() { return data_ + rank_; }
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + rank_; }
  int64_t back() const { return data_[rank_ - 1]; }

  void push_back(int64_t v) {
    check<ShapeError>(rank_ < kMaxRank, "kiln: tensors have at most ", kMaxRank, " dims");
    data_[rank_++] = v;
  }
  void resize(int rank, int64_t fill = 0) {
    check<ShapeError>(rank >= 0 && rank <= kMaxRank, "kiln: tensors have at most ", kMaxRank,
                      " dims, got ", rank);
    for (int i = rank_; i < rank; ++i) data_[i] = fill;
    rank_ = rank;
  }
  void insert(int pos, int64_t v) {
    push_back(0);
    for (int i = rank_ - 1; i > pos; --i) data_[i] = data_[i - 1];
    data_[pos] = v;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < rank_; ++i) data_[i] = data_[i + 1];
    --rank_;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  template <class It>
  void assign(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  int64_t data_[kMaxRank] = {};
  int rank_ = 0;
};

using Shape = Dims;
using Strides = Dims;

KILN_DECL std::ostream& operator<<(std::ostream& out, const Dims& d);

// Wraps a possibly negative dim index into [0, rank); throws std::out_of_range naming the op.
KILN_DECL int wrap_dim(int64_t dim, int rank, const char* op);

// Number of elements; throws if a dim is negative or the count overflows int64.
KILN_DECL int64_t checked_numel(const Shape& shape, const char* op);

inline int64_t numel_of(const Shape& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;  // the others may not multiply in int64
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Row-major strides. Only an empty tensor can have dims whose product passes int64 (checked_numel refuses
// the others); its strides address nothing, and saturate instead of overflowing.
inline Strides contiguous_strides(const Shape& shape) {
  Strides st = Strides::filled(shape.size(), 1);
  for (int i = shape.size() - 2; i >= 0; --i)
    if (__builtin_mul_overflow(st[i + 1], std::max<int64_t>(shape[i + 1], 1), &st[i]))
      st[i] = std::numeric_limits<int64_t>::max();
  return st;
}

// Where a view's elements are: shape, strides and offset in elements.
struct ViewLayout {
  Shape shape;
  Strides strides;
  int64_t offset = 0;
};

// NumPy broadcasting of two shapes; op names the operation in the error.
KILN_DECL Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Strides that read a tensor of (shape, strides) as if it had shape `to` (0 on broadcast dims).
inline Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& to) {
  Strides out = Strides::filled(to.size(), 0);
  const int lead = to.size() - shape.size();
  for (int i = 0; i < shape.size(); ++i) out[lead + i] = shape[i] == 1 ? 0 : strides[i];
  return out;
}

#if KILN_HEADER_DEFINITIONS
KILN_DECL std::ostream& operator<<(std::ostream& out, const Dims& d) {
  out << '[';
  for (int i = 0; i < d.size(); ++i) out << (i ? ", " : "") << d[i];
  return out << ']';
}

KILN_DECL int wrap_dim(int64_t dim, int rank, const char* op) {
  const int64_t r = std::max(rank, 1);  // a scalar accepts dim 0 and -1, as PyTorch
  if (dim < -r || dim >= r)
    throw std::out_of_range(detail::cat(op, ": dim ", dim, " is out of range for a tensor of ",
                                        rank, " dims (expected in [", -r, ", ", r - 1, "])"));
  return int(dim < 0 ? dim + r : dim);
}

KILN_DECL int64_t checked_numel(const Shape& shape, const char* op) {
  for (int64_t s : shape) check<ShapeError>(s >= 0, op, ": negative dimension ", s, " in shape ", shape);
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;  // whatever the other dims hold
  int64_t n = 1;
  for (int64_t s : shape) {
    if (n > std::numeric_limits<int64_t>::max() / s)
      throw OutOfMemoryError(detail::cat(op, ": shape ", shape, " has more elements than int64 holds"));
    n *= s;
  }
  return n;
}

KILN_DECL Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int rank = std::max(a.size(), b.size());
  Shape out = Shape::filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.size()), ib = i - (rank - b.size());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(detail::cat(op, ": shapes ", a, " and ", b, " cannot be broadcast"));
    out[i] = da == 1 ? db : da;
  }
  return out;
}
#endif  // KILN_HEADER_DEFINITIONS

}  // namespace kiln
