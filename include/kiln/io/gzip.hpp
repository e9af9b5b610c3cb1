#pragma once
// gzip decompression in memory with zlib (link with -lz).
#include <zlib.h>

#include <algorithm>
#include <span>
#include <string>

#include "kiln/core/error.hpp"
#include "kiln/io/atomic_file.hpp"  // Bytes
#include "kiln/io/format_error.hpp"

namespace kiln::io {

inline bool is_gzip(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

// What gunzip decompresses at most unless told otherwise: 4 GiB. A hostile file of a few megabytes can
// declare nothing and inflate without end (a "zip bomb"); this bounds what it can make kiln allocate.
constexpr size_t kDefaultMaxInflated = size_t(1) << 32;

// The decompressed content of gzip data; several members (concatenated .gz files) decompress one after the other,
// as gzip -d does. Corrupt or truncated data, or more than max_output bytes of output, is an io::FormatError
// starting with `source`.
inline Bytes gunzip(std::span<const uint8_t> in, const std::string& source, size_t max_output = kDefaultMaxInflated) {
  z_stream zs{};
  // 16 + MAX_WBITS: the gzip wrapper (header and CRC-32 trailer) rather than zlib's.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw OutOfMemoryError(source + ": cannot start zlib's inflate");
  struct InflateEnd {
    z_stream& zs;
    ~InflateEnd() { inflateEnd(&zs); }
  } end{zs};
  // zlib counts bytes in 32-bit uInt: it is given at most 1 GiB of input and of output room at a time.
  constexpr size_t kChunk = size_t(1) << 30;
  auto check_limit = [&](size_t produced) {
    check<FormatError>(produced <= max_output, source, ": the gzip data decompresses to more than ", max_output,
                       " bytes (the limit)");
  };
  // One byte of room past the limit: output that fills it is over the limit.
  Bytes out(std::min(std::max<size_t>(in.size() * 4, 1 << 16), max_output + 1));
  size_t consumed = 0, produced = 0;
  for (;;) {
    if (produced == out.size()) {
      check_limit(produced);
      out.resize(std::min(out.size() * 2, max_output + 1));
    }
    zs.next_in = const_cast<Bytef*>(in.data() + consumed);  // zlib's next_in is const only under ZLIB_CONST
    zs.avail_in = uInt(std::min(in.size() - consumed, kChunk));
    zs.next_out = out.data() + produced;
    zs.avail_out = uInt(std::min(out.size() - produced, kChunk));
    const int rc = inflate(&zs, Z_NO_FLUSH);
    consumed = size_t(zs.next_in - in.data());
    produced = size_t(zs.next_out - out.data());
    if (rc == Z_STREAM_END) {
      if (consumed == in.size()) break;
      inflateReset(&zs);  // the next member
      continue;
    }
    if (rc == Z_MEM_ERROR) throw OutOfMemoryError(source + ": out of memory in zlib's inflate");
    // Z_BUF_ERROR: no progress was possible. There is always output room here, so the input ended inside a member.
    check<FormatError>(rc != Z_BUF_ERROR, source, ": the gzip data is truncated");
    check<FormatError>(rc == Z_OK, source, ": corrupt gzip data (", zs.msg ? zs.msg : "no message", ")");
  }
  check_limit(produced);
  out.resize(produced);
  return out;
}

}  // namespace kiln::io
