#pragma once
// The JSON that safetensors headers use, and no more: objects, arrays, strings (with every escape, \uXXXX and
// surrogate pairs included, and valid UTF-8 only) and integers. Floats, true, false and null are refused, as are
// duplicate keys. The reader is driven by what the caller expects next, so nesting costs no recursion and
// nothing is built that the caller does not keep.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "kiln/io/cursor.hpp"

namespace kiln::io::detail {

inline bool is_valid_utf8(std::string_view s) {
  static constexpr uint32_t kMinimum[] = {0, 0x80, 0x800, 0x10000};  // shorter forms are overlong encodings
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    int extra = 0;
    uint32_t cp = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xe0) == 0xc0) {
      extra = 1, cp = lead & 0x1f;
    } else if ((lead & 0xf0) == 0xe0) {
      extra = 2, cp = lead & 0x0f;
    } else if ((lead & 0xf8) == 0xf0) {
      extra = 3, cp = lead & 0x07;
    } else {
      return false;
    }
    if (s.size() - i - 1 < size_t(extra)) return false;
    for (int k = 1; k <= extra; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3f);
    }
    if (cp < kMinimum[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += 1 + extra;
  }
  return true;
}

// Appends s as a JSON string, escaped as serde_json (Python's safetensors) escapes: \" \\ \b \f \n \r \t, other
// control characters as \u00XX, everything else as it is.
inline void append_json_string(std::string& out, std::string_view s) {
  constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// s as a JSON string, for messages: names may hold quotes and control characters.
inline std::string quoted(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

class JsonReader : public Cursor {
 public:
  using Cursor::Cursor;

  std::string string() {
    if (!consume('"')) fail("expected a string, found ", next());
    std::string out;
    for (;;) {
      if (pos_ == text_.size()) fail("unterminated string");
      const char c = text_[pos_];
      if (static_cast<unsigned char>(c) < 0x20) fail("unescaped control character in a string");
      ++pos_;
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ == text_.size()) fail("unterminated string");
      switch (const char e = text_[pos_++]) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, escaped_code_point()); break;
        default: --pos_, fail("invalid escape '\\", e, "' in a string");
      }
    }
    if (!is_valid_utf8(out)) fail("string is not valid UTF-8");
    return out;
  }

  // An object: on_member(key) is called for each member, after the colon, and must read the value.
  template <class F>
  void object(F&& on_member) {
    expect('{');
    if (consume('}')) return;
    std::set<std::string> seen;
    for (;;) {
      const std::string key = string();
      if (!seen.insert(key).second) fail("duplicate key ", quoted(key));
      expect(':');
      on_member(key);
      if (consume('}')) return;
      if (!consume(',')) fail("expected ',' or '}', found ", next());
    }
  }

  // An array: on_element() is called for each element and must read it.
  template <class F>
  void array(F&& on_element) {
    expect('[');
    if (consume(']')) return;
    for (;;) {
      on_element();
      if (consume(']')) return;
      if (!consume(',')) fail("expected ',' or ']', found ", next());
    }
  }

 private:
  // The code point of a \u escape whose "\u" was just read; a high surrogate must be followed by a low one.
  uint32_t escaped_code_point() {
    const uint32_t first = hex4();
    if (first >= 0xdc00 && first <= 0xdfff) fail("lone low surrogate in a \\u escape");
    if (first < 0xd800 || first > 0xdbff) return first;
    if (text_.substr(pos_, 2) != "\\u") fail("high surrogate not followed by a \\u escape");
    pos_ += 2;
    const uint32_t second = hex4();
    if (second < 0xdc00 || second > 0xdfff) fail("high surrogate not followed by a low surrogate");
    return 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00);
  }
  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      const char c = pos_ < text_.size() ? text_[pos_] : '\0';
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("expected 4 hex digits after \\u");
      v = v * 16 + uint32_t(d);
    }
    return v;
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xc0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += char(0xe0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    } else {
      out += char(0xf0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3f));
      out += char(0x80 | ((cp >> 6) & 0x3f));
      out += char(0x80 | (cp & 0x3f));
    }
  }
};

}  // namespace kiln::io::detail
