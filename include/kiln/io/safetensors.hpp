#pragma once
// safetensors files (Hugging Face's format), read and written as Python's safetensors does.
//
//   io::save_safetensors("model.safetensors", {{"w", w}, {"b", b}}, {{"epoch", "3"}});
//   std::map<std::string, AnyTensor> loaded = io::load_safetensors("model.safetensors");
//   Tensor<float> w2 = loaded.at("w").as<float>();
//
// A module's state_dict converts with its iterators: std::map<std::string, AnyTensor>(sd.begin(), sd.end()).
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON header, then the data buffer:
//   {"__metadata__": {"k": "v"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
// Offsets count from the start of the data buffer; elements are little-endian and in C order.
// kiln's dtypes are F32 (float), F64 (double), I32, I64, BOOL, BF16 and F16; files with other dtypes are refused.
//
// The writer's bytes are those of Python's safetensors: tensors laid out by element type, widest first (so that
// every tensor is aligned when the file is memory-mapped), then by name; the header lists them in that order,
// metadata first, and is padded with spaces to a multiple of 8 bytes. Views are written as contiguous copies.
//
// The reader checks everything before it trusts it, and refuses what Python's safetensors refuses: a header past
// the end or over 100 MB, malformed JSON, duplicate keys, unknown dtypes, negative or overflowing shapes, data
// offsets outside the buffer or not matching the shape, tensors that overlap, and bytes that belong to no tensor.
// Errors are io::FormatError naming the file (or the buffer) and the fault. Loading copies each tensor out of
// the whole file read into memory, so it needs about twice the file's size.
#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/io/atomic_file.hpp"
#include "kiln/io/json.hpp"
#include "kiln/io/tensor_bytes.hpp"

namespace kiln::io {

struct SafetensorsFile {
  std::map<std::string, AnyTensor> tensors;
  std::map<std::string, std::string> metadata;
};

namespace detail {

// kiln's dtypes under their safetensors names, in the order Python's safetensors lays them out (widest first).
inline constexpr std::array<std::pair<std::string_view, ScalarType>, 7> kSafetensorsDtypes = {{
    {"I64", ScalarType::Int64},
    {"F64", ScalarType::Double},
    {"F32", ScalarType::Float},
    {"I32", ScalarType::Int32},
    {"BF16", ScalarType::BFloat16},
    {"F16", ScalarType::Half},
    {"BOOL", ScalarType::Bool},
}};

inline size_t safetensors_dtype_index(ScalarType dtype) {
  return size_t(std::find_if(kSafetensorsDtypes.begin(), kSafetensorsDtypes.end(),
                             [&](const auto& entry) { return entry.second == dtype; }) -
                kSafetensorsDtypes.begin());
}

// Python's safetensors (MAX_HEADER_SIZE) refuses larger headers, so a larger one is a corrupt file.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// One tensor's header entry, checked against itself and the size of the data buffer.
struct SafetensorsEntry {
  std::string name;
  ScalarType dtype{};
  Shape shape;
  int64_t begin = 0, end = 0;
};

inline SafetensorsEntry read_safetensors_entry(JsonReader& json, const std::string& name, size_t data_size,
                                               const std::string& source) {
  const std::string what = kiln::detail::cat(source, ": tensor ", quoted(name));
  std::optional<std::string> dtype;
  std::optional<std::vector<int64_t>> shape, offsets;
  json.object([&](const std::string& field) {
    if (field == "dtype") {
      dtype = json.string();
    } else if (field == "shape" || field == "data_offsets") {
      std::vector<int64_t>& values = (field == "shape" ? shape : offsets).emplace();
      const size_t most = field == "shape" ? size_t(kMaxRank) : 2;
      json.array([&] {
        if (values.size() == most) json.fail("tensor ", quoted(name), ": ", field, " has more than ", most, " entries");
        values.push_back(json.integer());
      });
    } else {
      json.fail("tensor ", quoted(name), ": unknown field ", quoted(field));
    }
  });
  for (const auto& [present, field] : {std::pair{dtype.has_value(), "dtype"}, std::pair{shape.has_value(), "shape"},
                                       std::pair{offsets.has_value(), "data_offsets"}})
    check<FormatError>(present, what, ": no \"", field, "\"");

  const auto known = std::find_if(kSafetensorsDtypes.begin(), kSafetensorsDtypes.end(),
                                  [&](const auto& entry) { return entry.first == *dtype; });
  check<FormatError>(known != kSafetensorsDtypes.end(), what, ": unsupported dtype ", quoted(*dtype),
                     " (kiln reads F32, F64, I32, I64, BOOL, BF16 and F16)");
  const Shape dims(*shape);
  const int64_t numel = file_numel(*shape, what, kiln::detail::cat(dims));
  check<FormatError>(offsets->size() == 2 && (*offsets)[0] >= 0 && (*offsets)[0] <= (*offsets)[1] &&
                         uint64_t((*offsets)[1]) <= data_size,
                     what, ": data_offsets ", Dims(*offsets), " are not [begin, end] with 0 <= begin <= end <= ",
                     data_size, " (the data buffer's size)");
  const int64_t begin = (*offsets)[0], end = (*offsets)[1];
  // Compared by division: numel * element size may overflow, the span cannot.
  const int64_t span = end - begin, esize = int64_t(element_size(known->second));
  check<FormatError>(span % esize == 0 && span / esize == numel, what, ": data_offsets ", Dims(*offsets), " hold ",
                     span, " bytes, but ", known->first, " shape ", dims, " needs ", numel, " elements of ", esize,
                     " bytes");
  return {name, known->second, dims, begin, end};
}

// The entries, sorted by their offsets, must tile the data buffer: no overlaps and no bytes left over.
inline void check_safetensors_layout(std::vector<SafetensorsEntry>& entries, size_t data_size,
                                     const std::string& source) {
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  int64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : entries) {
    check<FormatError>(e.begin >= covered, source, ": tensors ", quoted(previous ? previous->name : ""), " (bytes [",
                       previous ? previous->begin : 0, ", ", covered, ")) and ", quoted(e.name), " (bytes [", e.begin,
                       ", ", e.end, ")) overlap in the data buffer");
    check<FormatError>(e.begin == covered, source, ": bytes [", covered, ", ", e.begin,
                       ") of the data buffer belong to no tensor");
    covered = e.end;
    previous = &e;
  }
  check<FormatError>(uint64_t(covered) == data_size, source, ": bytes [", covered, ", ", data_size,
                     ") of the data buffer belong to no tensor");
}

}  // namespace detail

// The bytes of a safetensors file holding the tensors and the metadata.
inline Bytes serialize_safetensors(const std::map<std::string, AnyTensor>& tensors,
                                   const std::map<std::string, std::string>& metadata = {}) {
  const auto check_text = [](std::string_view text, const char* what) {
    check<std::invalid_argument>(detail::is_valid_utf8(text), "serialize_safetensors: ", what, " ",
                                 detail::quoted(text), " is not valid UTF-8");
  };
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      check_text(key, "metadata key");
      check_text(value, "metadata value");
      if (header.back() != '{') header += ',';
      detail::append_json_string(header, key);
      header += ':';
      detail::append_json_string(header, value);
    }
    header += '}';
  }

  struct Entry {
    const std::string* name;
    AnyTensor data;
  };
  std::vector<Entry> entries;
  for (const auto& [name, t] : tensors) {
    check<std::invalid_argument>(t.defined(), "serialize_safetensors: tensor ", detail::quoted(name), " is undefined");
    check<std::invalid_argument>(name != "__metadata__",
                                 "serialize_safetensors: \"__metadata__\" names the metadata, it cannot name a tensor");
    check_text(name, "tensor name");
    entries.push_back({&name, detail::dense(t)});
  }
  // Stable: the map gave name order within each dtype.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return detail::safetensors_dtype_index(a.data.dtype()) < detail::safetensors_dtype_index(b.data.dtype());
  });
  size_t data_size = 0;
  for (const Entry& e : entries) {
    if (header.size() > 1) header += ',';
    detail::append_json_string(header, *e.name);
    const std::string_view dtype = detail::kSafetensorsDtypes[detail::safetensors_dtype_index(e.data.dtype())].first;
    header += kiln::detail::cat(":{\"dtype\":\"", dtype, "\",\"shape\":[");
    for (int d = 0; d < e.data.dim(); ++d) header += kiln::detail::cat(d ? "," : "", e.data.size(d));
    header += kiln::detail::cat("],\"data_offsets\":[", data_size, ",", data_size + e.data.nbytes(), "]}");
    data_size += e.data.nbytes();
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');

  Bytes out(8 + header.size() + data_size);
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  uint8_t* data = out.data() + 8 + header.size();
  for (const Entry& e : entries) {
    if (e.data.nbytes() > 0) std::memcpy(data, e.data.data_ptr(), e.data.nbytes());
    data += e.data.nbytes();
  }
  return out;
}

// The tensors and metadata of the safetensors file in `bytes`; `source` names it in errors.
inline SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes,
                                         const std::string& source = "safetensors buffer") {
  check<FormatError>(bytes.size() >= 8, source, ": ", bytes.size(), " bytes is too short for the 8-byte header length");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | bytes[i];
  check<FormatError>(header_size <= detail::kMaxSafetensorsHeader, source, ": header length ", header_size,
                     " is over the limit of ", detail::kMaxSafetensorsHeader, " bytes");
  check<FormatError>(header_size <= bytes.size() - 8, source, ": header length ", header_size,
                     " runs past the end (", bytes.size() - 8, " bytes follow the length)");
  const std::span<const uint8_t> data = bytes.subspan(8 + header_size);

  detail::JsonReader json(std::string_view(reinterpret_cast<const char*>(bytes.data()) + 8, header_size), source);
  SafetensorsFile out;
  std::vector<detail::SafetensorsEntry> entries;
  json.object([&](const std::string& key) {
    if (key == "__metadata__")
      json.object([&](const std::string& name) { out.metadata.emplace(name, json.string()); });
    else
      entries.push_back(detail::read_safetensors_entry(json, key, data.size(), source));
  });
  json.finish();
  detail::check_safetensors_layout(entries, data.size(), source);

  for (const detail::SafetensorsEntry& e : entries) {
    const std::string what = kiln::detail::cat(source, ": tensor ", detail::quoted(e.name));
    out.tensors.emplace(e.name, detail::tensor_from_bytes(e.shape, e.dtype, data.data() + e.begin, what));
  }
  return out;
}

inline void save_safetensors(const std::filesystem::path& path, const std::map<std::string, AnyTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

inline SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(read_file(path), path.string());
}

inline std::map<std::string, AnyTensor> load_safetensors(const std::filesystem::path& path) {
  return read_safetensors(path).tensors;
}

}  // namespace kiln::io
