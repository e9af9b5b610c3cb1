#pragma once
// A left-to-right reader of a file's text header (safetensors' JSON, NumPy's dict literal). It never reads past
// the text, and its errors name the source and the byte within the header:
// "model.safetensors: header byte 17: expected ':', found ','".
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/core/error.hpp"
#include "kiln/io/format_error.hpp"

namespace kiln::io::detail {

class Cursor {
 public:
  Cursor(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  template <class... Args>
  [[noreturn]] void fail(const Args&... message) const {
    throw FormatError(kiln::detail::cat(source_, ": header byte ", pos_, ": ", message...));
  }

  // Skips spaces, tabs, carriage returns and newlines (JSON's whitespace; NumPy pads with spaces and a newline).
  void skip_space() {
    while (pos_ < text_.size() && std::string_view(" \t\r\n").find(text_[pos_]) != std::string_view::npos) ++pos_;
  }
  // After whitespace: takes c if it comes next.
  bool consume(char c) {
    skip_space();
    if (pos_ == text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  // After whitespace: takes the word if it comes next.
  bool consume(std::string_view word) {
    skip_space();
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void expect(char c) {
    if (!consume(c)) fail("expected '", c, "', found ", next());
  }
  // Only whitespace may follow.
  void finish() {
    skip_space();
    if (pos_ != text_.size()) fail("expected the end of the header, found ", next());
  }

  // After whitespace: an integer -?(0|[1-9][0-9]*) that fits int64 (JSON's and Python's integer syntax).
  int64_t integer() {
    skip_space();
    const bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    if (!digit_next()) fail("expected an integer, found ", next());
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1])) fail("integer with a leading zero");
    // Accumulated as a magnitude up to 2^63, the most negative int64's.
    const uint64_t limit = negative ? uint64_t(1) << 63 : (uint64_t(1) << 63) - 1;
    uint64_t magnitude = 0;
    while (digit_next()) {
      const uint64_t d = uint64_t(text_[pos_] - '0');
      if (magnitude > (limit - d) / 10) fail("integer out of the int64 range");
      magnitude = magnitude * 10 + d;
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      fail("expected an integer, found a number with a fraction or an exponent");
    return negative ? int64_t(0 - magnitude) : int64_t(magnitude);
  }

  // The next character as a message shows it: 'x', byte 0x07, or the end of the header.
  std::string next() const {
    if (pos_ == text_.size()) return "the end of the header";
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c >= 0x20 && c < 0x7f) return std::string{'\'', char(c), '\''};
    constexpr char hex[] = "0123456789abcdef";
    return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
  }

 protected:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  bool digit_next() const { return pos_ < text_.size() && is_digit(text_[pos_]); }

  std::string_view text_;
  size_t pos_ = 0;
  std::string source_;
};

}  // namespace kiln::io::detail
