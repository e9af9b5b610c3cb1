#pragma once
// NumPy .npy files (one array): read in format versions 1.0, 2.0 and 3.0, written in 1.0 byte for byte as
// numpy.save writes them (the header padded so that the data starts at a multiple of 64 bytes).
//
//   io::save_npy("x.npy", t);
//   AnyTensor x = io::load_npy("x.npy");
//
// dtypes: '<f4' float, '<f8' double, '<f2' float16, '<i4' int32, '<i8' int64 and '|b1' bool, both ways. NumPy's uint8 and int8
// ('|u1', '|i1': images, masks), which kiln has no dtype for, are read widened to int32, so such a file saved
// back becomes '<i4'. Anything else (big-endian, structured dtypes) and Fortran-order arrays are refused
// with an io::FormatError naming the file; bfloat16 tensors cannot be saved (NumPy has no bfloat16).
#include <array>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io/atomic_file.hpp"
#include "kiln/io/cursor.hpp"
#include "kiln/io/tensor_bytes.hpp"

namespace kiln::io {

namespace detail {

inline constexpr std::array<std::pair<std::string_view, ScalarType>, 6> kNpyDtypes = {{
    {"<f4", ScalarType::Float},
    {"<f8", ScalarType::Double},
    {"<f2", ScalarType::Half},
    {"<i4", ScalarType::Int32},
    {"<i8", ScalarType::Int64},
    {"|b1", ScalarType::Bool},
}};

// A shape as Python writes the tuple: (), (5,), (2, 3).
inline std::string python_tuple(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) out += kiln::detail::cat(i ? ", " : "", shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// The header, a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class NpyHeaderReader : public Cursor {
 public:
  using Cursor::Cursor;

  NpyHeader read() {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<std::vector<int64_t>> shape;
    std::set<std::string> seen;
    expect('{');
    while (!consume('}')) {
      const std::string key = string();
      if (key != "descr" && key != "fortran_order" && key != "shape") fail("unknown key '", key, "'");
      if (!seen.insert(key).second) fail("duplicate key '", key, "'");
      expect(':');
      if (key == "descr") {
        descr = string();
      } else if (key == "shape") {
        shape = tuple();
      } else if (consume("True")) {
        fortran_order = true;
      } else if (consume("False")) {
        fortran_order = false;
      } else {
        fail("expected True or False, found ", next());
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    finish();
    if (!descr || !fortran_order || !shape) fail("the header needs the keys 'descr', 'fortran_order' and 'shape'");
    return {*descr, *fortran_order, *shape};
  }

 private:
  // A Python string literal without escapes (numpy's keys and descrs need none).
  std::string string() {
    skip_space();
    const char quote = pos_ < text_.size() ? text_[pos_] : '\0';
    if (quote != '\'' && quote != '"') fail("expected a string, found ", next());
    const size_t end = text_.find(quote, ++pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    const std::string_view s = text_.substr(pos_, end - pos_);
    if (s.find_first_of("\\\n") != std::string_view::npos) fail("escapes and newlines in strings are not supported");
    pos_ = end + 1;
    return std::string(s);
  }
  // A tuple of integers: (), (5,), (2, 3) or (2, 3,); (5) is an integer in Python, not a tuple.
  std::vector<int64_t> tuple() {
    std::vector<int64_t> values;
    expect('(');
    while (!consume(')')) {
      if (values.size() == size_t(kMaxRank)) fail("shape has more than ", kMaxRank, " dims, kiln's limit");
      values.push_back(integer());
      if (consume(',')) continue;
      if (values.size() == 1) fail("a one-element shape is written (n,), with a comma");
      expect(')');
      break;
    }
    return values;
  }
};

}  // namespace detail

// The array of the .npy file in `bytes`; `source` names it in errors.
inline AnyTensor parse_npy(std::span<const uint8_t> bytes, const std::string& source = "npy buffer") {
  constexpr std::string_view magic = "\x93NUMPY";
  check<FormatError>(bytes.size() >= 10 && std::equal(magic.begin(), magic.end(), bytes.begin(),
                                                      [](char m, uint8_t b) { return uint8_t(m) == b; }),
                     source, ": not a .npy file (it does not start with \\x93NUMPY and a version)");
  const int major = bytes[6], minor = bytes[7];
  check<FormatError>(major >= 1 && major <= 3 && minor == 0, source, ": unsupported .npy format version ", major, ".",
                     minor, " (kiln reads 1.0, 2.0 and 3.0)");
  // 1.0 stores the header length in 2 bytes, 2.0 and 3.0 (3.0: a UTF-8 header) in 4.
  const size_t length_bytes = major == 1 ? 2 : 4, prefix = 8 + length_bytes;
  check<FormatError>(bytes.size() >= prefix, source, ": file ends inside the header length");
  size_t header_size = 0;
  for (size_t i = length_bytes; i-- > 0;) header_size = header_size << 8 | bytes[8 + i];
  check<FormatError>(header_size <= bytes.size() - prefix, source, ": header length ", header_size,
                     " runs past the end (", bytes.size() - prefix, " bytes follow the length)");
  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data()) + prefix, header_size);
  const detail::NpyHeader header = detail::NpyHeaderReader(header_text, source).read();

  check<FormatError>(!header.fortran_order, source,
                     ": Fortran-order arrays are not supported (save a C-order array, e.g. np.ascontiguousarray(a))");
  const int64_t numel = detail::file_numel(header.shape, source, detail::python_tuple(header.shape));
  const auto known = std::find_if(detail::kNpyDtypes.begin(), detail::kNpyDtypes.end(),
                                  [&](const auto& entry) { return entry.first == header.descr; });
  const bool widened = header.descr == "|u1" || header.descr == "|i1";
  check<FormatError>(known != detail::kNpyDtypes.end() || widened, source, ": dtype '", header.descr,
                     "' is not supported (kiln reads '<f4', '<f8', '<f2', '<i4', '<i8', '|b1', and '|u1' and '|i1' as int32)");
  const int64_t esize = widened ? 1 : int64_t(element_size(known->second));
  // Compared by division: numel * element size may overflow, the data's size cannot.
  const std::span<const uint8_t> data = bytes.subspan(prefix + header_size);
  check<FormatError>(data.size() % esize == 0 && int64_t(data.size()) / esize == numel, source, ": the data is ",
                     data.size(), " bytes, but '", header.descr, "' shape ", detail::python_tuple(header.shape),
                     " needs ", numel, " elements of ", esize, " bytes");
  const Shape shape(header.shape);
  if (header.descr == "|u1") return detail::widen<int32_t, uint8_t>(shape, data.data(), std::endian::little);
  if (header.descr == "|i1") return detail::widen<int32_t, int8_t>(shape, data.data(), std::endian::little);
  return detail::tensor_from_bytes(shape, known->second, data.data(), source);
}

// The bytes of a .npy file holding the tensor, as numpy.save writes them.
inline Bytes serialize_npy(const AnyTensor& tensor) {
  check<std::invalid_argument>(tensor.defined(), "serialize_npy: the tensor is undefined");
  check<DTypeError>(tensor.dtype() != ScalarType::BFloat16,
                    "serialize_npy: NumPy has no bfloat16; convert first, e.g. t.to(ScalarType::Float)");
  const AnyTensor t = detail::dense(tensor);
  const auto dtype = std::find_if(detail::kNpyDtypes.begin(), detail::kNpyDtypes.end(),
                                  [&](const auto& entry) { return entry.second == t.dtype(); });
  std::string header = kiln::detail::cat("{'descr': '", dtype->first, "', 'fortran_order': False, 'shape': ",
                                         detail::python_tuple(t.shape().vec()), ", }");
  // numpy leaves room to rewrite the first dim in place with up to 21 digits (GROWTH_AXIS_MAX_DIGITS)...
  if (t.dim() > 0) header.append(21 - std::to_string(t.size(0)).size(), ' ');
  // ...and pads with spaces and a newline so that the data starts at a multiple of 64 (64 more when it already
  // would, as numpy does).
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';

  Bytes out(10 + header.size() + t.nbytes());
  std::memcpy(out.data(), "\x93NUMPY\x01\x00", 8);
  out[8] = uint8_t(header.size());
  out[9] = uint8_t(header.size() >> 8);
  std::memcpy(out.data() + 10, header.data(), header.size());
  if (t.nbytes() > 0) std::memcpy(out.data() + 10 + header.size(), t.data_ptr(), t.nbytes());
  return out;
}

inline AnyTensor load_npy(const std::filesystem::path& path) { return parse_npy(read_file(path), path.string()); }

inline void save_npy(const std::filesystem::path& path, const AnyTensor& tensor) {
  write_file_atomic(path, serialize_npy(tensor));
}

}  // namespace kiln::io
