// UTF-8 decoding for the tokenizers: one character at a time, never reading
// past the end, every ill-formed byte a character of its own.
#pragma once

#include <cstddef>
#include <string_view>

namespace ht::data::detail {

struct Utf8Char {
  char32_t code_point;  // kInvalidCodePoint for an ill-formed byte
  int bytes;            // 1..4
};

inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

/// The character starting at s[i] (i < s.size()). Well-formed sequences are
/// those of the Unicode standard's table 3-7 (no overlong forms, no
/// surrogates, nothing above U+10FFFF); anything else is one invalid byte,
/// and decoding resumes at the next byte. So "\xE2\x82" + "A" is two invalid
/// bytes and an 'A', whatever follows the text.
inline Utf8Char next_utf8(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return {c, 1};
  const std::size_t left = s.size() - i;
  const auto cont = [&](std::size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return b(i + k) >= lo && b(i + k) <= hi;
  };
  if (c >= 0xC2 && c <= 0xDF) {
    if (left >= 2 && cont(1)) return {char32_t(c & 0x1F) << 6 | (b(i + 1) & 0x3F), 2};
  } else if (c >= 0xE0 && c <= 0xEF) {
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (left >= 3 && cont(1, lo, hi) && cont(2))
      return {char32_t(c & 0x0F) << 12 | char32_t(b(i + 1) & 0x3F) << 6 | (b(i + 2) & 0x3F), 3};
  } else if (c >= 0xF0 && c <= 0xF4) {
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (left >= 4 && cont(1, lo, hi) && cont(2) && cont(3))
      return {char32_t(c & 0x07) << 18 | char32_t(b(i + 1) & 0x3F) << 12 | char32_t(b(i + 2) & 0x3F) << 6 |
                  (b(i + 3) & 0x3F),
              4};
  }
  return {kInvalidCodePoint, 1};
}

/// Appends the UTF-8 form of `cp` (a valid code point) to `out`.
template <class String>
void append_utf8(String& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | cp >> 6));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | cp >> 12));
    out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | cp >> 18));
    out.push_back(char(0x80 | (cp >> 12 & 0x3F)));
    out.push_back(char(0x80 | (cp >> 6 & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace ht::data::detail
