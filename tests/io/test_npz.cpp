// NumPy .npz (and the ZIP reader under it): numpy.savez and numpy.savez_compressed files (ZIP64 local
// headers), round trips stored and deflated, NumPy reading kiln's (scripts/safetensors_interop.py check), and
// one exact error for each way an archive can be malformed or hostile.
#include <doctest/doctest.h>

#include <string>

#include "io_test_util.hpp"
#include "kiln/io/npz.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_io_npz {

using namespace kiln;

namespace {

// What scripts/safetensors_interop.py's npz_arrays() holds.
std::map<std::string, AnyTensor> npz_arrays() {
  return {{"weights", AnyTensor(Tensor<float>(arange<float>(12.0) * 0.25f).reshape({3, 4}))},
          {"labels", AnyTensor(tensor<int64_t>({3, 1, 4, 1, 5}))},
          {"mask", AnyTensor(tensor<bool>({true, false}))},
          {"scale", AnyTensor(full<double>({}, 0.5))},
          {"zeros", AnyTensor(zeros<double>({1000}))}};
}

void check_arrays(const std::map<std::string, AnyTensor>& got) {
  const auto expected = npz_arrays();
  REQUIRE(got.size() == expected.size());
  for (const auto& [key, value] : expected) {
    INFO(key);
    REQUIRE(got.count(key) == 1);
    CHECK(test::same_tensor(got.at(key), value));
  }
}

// A one-member archive and the offsets of its central directory entry's fields.
struct Archive {
  io::Bytes bytes;
  size_t central;  // where the central directory entry starts
};
Archive one_member(const std::string& name, const io::Bytes& data, bool compress) {
  io::Bytes bytes = io::serialize_zip({{name, data}}, compress);
  return {bytes, bytes.size() - 22 - 46 - name.size()};
}
void put32(io::Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (8 * i));
}

std::string error_of(const io::Bytes& bytes) {
  try {
    io::parse_npz(bytes, "a.npz");
  } catch (const io::FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("npz: reads numpy.savez and numpy.savez_compressed files") {
  check_arrays(io::load_npz(test::io_data("arrays.npz")));
  check_arrays(io::load_npz(test::io_data("arrays_compressed.npz")));
}

TEST_CASE("npz: round trips, stored and deflated, atomically written") {
  test::ScratchDir dir;
  for (bool compressed : {false, true}) {
    const auto path = dir / (compressed ? "c.npz" : "s.npz");
    io::save_npz(path, npz_arrays(), compressed);
    check_arrays(io::load_npz(path));
  }
  // Deflating pays on the 1000 zeros; equal inputs give equal bytes (a fixed timestamp).
  CHECK(io::serialize_npz(npz_arrays(), true).size() < io::serialize_npz(npz_arrays()).size() / 2);
  CHECK(io::serialize_npz(npz_arrays(), true) == io::serialize_npz(npz_arrays(), true));
  CHECK_THROWS_AS(io::serialize_npz({{"", AnyTensor(zeros<float>({1}))}}), std::invalid_argument);
}

TEST_CASE("npz: each malformed or hostile archive gets its own error") {
  const io::Bytes npy = io::serialize_npy(arange<float>(4.0));
  const Archive stored = one_member("a.npy", npy, false), deflated = one_member("a.npy", npy, true);
  CHECK(error_of(stored.bytes).empty());
  CHECK(error_of(deflated.bytes).empty());

  io::Bytes bad_crc = stored.bytes;
  bad_crc[30 + 5 + npy.size() - 1] ^= 1;  // the last data byte
  io::Bytes bad_method = stored.bytes;
  bad_method[stored.central + 10] = 12;  // bzip2
  io::Bytes encrypted = stored.bytes;
  encrypted[stored.central + 8] = 1;
  io::Bytes bomb = deflated.bytes;
  put32(bomb, deflated.central + 24, 0x7FFFFFFF);  // declares 2 GiB from a few dozen bytes
  io::Bytes wrong_size = deflated.bytes;
  put32(wrong_size, deflated.central + 24, uint32_t(npy.size() + 1));
  io::Bytes stored_size = stored.bytes;
  put32(stored_size, stored.central + 24, uint32_t(npy.size() - 1));
  io::Bytes past_end = stored.bytes;
  put32(past_end, stored.central + 20, 0x10000);  // compressed size
  io::Bytes bad_offset = stored.bytes;
  put32(bad_offset, stored.central + 42, 7);  // local header offset
  io::Bytes directory_outside = stored.bytes;
  put32(directory_outside, stored.bytes.size() - 6, 0x00FFFFFF);  // central directory offset
  io::Bytes too_many = stored.bytes;
  too_many[too_many.size() - 14] = 200;  // entries on this disk
  too_many[too_many.size() - 12] = 200;  // total entries

  const std::vector<std::pair<io::Bytes, std::string>> cases = {
      {io::Bytes(stored.bytes.begin(), stored.bytes.begin() + 10), "a.npz: too short for a ZIP archive (10 bytes)"},
      {io::Bytes(stored.bytes.begin(), stored.bytes.end() - 5),
       "a.npz: not a ZIP archive (no end of central directory record)"},
      {bad_crc, "a.npz: member 'a.npy' fails its CRC-32 check"},
      {bad_method, "a.npz: member 'a.npy' uses compression method 12 (only stored and deflated are read)"},
      {encrypted, "a.npz: member 'a.npy' is encrypted"},
      {bomb, "a.npz: member 'a.npy' declares 2147483647 bytes from " +
                 std::to_string(deflated.bytes.size() - 22 - 46 - 5 - 30 - 5) +
                 " deflated: more than deflate can produce"},
      {wrong_size, "a.npz: member 'a.npy': corrupt or truncated deflate data, or not the declared " +
                       std::to_string(npy.size() + 1) + " bytes"},
      {stored_size, "a.npz: stored member 'a.npy' has " + std::to_string(npy.size()) + " bytes but declares " +
                        std::to_string(npy.size() - 1)},
      {past_end, "a.npz: the local header of 'a.npy' runs past the end of the file (" +
                     std::to_string(stored.bytes.size()) + " bytes)"},
      {bad_offset, "a.npz: member 'a.npy' has no local header at offset 7"},
      {directory_outside, "a.npz: the central directory (" + std::to_string(46 + 5) + " bytes at 16777215) lies "
                          "outside the file"},
      {too_many, "a.npz: 200 members cannot fit a 51-byte central directory"},
      {one_member("a.txt", npy, false).bytes, "a.npz: member 'a.txt' is not a .npy file"},
      {io::serialize_zip({{"a.npy", npy}, {"a.npy", npy}}, false), "a.npz: member 'a.npy' appears twice"},
  };
  for (const auto& [bytes, message] : cases) {
    INFO(message);
    CHECK(error_of(bytes) == message);
  }
  // A member that is a malformed .npy: the .npy reader's error, naming the member.
  CHECK(error_of(one_member("a.npy", io::Bytes(npy.begin(), npy.end() - 1), false).bytes).starts_with("a.npz:a.npy: "));
}

// The other direction: with KILN_INTEROP_DIR set, writes the archives scripts/safetensors_interop.py check reads.
TEST_CASE("npz: files for Python to check (KILN_INTEROP_DIR)") {
  const char* dir = std::getenv("KILN_INTEROP_DIR");
  if (!dir) return;
  std::filesystem::create_directories(dir);
  io::save_npz(std::filesystem::path(dir) / "kiln.npz", npz_arrays());
  io::save_npz(std::filesystem::path(dir) / "kiln_compressed.npz", npz_arrays(), true);
  MESSAGE("wrote kiln.npz and kiln_compressed.npz into ", dir);
}

}  // namespace test_io_npz
