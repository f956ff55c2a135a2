// GPT-2's pre-tokenizing pattern, matched by hand. The alternatives of
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// are tried in order at each position, as a backtracking engine tries them:
//   1. an apostrophe and one of s t re ve m ll d (lower case only);
//   2-4. an optional U+0020 and a run of one class (letters, numbers, or
//      "other": neither space, letter nor number);
//   5. a run of spaces that is not followed by a non-space: the whole run at
//      the end of the text, else the run less its last character ("a   b"
//      gives "a", "  ", " b": the last space joins the word);
//   6. otherwise the run (a single space character before a non-space).
#include "data/gpt2_pretokenizer.h"

#include <unicode/uchar.h>

#include <array>
#include <vector>

#include "data/utf8.h"

namespace ht::data::detail {
namespace {

CharClass classify(char32_t cp) {
  if (cp == kInvalidCodePoint) return CharClass::kOther;
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF) return CharClass::kSpace;
  const auto mask = U_GET_GC_MASK(UChar32(cp));
  if (mask & U_GC_ZS_MASK) return CharClass::kSpace;
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  return CharClass::kOther;
}

// The classes of the Basic Multilingual Plane, from ICU once (64 KiB): most
// text never leaves it, and a table lookup is ~10x cheaper than ICU's trie.
const std::vector<CharClass>& bmp_classes() {
  static const std::vector<CharClass> table = [] {
    std::vector<CharClass> t(0x10000);
    for (char32_t cp = 0; cp < 0x10000; ++cp) t[cp] = classify(cp);
    return t;
  }();
  return table;
}

struct Classified {
  CharClass cls;
  int bytes;
};

inline Classified class_at(std::string_view s, std::size_t i, const std::vector<CharClass>& bmp) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {bmp[c], 1};
  const Utf8Char u = next_utf8(s, i);
  return {u.code_point < 0x10000 ? bmp[u.code_point] : classify(u.code_point), u.bytes};
}

}  // namespace

CharClass char_class(char32_t code_point) {
  return code_point < 0x10000 ? bmp_classes()[code_point] : classify(code_point);
}

std::string_view Gpt2Splitter::next() {
  const std::vector<CharClass>& bmp = bmp_classes();
  const std::string_view s = text_;
  const std::size_t n = s.size(), start = pos_;
  const auto emit = [&](std::size_t end) {
    pos_ = end;
    return s.substr(start, end - start);
  };
  // 1. Contractions.
  if (s[start] == '\'' && start + 1 < n) {
    const char a = s[start + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return emit(start + 2);
    if (start + 2 < n) {
      const char b = s[start + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return emit(start + 3);
    }
  }
  // 2-4. An optional space, then a run of one class.
  std::size_t i = start;
  Classified c = class_at(s, i, bmp);
  if (s[i] == ' ' && i + 1 < n) {
    const Classified after = class_at(s, i + 1, bmp);
    if (after.cls != CharClass::kSpace) {
      i += 1;
      c = after;
    }
  }
  if (c.cls != CharClass::kSpace) {
    const CharClass run = c.cls;
    i += std::size_t(c.bytes);
    while (i < n) {
      const Classified d = class_at(s, i, bmp);
      if (d.cls != run) break;
      i += std::size_t(d.bytes);
    }
    return emit(i);
  }
  // 5-6. A run of spaces: all of it at the end of the text; before a
  // non-space, all but its last character, or the one character alone.
  std::size_t last = i;
  while (i < n) {
    const Classified d = class_at(s, i, bmp);
    if (d.cls != CharClass::kSpace) break;
    last = i;
    i += std::size_t(d.bytes);
  }
  if (i == n || last == start) return emit(i);
  return emit(last);
}

}  // namespace ht::data::detail
