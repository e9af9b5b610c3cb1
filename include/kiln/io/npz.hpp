#pragma once
// NumPy .npz archives (numpy.savez, numpy.savez_compressed): a ZIP of .npy members, one per named array
// (link with -lz).
//
//   io::save_npz("arrays.npz", {{"x", x}, {"labels", y}});          // stored, as numpy.savez
//   io::save_npz("arrays.npz", tensors, /*compressed=*/true);         // deflated, as numpy.savez_compressed
//   std::map<std::string, AnyTensor> arrays = io::load_npz("arrays.npz");
//
// Keys are the member names without ".npy", as NumPy's NpzFile has them. Every member goes through the .npy
// reader (kiln/io/npy.hpp: its dtypes, its checks) and the archive through kiln/io/zip.hpp's; a member that
// is not a .npy file is refused, naming it.
#include <filesystem>
#include <map>
#include <string>

#include "kiln/io/npy.hpp"
#include "kiln/io/zip.hpp"

namespace kiln::io {

inline std::map<std::string, AnyTensor> parse_npz(std::span<const uint8_t> bytes, const std::string& source) {
  std::map<std::string, AnyTensor> arrays;
  for (const ZipMember& m : parse_zip(bytes, source)) {
    const std::string suffix = ".npy";
    check<FormatError>(m.name.size() > suffix.size() && m.name.ends_with(suffix), source, ": member '", m.name,
                       "' is not a .npy file");
    const std::string key = m.name.substr(0, m.name.size() - suffix.size());
    arrays.emplace(key, parse_npy(m.data, source + ":" + m.name));
  }
  return arrays;
}

inline Bytes serialize_npz(const std::map<std::string, AnyTensor>& arrays, bool compressed = false) {
  std::vector<ZipMember> members;
  for (const auto& [key, tensor] : arrays) {
    check<std::invalid_argument>(!key.empty(), "save_npz: an empty array name");
    members.push_back({key + ".npy", serialize_npy(tensor)});
  }
  return serialize_zip(members, compressed);
}

inline std::map<std::string, AnyTensor> load_npz(const std::filesystem::path& path) {
  return parse_npz(read_file(path), path.string());
}

inline void save_npz(const std::filesystem::path& path, const std::map<std::string, AnyTensor>& arrays,
                     bool compressed = false) {
  write_file_atomic(path, serialize_npz(arrays, compressed));
}

}  // namespace kiln::io
