// IDX (MNIST) files: every element type, plain and gzipped (also several gzip members), the images and labels
// helpers, and one exact error for each way a file can be malformed or its compression corrupt.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cmath>
#include <string>
#include <vector>

#include "io_test_util.hpp"

// Each test file in its own namespace: the suite is built as unity files (tests/meson.build).
namespace test_io_idx {

using namespace kiln;
using kiln::test::concat;

namespace {

// An IDX file: magic, big-endian dims, then `data` as given.
io::Bytes idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const io::Bytes& data) {
  io::Bytes out = {0, 0, type, uint8_t(dims.size())};
  for (const uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(d >> shift));
  return concat(out, data);
}

io::Bytes gzip(const io::Bytes& in) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  io::Bytes out(deflateBound(&zs, uLong(in.size())));
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = uInt(in.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string error_of(const io::Bytes& bytes) {
  try {
    io::parse_idx(bytes);
  } catch (const io::FormatError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("idx: MNIST-style files written by Python, plain and gzipped") {
  Tensor<int32_t> pixels = empty<int32_t>({2, 3, 4});
  for (int i = 0; i < 24; ++i) pixels.data_ptr()[i] = i * 11 % 256;
  CHECK(test::same_tensor(io::read_idx(test::io_data("images-idx3-ubyte")), pixels));
  CHECK(test::same_tensor(io::read_idx(test::io_data("images-idx3-ubyte.gz")), pixels));

  const Tensor<float> images = io::read_idx_images(test::io_data("images-idx3-ubyte.gz"));
  CHECK(images.shape() == Shape{2, 1, 3, 4});
  for (int i = 0; i < 24; ++i) CHECK(images.data_ptr()[i] == float(i * 11 % 256) / 255.0f);
  CHECK(images.data_ptr()[0] == 0.0f);
  CHECK(images[1][0][2][3].item() == float(23 * 11 % 256) / 255.0f);

  CHECK(test::same_tensor(io::read_idx_labels(test::io_data("labels-idx1-ubyte.gz")), tensor<int64_t>({7, 0, 9, 255, 1})));
  CHECK(test::same_tensor(io::read_idx(test::io_data("int16-idx2")), tensor<int32_t>({{-32768, -1}, {0, 32767}})));
  CHECK(test::same_tensor(io::read_idx(test::io_data("float64-idx1")), tensor<double>({0.5, -1.0 / 3, 1e300})));
}

TEST_CASE("idx: every element type, big-endian, in memory and gzipped") {
  CHECK(test::same_tensor(io::parse_idx(idx_bytes(0x08, {2}, {0, 255})), tensor<int32_t>({0, 255})));
  CHECK(test::same_tensor(io::parse_idx(idx_bytes(0x09, {2}, {0x80, 0x7f})), tensor<int32_t>({-128, 127})));
  CHECK(test::same_tensor(io::parse_idx(idx_bytes(0x0b, {1}, {0x12, 0x34})), tensor<int32_t>({0x1234})));
  CHECK(test::same_tensor(io::parse_idx(idx_bytes(0x0c, {2}, {0x80, 0, 0, 0, 0, 0, 1, 2})),
                          tensor<int32_t>({INT32_MIN, 0x102})));
  CHECK(test::same_tensor(io::parse_idx(idx_bytes(0x0d, {1, 1}, {0x3f, 0xc0, 0, 0})), tensor<float>({{1.5f}})));
  CHECK(test::same_tensor(io::parse_idx(idx_bytes(0x0e, {}, {0xc0, 0, 0, 0, 0, 0, 0, 0})), full<double>({}, -2.0)));
  CHECK(test::same_tensor(io::parse_idx(idx_bytes(0x08, {3, 0}, {})), empty<int32_t>({3, 0})));

  const io::Bytes plain = idx_bytes(0x0b, {2, 2}, {0xff, 0xfe, 0, 1, 0x7f, 0xff, 0x80, 0});
  const Tensor<int32_t> expected = tensor<int32_t>({{-2, 1}, {32767, -32768}});
  CHECK(test::same_tensor(io::parse_idx(gzip(plain)), expected));
  // Concatenated gzip members (cat a.gz b.gz) decompress one after the other.
  const io::Bytes head(plain.begin(), plain.begin() + 7), tail(plain.begin() + 7, plain.end());
  CHECK(test::same_tensor(io::parse_idx(concat(gzip(head), gzip(tail))), expected));
}

TEST_CASE("idx: each malformed file gets its own error") {
  const io::Bytes labels = idx_bytes(0x08, {3}, {1, 2, 3});
  const io::Bytes compressed = gzip(labels);
  io::Bytes bad_crc = compressed;
  bad_crc[bad_crc.size() - 6] ^= 0xff;  // the CRC-32 is the trailer's first 4 bytes
  io::Bytes bad_method = compressed;
  bad_method[2] = 7;  // 8 is deflate, the only method
  struct Case {
    io::Bytes bytes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{0, 0, 8}, "3 bytes is too short for the IDX magic number"},
      {{0, 1, 8, 1, 0, 0, 0, 0}, "not an IDX file (the magic number starts with 0 1, not 0 0)"},
      {{'P', 'K', 3, 4}, "not an IDX file (the magic number starts with 80 75, not 0 0)"},
      {idx_bytes(0x0a, {1}, {0}), "unknown IDX element type 10 (known: 8 ubyte, 9 sbyte, 11 int16, 12 int32, 13 float32, 14 float64)"},
      {idx_bytes(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {0}), "9 dims, more than kiln's limit of 8"},
      {{0, 0, 8, 2, 0, 0, 0, 1, 0, 0}, "the file ends inside its 2 dims"},
      {idx_bytes(0x08, {2, 3}, io::Bytes(5, 0)), "the data is 5 bytes, but ubyte shape [2, 3] needs 6 elements of 1 bytes"},
      {idx_bytes(0x08, {2, 3}, io::Bytes(7, 0)), "the data is 7 bytes, but ubyte shape [2, 3] needs 6 elements of 1 bytes"},
      {idx_bytes(0x0c, {3}, io::Bytes(10, 0)), "the data is 10 bytes, but int32 shape [3] needs 3 elements of 4 bytes"},
      {idx_bytes(0x0e, {0xffffffff, 0xffffffff, 0xffffffff}, {}),
       "shape [4294967295, 4294967295, 4294967295] is too large (its nonzero sizes multiply past int64)"},
      {idx_bytes(0x0e, {0, 0xffffffff, 0xffffffff, 0xffffffff}, {}),  // empty, but its strides would overflow
       "shape [0, 4294967295, 4294967295, 4294967295] is too large (its nonzero sizes multiply past int64)"},
      // gzip.
      {io::Bytes(compressed.begin(), compressed.end() - 3), "the gzip data is truncated"},
      {io::Bytes(compressed.begin(), compressed.begin() + 2), "the gzip data is truncated"},
      {bad_crc, "corrupt gzip data (incorrect data check)"},
      {bad_method, "corrupt gzip data (unknown compression method)"},
      {concat(compressed, {'x', 'y'}), "corrupt gzip data (incorrect header check)"},
  };
  for (const Case& c : cases) {
    CAPTURE(std::string(c.bytes.begin(), c.bytes.end()));
    CHECK(error_of(c.bytes) == "IDX buffer: " + c.message);
  }
}

TEST_CASE("gunzip: output past the limit is refused, output up to it is not (a decompression bomb)") {
  const io::Bytes zeros(1 << 20, 0), bomb = gzip(zeros);  // 1 MiB of zeros in about 1 KiB
  REQUIRE(bomb.size() < 8192);
  CHECK(io::gunzip(bomb, "bomb.gz", zeros.size()) == zeros);
  CHECK_THROWS_WITH_AS(io::gunzip(bomb, "bomb.gz", zeros.size() - 1),
                       ("bomb.gz: the gzip data decompresses to more than " + std::to_string(zeros.size() - 1) +
                        " bytes (the limit)").c_str(),
                       io::FormatError);
  CHECK_THROWS_AS(io::gunzip(bomb, "bomb.gz", 100), io::FormatError);
}

TEST_CASE("idx: images and labels helpers check what they get") {
  test::ScratchDir dir;
  const std::string labels = (dir / "labels").string(), images = (dir / "images").string();
  io::write_file_atomic(labels, idx_bytes(0x08, {3}, {1, 2, 3}));
  io::write_file_atomic(images, idx_bytes(0x0b, {1, 1, 1}, {0, 0}));
  CHECK_THROWS_WITH_AS(io::read_idx_images(labels),
                       (labels + ": expected ubyte images of shape [N, rows, cols], found ubyte of shape [3]").c_str(),
                       io::FormatError);
  CHECK_THROWS_WITH_AS(io::read_idx_images(images),
                       (images + ": expected ubyte images of shape [N, rows, cols], found int16 of shape [1, 1, 1]").c_str(),
                       io::FormatError);
  CHECK_THROWS_WITH_AS(io::read_idx_labels(images),
                       (images + ": expected ubyte labels of shape [N], found int16 of shape [1, 1, 1]").c_str(),
                       io::FormatError);
  CHECK_THROWS_WITH_AS(io::read_idx(dir / "none"), ((dir / "none").string() + ": cannot open: No such file or directory").c_str(),
                       std::runtime_error);
  // A corrupt file names its path.
  io::write_file_atomic(dir / "bad.gz", io::Bytes{0x1f, 0x8b});
  CHECK_THROWS_WITH_AS(io::read_idx_labels(dir / "bad.gz"), ((dir / "bad.gz").string() + ": the gzip data is truncated").c_str(),
                       io::FormatError);
}

}  // namespace test_io_idx
