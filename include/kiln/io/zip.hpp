#pragma once
// The subset of ZIP that NumPy's .npz files use (link with -lz): members stored or deflated, ZIP64 size
// and offset fields read, no encryption, one disk. Reading is strict: every offset and size is checked
// against the file before use, sizes are cross-checked between the central directory and the data, each
// member's CRC-32 is verified, and a deflated member may not declare more output than deflate can produce
// from its input (a "zip bomb" is refused before anything is allocated). Writing makes a plain ZIP
// (no ZIP64: an archive past 4 GiB is refused) with a fixed timestamp, so equal inputs give equal files.
#include <zlib.h>

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/error.hpp"
#include "kiln/io/atomic_file.hpp"  // Bytes
#include "kiln/io/format_error.hpp"

namespace kiln::io {

struct ZipMember {
  std::string name;
  Bytes data;  // uncompressed
};

namespace detail::zip {

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50;
constexpr uint32_t kEnd64 = 0x06064b50, kEnd64Locator = 0x07064b50;
constexpr uint16_t kStored = 0, kDeflated = 8, kZip64Extra = 0x0001;
constexpr uint64_t kMaxDeflateRatio = 1032;  // deflate's best: 258 bytes from 2 bits

// Little-endian fields of a region of the file, bounds-checked; errors name the file and the structure.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, size_t at, const std::string& source, std::string what)
      : bytes_(bytes), pos_(at), source_(source), what_(std::move(what)) {}
  uint64_t field(int size) {
    need(size_t(size));
    uint64_t v = 0;
    for (int i = 0; i < size; ++i) v |= uint64_t(bytes_[pos_ + i]) << (8 * i);
    pos_ += size_t(size);
    return v;
  }
  uint16_t u16() { return uint16_t(field(2)); }
  uint32_t u32() { return uint32_t(field(4)); }
  uint64_t u64() { return field(8); }
  std::span<const uint8_t> take(uint64_t n) {
    need(n);
    const auto out = bytes_.subspan(pos_, size_t(n));
    pos_ += size_t(n);
    return out;
  }
  size_t position() const { return pos_; }

 private:
  void need(uint64_t n) const {
    check<FormatError>(pos_ <= bytes_.size() && n <= bytes_.size() - pos_, source_, ": ", what_,
                       " runs past the end of the file (", bytes_.size(), " bytes)");
  }
  std::span<const uint8_t> bytes_;
  size_t pos_;
  const std::string& source_;
  std::string what_;
};

// A member's place and sizes, from its central directory entry (ZIP64 extra fields applied).
struct Entry {
  std::string name;
  uint16_t flags, method;
  uint32_t crc;
  uint64_t compressed, size, offset;
};

inline Entry read_entry(Reader& r, const std::string& source, size_t index) {
  const std::string what = kiln::detail::cat("central directory entry ", index);
  check<FormatError>(r.u32() == kCentralHeader, source, ": ", what, " has no central header signature");
  r.take(4);  // versions made by and needed
  Entry e;
  e.flags = r.u16();
  e.method = r.u16();
  r.take(4);  // time, date
  e.crc = r.u32();
  e.compressed = r.u32();
  e.size = r.u32();
  const uint16_t name_length = r.u16(), extra_length = r.u16(), comment_length = r.u16();
  const uint16_t disk = r.u16();
  r.take(6);  // internal and external attributes
  e.offset = r.u32();
  const auto name = r.take(name_length);
  e.name.assign(name.begin(), name.end());
  Reader extra(r.take(extra_length), 0, source, what + "'s extra field");
  r.take(comment_length);
  // ZIP64: the 8-byte values of the fields that hold 0xFFFFFFFF, in the order size, compressed, offset.
  for (size_t end = extra_length; extra.position() < end;) {
    const uint16_t id = extra.u16(), length = extra.u16();
    Reader block(extra.take(length), 0, source, what + "'s ZIP64 field");
    if (id != kZip64Extra) continue;
    for (uint64_t* f : {&e.size, &e.compressed, &e.offset})
      if (*f == 0xFFFFFFFF) *f = block.u64();
  }
  check<FormatError>(disk == 0 || disk == 0xFFFF, source, ": multi-disk archives are not supported");
  check<FormatError>(!(e.flags & 1), source, ": member '", e.name, "' is encrypted");
  check<FormatError>(e.method == kStored || e.method == kDeflated, source, ": member '", e.name,
                     "' uses compression method ", e.method, " (only stored and deflated are read)");
  return e;
}

inline Bytes inflate_member(std::span<const uint8_t> in, const Entry& e, const std::string& source) {
  check<FormatError>(e.size <= std::max<uint64_t>(in.size(), 1) * kMaxDeflateRatio, source, ": member '", e.name,
                     "' declares ", e.size, " bytes from ", in.size(), " deflated: more than deflate can produce");
  Bytes out(size_t(e.size));
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) throw OutOfMemoryError(source + ": cannot start zlib's inflate");
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = uInt(in.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  const int rc = inflate(&zs, Z_FINISH);
  const size_t produced = zs.total_out;
  inflateEnd(&zs);
  check<FormatError>(rc == Z_STREAM_END && produced == out.size(), source, ": member '", e.name,
                     "': corrupt or truncated deflate data, or not the declared ", e.size, " bytes");
  return out;
}

}  // namespace detail::zip

// The members of the ZIP archive in `bytes`, in the central directory's order.
inline std::vector<ZipMember> parse_zip(std::span<const uint8_t> bytes, const std::string& source) {
  namespace z = detail::zip;
  // The end record: the last signature within its 22 bytes plus at most a 65535-byte comment.
  check<FormatError>(bytes.size() >= 22, source, ": too short for a ZIP archive (", bytes.size(), " bytes)");
  size_t end_at = bytes.size() - 22;
  const size_t lowest = bytes.size() >= 22 + 65535 ? bytes.size() - 22 - 65535 : 0;
  auto signature_at = [&](size_t at) { return z::Reader(bytes, at, source, "a signature").u32(); };
  while (signature_at(end_at) != z::kEnd) {
    check<FormatError>(end_at > lowest, source, ": not a ZIP archive (no end of central directory record)");
    --end_at;
  }
  z::Reader end(bytes, end_at + 4, source, "the end of central directory record");
  const uint16_t disk = end.u16(), cd_disk = end.u16();
  uint64_t count_here = end.u16(), count = end.u16(), cd_size = end.u32(), cd_offset = end.u32();
  check<FormatError>(disk == 0 && cd_disk == 0, source, ": multi-disk archives are not supported");
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    check<FormatError>(end_at >= 20, source, ": a ZIP64 archive without its locator");
    z::Reader locator(bytes, end_at - 20, source, "the ZIP64 end of central directory locator");
    check<FormatError>(locator.u32() == z::kEnd64Locator, source, ": a ZIP64 archive without its locator");
    locator.u32();
    z::Reader end64(bytes, size_t(std::min<uint64_t>(locator.u64(), bytes.size())), source,
                    "the ZIP64 end of central directory record");
    check<FormatError>(end64.u32() == z::kEnd64, source, ": the ZIP64 end of central directory record is missing");
    end64.take(8 + 4 + 4 + 4);  // record size, versions, disk numbers
    count_here = end64.u64();
    count = end64.u64();
    cd_size = end64.u64();
    cd_offset = end64.u64();
  }
  check<FormatError>(count_here == count, source, ": multi-disk archives are not supported");
  check<FormatError>(cd_offset <= bytes.size() && cd_size <= bytes.size() - cd_offset, source,
                     ": the central directory (", cd_size, " bytes at ", cd_offset, ") lies outside the file");
  // Each entry takes at least 46 bytes: a count the directory cannot hold is refused before the loop.
  check<FormatError>(count <= cd_size / 46, source, ": ", count, " members cannot fit a ", cd_size,
                     "-byte central directory");
  z::Reader directory(bytes.subspan(0, size_t(cd_offset + cd_size)), size_t(cd_offset), source, "the central directory");
  std::vector<ZipMember> members;
  std::set<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    const z::Entry e = z::read_entry(directory, source, i);
    check<FormatError>(names.insert(e.name).second, source, ": member '", e.name, "' appears twice");
    z::Reader local(bytes, size_t(std::min<uint64_t>(e.offset, bytes.size())), source,
                    "the local header of '" + e.name + "'");
    check<FormatError>(local.u32() == z::kLocalHeader, source, ": member '", e.name,
                       "' has no local header at offset ", e.offset);
    local.take(22);  // version, flags, method, time, date, crc, sizes: the central directory's are used
    const uint16_t name_length = local.u16(), extra_length = local.u16();
    local.take(name_length);
    local.take(extra_length);
    const auto stored = local.take(e.compressed);
    Bytes data;
    if (e.method == z::kStored) {
      check<FormatError>(e.compressed == e.size, source, ": stored member '", e.name, "' has ", e.compressed,
                         " bytes but declares ", e.size);
      data.assign(stored.begin(), stored.end());
    } else {
      data = z::inflate_member(stored, e, source);
    }
    const uint32_t crc = uint32_t(crc32(0, data.data(), uInt(data.size())));
    check<FormatError>(crc == e.crc, source, ": member '", e.name, "' fails its CRC-32 check");
    members.push_back({e.name, std::move(data)});
  }
  return members;
}

// A ZIP archive of the members, each stored or (compress) deflated.
inline Bytes serialize_zip(const std::vector<ZipMember>& members, bool compress) {
  namespace z = detail::zip;
  Bytes out, directory;
  auto put = [](Bytes& b, uint64_t v, int size) {
    for (int i = 0; i < size; ++i) b.push_back(uint8_t(v >> (8 * i)));
  };
  auto fits = [](uint64_t v, const char* what) {
    check<std::length_error>(v < 0xFFFFFFFF, "serialize_zip: ", what, " of ", v, " needs ZIP64, which kiln does not write");
  };
  fits(members.size(), "a member count");
  for (const ZipMember& m : members) {
    fits(m.data.size(), "a member size");
    Bytes payload = m.data;
    uint16_t method = z::kStored;
    if (compress) {
      Bytes deflated(compressBound(uLong(m.data.size())) + 64);
      z_stream zs{};
      check<OutOfMemoryError>(deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8,
                                           Z_DEFAULT_STRATEGY) == Z_OK, "serialize_zip: cannot start zlib's deflate");
      zs.next_in = const_cast<Bytef*>(m.data.data());
      zs.avail_in = uInt(m.data.size());
      zs.next_out = deflated.data();
      zs.avail_out = uInt(deflated.size());
      const int rc = deflate(&zs, Z_FINISH);
      deflated.resize(zs.total_out);
      deflateEnd(&zs);
      check<std::runtime_error>(rc == Z_STREAM_END, "serialize_zip: zlib's deflate failed on '", m.name, "'");
      payload = std::move(deflated);
      method = z::kDeflated;
    }
    fits(out.size(), "an offset");
    const uint32_t crc = uint32_t(crc32(0, m.data.data(), uInt(m.data.size())));
    // The fields local and central headers share, from "version needed" to the name's length.
    auto common = [&](Bytes& b) {
      put(b, 20, 2);       // version needed: 2.0
      put(b, 0, 2);        // flags
      put(b, method, 2);
      put(b, 0, 2);        // time 00:00:00
      put(b, 0x21, 2);     // date 1980-01-01
      put(b, crc, 4);
      put(b, payload.size(), 4);
      put(b, m.data.size(), 4);
      put(b, m.name.size(), 2);
      put(b, 0, 2);        // extra length
    };
    put(directory, z::kCentralHeader, 4);
    put(directory, 20, 2);  // version made by
    common(directory);
    put(directory, 0, 2);  // comment length
    put(directory, 0, 2);  // disk
    put(directory, 0, 2);  // internal attributes
    put(directory, 0, 4);  // external attributes
    put(directory, out.size(), 4);
    directory.insert(directory.end(), m.name.begin(), m.name.end());
    put(out, z::kLocalHeader, 4);
    common(out);
    out.insert(out.end(), m.name.begin(), m.name.end());
    out.insert(out.end(), payload.begin(), payload.end());
  }
  fits(out.size(), "an offset");
  const uint64_t cd_offset = out.size();
  out.insert(out.end(), directory.begin(), directory.end());
  put(out, z::kEnd, 4);
  put(out, 0, 4);  // disk numbers
  put(out, members.size(), 2);
  put(out, members.size(), 2);
  put(out, directory.size(), 4);
  put(out, cd_offset, 4);
  put(out, 0, 2);  // comment length
  return out;
}

}  // namespace kiln::io
