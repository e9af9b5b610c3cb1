#pragma once
// Basic indexing as libtorch's t.index({...}): integers select (drop a dim), Slice(start, stop, step) keeps a
// dim, None inserts a size-1 dim, Ellipsis ("...") stands for the dims not named, and true / false insert a
// dim of size 1 / 0. The result is a view, so an assignment to it writes through:
//   kiln::index(t, {Slice(), 0}) = expr;        // as t.index_put_({Slice(), 0}, expr)
// Tensor indices (gather) are not basic indexing and are not taken here.
#include <concepts>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string_view>
#include <vector>

#include "kiln/tensor/views.hpp"

namespace kiln {

namespace indexing {

// libtorch spells None as c10::nullopt, so Slice(None, 3) and {None} both read as in Python.
inline constexpr std::nullopt_t None = std::nullopt;

struct EllipsisIndexType {
  explicit constexpr EllipsisIndexType() = default;
};
inline constexpr EllipsisIndexType Ellipsis{};

// start:stop:step with open ends as std::nullopt (None); a positive step, as PyTorch requires.
class Slice {
 public:
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start_(start.value_or(0)), stop_(stop.value_or(std::numeric_limits<int64_t>::max())), step_(step.value_or(1)) {}
  int64_t start() const { return start_; }
  int64_t stop() const { return stop_; }
  int64_t step() const { return step_; }

 private:
  int64_t start_, stop_, step_;
};

class TensorIndex {
 public:
  enum class Kind { None, Ellipsis, Integer, Boolean, Slice };

  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}  // NOLINT: implicit, as libtorch's
  TensorIndex(EllipsisIndexType) : kind_(Kind::Ellipsis) {}  // NOLINT
  TensorIndex(const char* s) : kind_(Kind::Ellipsis) {  // NOLINT: "..." as in libtorch
    check(s != nullptr && std::string_view(s) == "...", "index: expected \"...\" as a string index, got \"",
          s ? s : "(null)", "\"");
  }
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  TensorIndex(I i) : kind_(Kind::Integer), integer_(int64_t(i)) {}  // NOLINT
  TensorIndex(bool b) : kind_(Kind::Boolean), boolean_(b) {}  // NOLINT
  TensorIndex(Slice s) : kind_(Kind::Slice), slice_(s) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_ellipsis() const { return kind_ == Kind::Ellipsis; }
  bool is_integer() const { return kind_ == Kind::Integer; }
  bool is_boolean() const { return kind_ == Kind::Boolean; }
  bool is_slice() const { return kind_ == Kind::Slice; }
  int64_t integer() const { return integer_; }
  bool boolean() const { return boolean_; }
  const Slice& slice() const { return slice_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  bool boolean_ = false;
  Slice slice_;
};

// As libtorch prints them: 0, None, ..., true, 1:None:2 (an open stop prints None).
inline std::ostream& operator<<(std::ostream& out, const TensorIndex& i) {
  switch (i.kind()) {
    case TensorIndex::Kind::None: return out << "None";
    case TensorIndex::Kind::Ellipsis: return out << "...";
    case TensorIndex::Kind::Integer: return out << i.integer();
    case TensorIndex::Kind::Boolean: return out << (i.boolean() ? "true" : "false");
    case TensorIndex::Kind::Slice: break;
  }
  out << i.slice().start() << ':';
  if (i.slice().stop() == std::numeric_limits<int64_t>::max()) out << "None";
  else out << i.slice().stop();
  return out << ':' << i.slice().step();
}

}  // namespace indexing

namespace detail {

inline std::string index_list(const indexing::TensorIndex* idx, size_t n) {
  std::ostringstream s;
  s << '{';
  for (size_t i = 0; i < n; ++i) s << (i ? ", " : "") << idx[i];
  return s.str() + "}";
}

template <Dtype T>
Tensor<T> apply_indices(Tensor<T> result, const indexing::TensorIndex* idx, size_t n) {
  using Kind = indexing::TensorIndex::Kind;
  const int rank = result.dim();
  int consumed = 0, ellipses = 0;  // consumed: indices that stand for one of the tensor's dims
  for (size_t i = 0; i < n; ++i) {
    consumed += idx[i].is_integer() || idx[i].is_slice();
    ellipses += idx[i].is_ellipsis();
  }
  check<ShapeError>(ellipses <= 1, "index: an index can have only one ellipsis (\"...\"), got ", index_list(idx, n));
  check<ShapeError>(consumed <= rank, "index: too many indices for a tensor of ", rank, " dims (shape ",
                    result.shape(), "): ", index_list(idx, n), " indexes ", consumed);
  int d = 0;    // the dim of `result` the next index applies to
  int src = 0;  // the same dim counted in the input tensor, for messages
  for (size_t k = 0; k < n; ++k) {
    const indexing::TensorIndex& i = idx[k];
    switch (i.kind()) {
      case Kind::Integer: {
        const int64_t size = result.size(d), at = i.integer();
        if (at < -size || at >= size)
          throw std::out_of_range(cat("index: index ", at, " is out of range for dim ", src, " of size ", size));
        result = result.select(d, at);
        ++src;
        break;
      }
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        check(s.step() > 0, "index: slice step must be positive, got ", s.step(), " at dim ", src);
        result = result.slice(d, s.start(), s.stop(), s.step());
        ++d, ++src;
        break;
      }
      case Kind::None:
      case Kind::Boolean:
        result = result.unsqueeze(d);
        if (i.is_boolean() && !i.boolean()) result = result.slice(d, 0, 0);
        ++d;
        break;
      case Kind::Ellipsis:
        d += rank - consumed;
        src += rank - consumed;
        break;
    }
  }
  return result;
}

}  // namespace detail

// t.index({...}): a view of t.
template <Dtype T>
Tensor<T> index(const Tensor<T>& t, std::initializer_list<indexing::TensorIndex> indices) {
  return detail::apply_indices(t, indices.begin(), indices.size());
}
template <Dtype T>
Tensor<T> index(const Tensor<T>& t, const std::vector<indexing::TensorIndex>& indices) {
  return detail::apply_indices(t, indices.data(), indices.size());
}

// t.index_put_({...}, value): writes value (a tensor, an expression or a number, broadcast) into the view.
template <Dtype T, OperandOrScalar S>
Tensor<T> index_put_(const Tensor<T>& t, std::initializer_list<indexing::TensorIndex> indices, const S& value) {
  index(t, indices).copy_(value);
  return t;
}

template <Dtype T>
Tensor<T> Tensor<T>::index(std::initializer_list<indexing::TensorIndex> indices) const {
  return kiln::index(*this, indices);
}

template <Dtype T>
template <OperandOrScalar S>
Tensor<T>& Tensor<T>::index_put_(std::initializer_list<indexing::TensorIndex> indices, const S& value) {
  kiln::index(*this, indices).copy_(value);
  return *this;
}

}  // namespace kiln
