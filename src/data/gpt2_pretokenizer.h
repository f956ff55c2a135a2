// GPT-2's pre-tokenizer: the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched by hand (a regular-expression engine is several times slower),
// with the Unicode classes from ICU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ht::data::detail {

enum class CharClass : std::uint8_t { kLetter, kNumber, kSpace, kOther };

/// \p{L} (general category L*), \p{N} (N*), \s or anything else, for a code
/// point or kInvalidCodePoint (kOther). \s is JavaScript's, as the reference
/// encoder's: Zs, U+0009..U+000D, U+2028, U+2029 and U+FEFF (not U+0085 or
/// U+001C..U+001F, which Python's str.isspace takes). Thread-safe.
CharClass char_class(char32_t code_point);

/// Splits text into GPT-2's pieces, in order; the pieces concatenate to the text.
///   for (Gpt2Splitter s(text); !s.done();) { std::string_view piece = s.next(); ... }
class Gpt2Splitter {
 public:
  explicit Gpt2Splitter(std::string_view text) : text_(text) {}
  bool done() const { return pos_ >= text_.size(); }
  /// The next piece (non-empty); call only when !done().
  std::string_view next();

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace ht::data::detail
