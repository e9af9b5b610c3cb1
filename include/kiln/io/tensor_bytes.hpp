#pragma once
// Tensors to and from the raw element bytes of file formats: C order, little-endian, bool as one byte 0 or 1.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "kiln/io/format_error.hpp"
#include "kiln/kiln.hpp"

namespace kiln::io::detail {

// kiln's tensors hold their elements in the machine's byte order, and the file formats store little-endian.
static_assert(std::endian::native == std::endian::little, "kiln::io: the file formats need a little-endian machine");

// The tensor's elements in C order in host memory: the tensor itself when contiguous on the host, else a contiguous
// copy (a CUDA tensor's copied to the host, as torch.save does). The copy records no autograd graph: it is only read.
inline AnyTensor dense(const AnyTensor& t) {
  NoGradGuard no_grad;
  return t.visit([](const auto& typed) { return AnyTensor(typed.cpu().contiguous()); });
}

// The element count of a shape read from a file. Refuses negative sizes, and sizes whose product overflows int64
// even when the tensor is empty: kiln computes the strides of a [0, n, m] tensor from n and m all the same.
// `printed` is the shape as the format writes it, for the message.
inline int64_t file_numel(const std::vector<int64_t>& shape, std::string_view what, std::string_view printed) {
  int64_t numel = 1, nonzero = 1;
  for (const int64_t d : shape) {
    check<FormatError>(d >= 0, what, ": shape ", printed, " has a negative entry");
    check<FormatError>(!__builtin_mul_overflow(nonzero, std::max<int64_t>(d, 1), &nonzero), what, ": shape ", printed,
                       " is too large (its nonzero sizes multiply past int64)");
    numel *= d;  // at most `nonzero`
  }
  return numel;
}

// A new tensor of `shape` and `dtype` holding a copy of the numel * element_size bytes at `bytes`. Bool bytes
// other than 0 and 1 are refused: they are no valid C++ bool. `what` starts the error message.
inline AnyTensor tensor_from_bytes(const Shape& shape, ScalarType dtype, const uint8_t* bytes, std::string_view what) {
  AnyTensor t = empty(shape, dtype);
  if (dtype == ScalarType::Bool)
    for (int64_t i = 0; i < t.numel(); ++i)
      check<FormatError>(bytes[i] <= 1, what, ": bool element ", i, " is byte ", int(bytes[i]), ", not 0 or 1");
  if (t.nbytes() > 0) std::memcpy(t.data_ptr(), bytes, t.nbytes());
  return t;
}

// Reads element i of an array of File values stored in `order` (formats that kiln widens on reading: NumPy's
// uint8 and int8, IDX's big-endian types).
template <class File>
File load_element(const uint8_t* bytes, int64_t i, std::endian order) {
  std::array<uint8_t, sizeof(File)> raw;
  std::memcpy(raw.data(), bytes + i * int64_t(sizeof(File)), sizeof(File));
  if (order != std::endian::native) std::reverse(raw.begin(), raw.end());
  return std::bit_cast<File>(raw);
}

// A new tensor of T holding the numel(shape) File values at `bytes`, each converted to T.
template <Dtype T, class File>
Tensor<T> widen(const Shape& shape, const uint8_t* bytes, std::endian order) {
  Tensor<T> t = empty<T>(shape);
  T* out = t.data_ptr();
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = T(load_element<File>(bytes, i, order));
  return t;
}

}  // namespace kiln::io::detail
