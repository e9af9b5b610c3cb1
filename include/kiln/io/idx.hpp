#pragma once
// IDX files (MNIST, Fashion-MNIST, EMNIST), plain or gzip-compressed (told apart by gzip's 1f 8b magic). Needs
// zlib: link with -lz.
//
//   Tensor<float> x = io::read_idx_images("train-images-idx3-ubyte.gz");    // [60000, 1, 28, 28], in [0, 1]
//   Tensor<int64_t> y = io::read_idx_labels("train-labels-idx1-ubyte.gz");  // [60000]
//
// Layout: two zero bytes, a type byte, a dim count; each dim as a big-endian uint32; then the elements,
// big-endian, in C order. Types: 0x08 ubyte, 0x09 sbyte, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64.
// read_idx returns the integer types widened to int32 (kiln has no 8- or 16-bit dtypes), float32 as float and
// float64 as double. The elements must fill the rest of the file exactly; every fault is an io::FormatError
// naming the file.
#include <array>
#include <filesystem>
#include <span>
#include <string>

#include "kiln/io/atomic_file.hpp"
#include "kiln/io/gzip.hpp"
#include "kiln/io/tensor_bytes.hpp"

namespace kiln::io {

namespace detail {

struct IdxType {
  uint8_t code;
  const char* name;
  int64_t size;
};
inline constexpr std::array<IdxType, 6> kIdxTypes = {{
    {0x08, "ubyte", 1},
    {0x09, "sbyte", 1},
    {0x0b, "int16", 2},
    {0x0c, "int32", 4},
    {0x0d, "float32", 4},
    {0x0e, "float64", 8},
}};

// An IDX array's element type, shape and element bytes (pointing into the parsed buffer).
struct IdxArray {
  const IdxType* type;
  Shape shape;
  const uint8_t* data;
};

inline IdxArray parse_idx_layout(std::span<const uint8_t> bytes, const std::string& source) {
  check<FormatError>(bytes.size() >= 4, source, ": ", bytes.size(), " bytes is too short for the IDX magic number");
  check<FormatError>(bytes[0] == 0 && bytes[1] == 0, source, ": not an IDX file (the magic number starts with ",
                     int(bytes[0]), " ", int(bytes[1]), ", not 0 0)");
  const auto type =
      std::find_if(kIdxTypes.begin(), kIdxTypes.end(), [&](const IdxType& t) { return t.code == bytes[2]; });
  check<FormatError>(type != kIdxTypes.end(), source, ": unknown IDX element type ", int(bytes[2]),
                     " (known: 8 ubyte, 9 sbyte, 11 int16, 12 int32, 13 float32, 14 float64)");
  const int rank = bytes[3];
  check<FormatError>(rank <= kMaxRank, source, ": ", rank, " dims, more than kiln's limit of ", kMaxRank);
  const size_t prefix = 4 + 4 * size_t(rank);
  check<FormatError>(bytes.size() >= prefix, source, ": the file ends inside its ", rank, " dims");
  std::vector<int64_t> dims;
  for (const uint8_t* p = bytes.data() + 4; p != bytes.data() + prefix; p += 4)
    dims.push_back(int64_t(p[0]) << 24 | int64_t(p[1]) << 16 | int64_t(p[2]) << 8 | int64_t(p[3]));
  const Shape shape(dims);
  const int64_t numel = file_numel(dims, source, kiln::detail::cat(shape));
  // Compared by division: numel * element size may overflow, the data's size cannot.
  const int64_t data_size = int64_t(bytes.size() - prefix);
  check<FormatError>(data_size % type->size == 0 && data_size / type->size == numel, source, ": the data is ",
                     data_size, " bytes, but ", type->name, " shape ", shape, " needs ", numel, " elements of ",
                     type->size, " bytes");
  return {&*type, shape, bytes.data() + prefix};
}

// use(IdxArray) on the IDX file in `bytes`, decompressed first if it is gzip data.
template <class F>
auto with_idx(std::span<const uint8_t> bytes, const std::string& source, F&& use) {
  Bytes inflated;
  if (is_gzip(bytes)) {
    inflated = gunzip(bytes, source);
    bytes = inflated;
  }
  return use(parse_idx_layout(bytes, source));
}

}  // namespace detail

// The array of the IDX file (plain or gzip) in `bytes`; `source` names it in errors.
inline AnyTensor parse_idx(std::span<const uint8_t> bytes, const std::string& source = "IDX buffer") {
  return detail::with_idx(bytes, source, [](const detail::IdxArray& a) -> AnyTensor {
    constexpr auto big = std::endian::big;
    switch (a.type->code) {
      case 0x08: return detail::widen<int32_t, uint8_t>(a.shape, a.data, big);
      case 0x09: return detail::widen<int32_t, int8_t>(a.shape, a.data, big);
      case 0x0b: return detail::widen<int32_t, int16_t>(a.shape, a.data, big);
      case 0x0c: return detail::widen<int32_t, int32_t>(a.shape, a.data, big);
      case 0x0d: return detail::widen<float, float>(a.shape, a.data, big);
      default: return detail::widen<double, double>(a.shape, a.data, big);
    }
  });
}

inline AnyTensor read_idx(const std::filesystem::path& path) { return parse_idx(read_file(path), path.string()); }

// An IDX file of ubyte images [N, rows, cols] as floats in [0, 1] (the bytes divided by 255), shaped
// [N, 1, rows, cols]: one channel, ready for conv2d.
inline Tensor<float> read_idx_images(const std::filesystem::path& path) {
  return detail::with_idx(read_file(path), path.string(), [&](const detail::IdxArray& a) {
    check<FormatError>(a.type->code == 0x08 && a.shape.size() == 3, path.string(),
                       ": expected ubyte images of shape [N, rows, cols], found ", a.type->name, " of shape ", a.shape);
    Tensor<float> images = empty<float>({a.shape[0], 1, a.shape[1], a.shape[2]});
    float* out = images.data_ptr();
    for (int64_t i = 0; i < images.numel(); ++i) out[i] = float(a.data[i]) / 255.0f;
    return images;
  });
}

// An IDX file of ubyte labels [N] as int64 (the class indices cross_entropy takes).
inline Tensor<int64_t> read_idx_labels(const std::filesystem::path& path) {
  return detail::with_idx(read_file(path), path.string(), [&](const detail::IdxArray& a) {
    check<FormatError>(a.type->code == 0x08 && a.shape.size() == 1, path.string(),
                       ": expected ubyte labels of shape [N], found ", a.type->name, " of shape ", a.shape);
    return detail::widen<int64_t, uint8_t>(a.shape, a.data, std::endian::big);
  });
}

}  // namespace kiln::io
