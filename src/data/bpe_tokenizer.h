// Byte-level BPE as GPT-2's: GPT-2's pre-tokenizer, then each piece's bytes
// merged by rank. The vocabulary comes from GPT-2's files (encoder.json and
// vocab.bpe, or Hugging Face's vocab.json and merges.txt) or from a tiktoken
// rank file.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ht/data/tokenizer.h"

namespace ht::data::detail {

/// A byte-level BPE vocabulary, as ids.
struct BpeVocabulary {
  struct Merge {
    std::uint32_t rank;  // lower merges first
    std::int32_t id;     // the merged token
  };
  /// The bytes of each id (empty for an id the vocabulary does not use).
  std::vector<std::string> token_bytes;
  std::vector<bool> token_used;
  /// The id of each single byte.
  std::array<std::int32_t, 256> byte_id{};
  /// (left id << 32 | right id) -> the merge of the pair.
  std::unordered_map<std::uint64_t, Merge> merges;
  std::optional<std::int32_t> end_of_text;
  std::string description;
};

/// GPT-2's bytes_to_unicode: the printable character standing for each byte
/// in encoder.json and vocab.bpe ('!'..'~', U+00A1..U+00AC and U+00AE..U+00FF
/// stand for themselves; the 68 other bytes are U+0100.. in order).
std::array<char32_t, 256> gpt2_byte_to_unicode();

/// Reads encoder.json (or vocab.json) and vocab.bpe (or merges.txt). Throws
/// IoError naming the file, and the line of a malformed merge.
BpeVocabulary read_gpt2_vocabulary(const std::string& encoder_path, const std::string& merges_path);

/// Reads a tiktoken rank file (lines "<base64 bytes> <rank>"). Throws IoError
/// naming the file and line; kNotSupported for a vocabulary whose
/// pre-tokenizer is not GPT-2's (more than 50280 ranks: cl100k_base, o200k_base).
BpeVocabulary read_tiktoken_vocabulary(const std::string& path);

/// The most tokens, end of text included, a vocabulary split by GPT-2's
/// pattern is taken to have without a tokenizer.json that says so (GPT-2
/// 50257, RoBERTa 50265, p50k_base's 50280 ranks and its end of text): a
/// larger one (cl100k_base, Qwen2) splits text with another pattern, which
/// is not implemented.
inline constexpr std::int64_t kGpt2PatternMaxTokens = 50281;

/// Refuses, by name (kNotSupported, naming the file and the setting), a
/// Hugging Face tokenizer.json whose text is prepared otherwise than
/// GPT-2's: a normalizer, or a pre-tokenizer other than ByteLevel with
/// GPT-2's pattern (use_regex) and no prefix space. Its vocabulary and
/// merges are not read (vocab.json and merges.txt hold them). IoError for a
/// file that is not JSON.
void check_gpt2_text_splitting(const std::string& tokenizer_json);

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeVocabulary vocabulary);

  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> ids) const override;
  std::int64_t vocab_size() const override { return std::int64_t(vocab_.token_bytes.size()); }
  std::optional<std::int32_t> end_of_text() const override { return vocab_.end_of_text; }
  std::string description() const override { return vocab_.description; }

  /// The ids of one piece, merged without the cache. `heap` picks the
  /// O(n log n) merge loop (used for long pieces) over the O(n^2) one;
  /// both give the same ids (tests compare them).
  void merge_piece(std::string_view piece, bool heap, std::vector<std::int32_t>& out) const;

 private:
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
  const BpeVocabulary::Merge* find_merge(std::int32_t left, std::int32_t right) const;

  BpeVocabulary vocab_;
  // Pieces repeat (" the", ","): their ids are kept, up to kCacheEntries
  // pieces of at most kCachePieceBytes bytes; then the cache starts afresh.
  // The cache is cut by the piece's hash into kCacheShards parts, each with
  // its own lock (a part starts afresh when it holds its share of the
  // entries), so that threads encoding at once seldom wait for each other.
  static constexpr std::size_t kCacheEntries = 1 << 18;
  static constexpr std::size_t kCachePieceBytes = 64;
  static constexpr std::size_t kCacheShards = 64;
  struct PieceHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct alignas(64) CacheShard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<std::int32_t>, PieceHash, std::equal_to<>> pieces;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace ht::data::detail
