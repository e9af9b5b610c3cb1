#pragma once
// Binary PGM (Netpbm "P5"), read strictly: "P5", width, height and maxval as decimal numbers separated by
// whitespace (comments from '#' to the end of a line allowed between them), exactly one whitespace byte,
// then exactly width * height samples (one byte each when maxval < 256, else two, big-endian), each at
// most maxval, and nothing after them.
#include <cstdint>
#include <string>
#include <string_view>

#include "image.hpp"

namespace serve {

inline bool looks_like_pgm(std::string_view bytes) { return bytes.starts_with("P5"); }

namespace detail {

class PgmHeaderReader {
 public:
  explicit PgmHeaderReader(std::string_view bytes) : bytes_(bytes) {}

  // Skips whitespace and comments, then reads a decimal number of at most `max` (named `what` in errors).
  int64_t number(const char* what, int64_t max) {
    skip_space_and_comments();
    if (pos_ >= bytes_.size() || !is_digit(bytes_[pos_]))
      throw ImageError(std::string("PGM: expected the ") + what + " (a decimal number) at byte " + std::to_string(pos_));
    int64_t value = 0;
    while (pos_ < bytes_.size() && is_digit(bytes_[pos_])) {
      value = value * 10 + (bytes_[pos_++] - '0');
      if (value > max)
        throw ImageError(std::string("PGM: the ") + what + " is over " + std::to_string(max));
    }
    return value;
  }
  // The single whitespace byte between maxval and the samples; returns the offset of the samples.
  size_t end_of_header() {
    if (pos_ >= bytes_.size() || !is_space(bytes_[pos_]))
      throw ImageError("PGM: expected one whitespace byte after maxval at byte " + std::to_string(pos_));
    return pos_ + 1;
  }

 private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }
  void skip_space_and_comments() {
    while (pos_ < bytes_.size()) {
      if (is_space(bytes_[pos_])) {
        ++pos_;
      } else if (bytes_[pos_] == '#') {
        while (pos_ < bytes_.size() && bytes_[pos_] != '\n' && bytes_[pos_] != '\r') ++pos_;
      } else {
        return;
      }
    }
  }

  std::string_view bytes_;
  size_t pos_ = 2;  // after "P5"
};

}  // namespace detail

inline GrayImage decode_pgm(std::string_view bytes, const ImageLimits& limits) {
  if (!looks_like_pgm(bytes)) throw UnsupportedImageFormat("PGM: the file does not start with \"P5\"");
  detail::PgmHeaderReader header(bytes);
  // The side limit is checked while the numbers are read, so that no product of them can overflow.
  const int64_t width = header.number("width", limits.max_side);
  const int64_t height = header.number("height", limits.max_side);
  const int64_t maxval = header.number("maxval", 65535);
  check_declared_size("PGM", width, height, limits);
  if (maxval < 1) throw ImageError("PGM: maxval must be between 1 and 65535, got 0");
  const size_t start = header.end_of_header();
  const size_t sample_bytes = maxval < 256 ? 1 : 2;
  const size_t expected = size_t(width * height) * sample_bytes, got = bytes.size() - start;
  if (got != expected)
    throw ImageError("PGM: " + std::to_string(width) + "x" + std::to_string(height) + " samples of " +
                     std::to_string(sample_bytes) + " byte(s) need " + std::to_string(expected) + " bytes after the header, got " +
                     std::to_string(got));
  GrayImage image{width, height, std::vector<float>(size_t(width * height))};
  const auto* samples = reinterpret_cast<const unsigned char*>(bytes.data() + start);
  for (size_t i = 0; i < image.pixels.size(); ++i) {
    const unsigned value = sample_bytes == 1 ? samples[i] : unsigned(samples[2 * i]) << 8 | samples[2 * i + 1];
    if (value > unsigned(maxval))
      throw ImageError("PGM: sample " + std::to_string(i) + " is " + std::to_string(value) + ", over maxval " +
                       std::to_string(maxval));
    image.pixels[i] = float(value) / float(maxval);
  }
  return image;
}

// Writes 8-bit samples (width * height bytes) as a binary PGM with maxval 255.
inline std::string encode_pgm(const unsigned char* pixels, int64_t width, int64_t height) {
  std::string out = "P5\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  out.append(reinterpret_cast<const char*>(pixels), size_t(width * height));
  return out;
}

}  // namespace serve
